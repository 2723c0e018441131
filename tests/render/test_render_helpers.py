"""The cloud-config validator every render test trusts (``render_helpers``): it must refuse."""

from __future__ import annotations

import pytest
from render_helpers import GOLDEN, assert_valid_cloud_config, cloud_init_schema


@pytest.mark.parametrize(
    "bad",
    [
        "#cloud-config\nruncmd: 5\n",
        "#cloud-config\nwrite_files:\n- content: no path\n",
        "runcmd: [missing-header]\n",
        "#cloud-config\nusers:\n- name: x\n  lock_passwd: 'yes'\n",
    ],
)
def test_validator_rejects_bad_cloud_config(bad: str) -> None:
    ok, output = cloud_init_schema(bad)
    assert not ok, output
    with pytest.raises(AssertionError):
        assert_valid_cloud_config(bad)


def test_validator_rejects_keys_cloud_init_ignores() -> None:
    with pytest.raises(AssertionError, match="silently ignore"):
        assert_valid_cloud_config("#cloud-config\nruncmdd: [a]\n")


def test_validator_rejects_broken_golden() -> None:
    text = (GOLDEN / "v1beta1-v1beta4" / "worker-join.cloud-config").read_text()
    broken = text.replace("permissions: '0755'", "permissions: [0755]")
    assert broken != text
    assert not cloud_init_schema(broken)[0]

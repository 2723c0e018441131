"""Machine references and the bundle index, directly: one rule for names everywhere."""

from __future__ import annotations

import pytest

from bootstrap.errors import TerminalError
from bootstrap.render.names import is_label, is_subdomain
from bootstrap.render.resolve import Bundle, split_ref


@pytest.mark.parametrize(
    ("text", "ref"),
    [("worker-0", ("default", "worker-0")), ("prod/md-0", ("prod", "md-0")),
     ("prod/a.b", ("prod", "a.b"))],
)  # fmt: skip
def test_split_ref(text: str, ref: tuple[str, str]) -> None:
    assert split_ref(text) == ref


@pytest.mark.parametrize("text", ["a..b", "Worker_0", "prod/x/y", "Prod/x", "a.", "-a", ""])
def test_split_ref_refuses_what_is_not_a_name(text: str) -> None:
    with pytest.raises(TerminalError) as caught:
        split_ref(text)
    assert caught.value.reason == "InvalidMachineRef"


@pytest.mark.parametrize(
    ("value", "label", "subdomain"),
    [("a", True, True), ("a-b", True, True), ("a.b", False, True), ("a..b", False, False),
     ("A", False, False), ("a" * 63, True, True), ("a" * 64, False, True),
     ("a" * 253, False, True), ("a" * 254, False, False), ("a\n", False, False)],
)  # fmt: skip
def test_names_follow_kubernetes(value: str, label: bool, subdomain: bool) -> None:
    assert (is_label(value), is_subdomain(value)) == (label, subdomain)


def test_bundle_refuses_an_object_name_the_http_path_would_refuse() -> None:
    """The loader and serve agree: ``a..b`` is no Kubernetes name anywhere."""
    with pytest.raises(TerminalError) as caught:
        Bundle([{"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "a..b"}}])
    assert "metadata.name" in str(caught.value)

"""The node's report endpoint and credential in the rendered script config (both formats)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from bootstrap.render import RenderOptions
from bootstrap.render.batch import render_all
from bootstrap.render.loader import load_paths
from bootstrap.render.resolve import Bundle
from bootstrap.render.result import StatusReport

REPO = Path(__file__).resolve().parents[2]
REPORT = StatusReport("https://mgmt.example:9443/v1/reports/default/demo-md-0", "nsr1.a.b")
PEM = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"
WITH_CA = StatusReport(REPORT.url, "nsr1.a.b", ca=PEM)


def _worker(options: RenderOptions) -> dict[str, dict[str, str]]:
    bundle = Bundle(load_paths([str(REPO / "examples")]))
    names = [f"{ns}/{name}" for ns, name in bundle.machines]
    batch = render_all(bundle, names, options)
    result = next(r for r in batch.results if r.machine == "default/demo-md-0")
    return {f["path"]: f for f in yaml.safe_load(result.userdata)["write_files"]}


@pytest.mark.parametrize(
    ("report", "expected"),
    [
        (None, None),
        (REPORT, {"reportUrl": REPORT.url, "reportCredential": "nsr1.a.b"}),
        (WITH_CA, {"reportUrl": REPORT.url, "reportCredential": "nsr1.a.b", "reportCA": PEM}),
    ],
)
def test_report_settings_reach_the_script_config_and_the_credential_is_redacted(
    report: StatusReport | None, expected: dict[str, str] | None
) -> None:
    files = _worker(RenderOptions(unsafe_skip_ca_verification=True, status_report=report))
    config = files["/run/kubeadm/nodesmith-bootstrap.json"]
    assert config["permissions"] == "0600"
    cfg = json.loads(config["content"])
    got = {k: cfg[k] for k in ("reportUrl", "reportCredential", "reportCA") if k in cfg} or None
    assert got == expected
    assert ("nsr1.a.b" in cfg["redact"]) is (report is not None)


def test_the_credential_never_shows_in_a_repr() -> None:
    assert "nsr1.a.b" not in repr(REPORT) and "nsr1.a.b" not in repr(
        RenderOptions(status_report=REPORT)
    )

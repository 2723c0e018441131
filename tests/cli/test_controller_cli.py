"""``nodesmith controller run``: a bad flag is a usage error naming it, before anything starts."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest


@pytest.mark.parametrize(
    ("flags", "named"),
    [
        (["--workers", "0"], "--workers"),
        (["--bootstrap-token-ttl", "15"], "--bootstrap-token-ttl"),
        (["--bootstrap-token-ttl", "0s"], "--bootstrap-token-ttl"),
        (["--lease-duration", "soon"], "--lease-duration"),
        (["--metrics-bind", "8080"], "--metrics-bind"),
        (["--report-bind", "host:99999"], "--report-bind"),
        (["--report-url", "mgmt.example:9443"], "--report-url"),
        (["--report-tls-cert", "c.pem"], "--report-tls-cert"),
        (["--report-credential-ttl", "4d"], "--report-credential-ttl"),
        (["--report-url", "https://m:1", "--report-ca", "missing.pem"], "--report-ca"),
        (["--report-url", "https://m:1", "--report-ca", "{tmp}/not-pem"], "not-pem"),
        (["--report-url", "https://m:1", "--report-ca", "{tmp}/apiserver.crt"], "not a CA"),
        (["--report-ca", "{tmp}/ca.crt"], "without --report-url"),
    ],
)
def test_bad_flags_exit_2_naming_the_flag(tmp_path: Path, flags: list[str], named: str) -> None:
    from bootstrap.kubernetes.apiserver import loopback_certificates

    loopback_certificates(tmp_path)  # ca.crt, and apiserver.crt: a certificate but no CA
    (tmp_path / "not-pem").write_text("hello\n")
    flags = [f.replace("{tmp}", str(tmp_path)) for f in flags]
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text("apiVersion: v1\nkind: Config\n")
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "bootstrap.cli",
            "controller",
            "run",
            f"--kubeconfig={kubeconfig}",
            *flags,
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2, result.stderr
    assert named in result.stderr and "Traceback" not in result.stderr


def test_a_missing_kubeconfig_is_named(tmp_path: Path) -> None:
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "bootstrap.cli",
            "controller",
            "run",
            f"--kubeconfig={tmp_path / 'nope'}",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert "--kubeconfig" in result.stderr and "nope" in result.stderr

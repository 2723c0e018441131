"""``nodesmith verify``: prove with the readiness suite that a booted node is ready to join.

Either boots IMAGE for a Machine (``vm up``), runs the suite, reports and stops the VM, or runs
the suite against an existing node (``--host ssh://user@host:port``). The suite is the testinfra
one in ``tests/node`` (shipped in the wheel as ``bootstrap/_data/tests-node``); it runs in a
child pytest so its results, JUnit XML and JSON report are exactly what running it by hand gives.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import urllib.parse
from pathlib import Path
from typing import Any

from bootstrap.errors import UsageError, bad_usage
from bootstrap.resources import data_dir

EXIT_CHECKS_FAILED = 1


def suite_dir() -> Path:
    """Where the readiness suite lives: in the wheel, or in a checkout."""
    return data_dir("tests-node")


def testinfra_spec(host: str, identity: str | None) -> str:
    """``ssh://user@host:port`` (or ``paramiko://...``) as a testinfra paramiko host spec."""
    url = urllib.parse.urlsplit(host)
    if url.scheme not in ("ssh", "paramiko") or not url.hostname:
        raise bad_usage("--host", host, "must look like ssh://user@host:port")
    user = f"{url.username}@" if url.username else ""
    port = f":{url.port}" if url.port else ""
    query = dict(urllib.parse.parse_qsl(url.query))
    if identity:
        query["ssh_identity_file"] = identity
    qs = f"?{urllib.parse.urlencode(query)}" if query else ""
    return f"paramiko://{user}{url.hostname}{port}{qs}"


def run_suite(
    spec: str,
    *,
    report_json: Path,
    junit: Path | None = None,
    known_hosts: Path | None = None,
    machine_name: str | None = None,
    kubelet_version: str | None = None,
    rendered_userdata: Path | None = None,
    expect_bootstrap: str = "Succeeded",
    extra: list[str] | None = None,
) -> dict[str, Any]:
    """Run tests/node against ``spec`` in a child pytest; return its JSON report."""
    suite = suite_dir()
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        str(suite),
        f"--confcutdir={suite}",
        "-p",
        "no:cacheprovider",
        "-q",
        "--no-header",
        f"--hosts={spec}",
        f"--report-json={report_json}",
        f"--expect-bootstrap={expect_bootstrap}",
        "-o",
        "addopts=",
        "-o",
        "junit_family=xunit2",
        "-o",
        "junit_suite_name=node-readiness",
        "--rootdir",
        str(suite),
    ]
    if junit:
        cmd.append(f"--junitxml={junit}")
    if known_hosts:
        cmd.append(f"--known-hosts={known_hosts}")
    if machine_name:
        cmd.append(f"--machine-name={machine_name}")
    if kubelet_version:
        cmd.append(f"--kubelet-version={kubelet_version}")
    if rendered_userdata:
        cmd.append(f"--rendered-userdata={rendered_userdata}")
    cmd += extra or []
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
    if not report_json.is_file():
        raise UsageError(
            f"the readiness suite did not run (exit {proc.returncode}):\n"
            f"{(proc.stdout + proc.stderr)[-2000:]}"
        )
    report: dict[str, Any] = json.loads(report_json.read_text(encoding="utf-8"))
    report["pytestExitCode"] = proc.returncode
    if proc.returncode not in (0, 1):
        report["ok"] = False
        report.setdefault("errors", []).append((proc.stdout + proc.stderr)[-2000:])
    return report


def print_report(report: dict[str, Any], out: Any = None) -> None:
    """The table for people: one row per check, then nodeInfo."""
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    console = Console(file=out or sys.stdout, width=140)
    table = Table(title=f"node readiness: {report.get('host', '')}")
    table.add_column("check")
    table.add_column("result")
    table.add_column("detail", overflow="fold")
    styles = {"passed": "green", "failed": "bold red", "skipped": "yellow"}
    for check in report.get("checks", []):
        outcome = check["outcome"]
        table.add_row(
            escape(check["check"]),
            f"[{styles.get(outcome, '')}]{outcome.upper()}[/]",
            escape(check.get("message", "")),
        )
    console.print(table)
    info = report.get("nodeInfo", {})
    for key in (
        "kubeletVersion",
        "containerRuntimeVersion",
        "kernelVersion",
        "osImage",
        "architecture",
        "machineID",
        "bootID",
    ):
        console.print(f"  {key:<24} {escape(str(info.get(key)))}")
    s = report.get("summary", {})
    verdict = "[green]READY[/]" if report.get("ok") else "[bold red]NOT READY[/]"
    console.print(
        f"{verdict}: {s.get('passed', 0)} passed, {s.get('failed', 0)} failed, "
        f"{s.get('skipped', 0)} skipped"
    )


def machine_version(machine: dict[str, Any]) -> str | None:
    spec = machine.get("spec") or {}
    version = spec.get("version") or (spec.get("versions") or {}).get("kubelet")
    return str(version) if version else None


def expected_bootstrap(text: str) -> str:
    """``Succeeded``, ``Failed`` or ``Failed:REASON``: the outcome a node should report."""
    phase, _, reason = text.partition(":")
    if phase not in ("Succeeded", "Failed") or (reason and phase != "Failed"):
        raise argparse.ArgumentTypeError(
            f"expected Succeeded, Failed or Failed:REASON (got {text!r})"
        )
    return text

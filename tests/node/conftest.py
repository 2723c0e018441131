"""The node readiness suite: testinfra checks that a booted machine is ready to join a cluster.

Runs on its own against any node reachable over SSH with password-less sudo::

    pytest tests/node --hosts='paramiko://USER@127.0.0.1:PORT?ssh_identity_file=KEY' \
        [--known-hosts FILE] [--machine-name NAME] [--kubelet-version v1.31.4] \
        [--rendered-userdata FILE] [--expect-bootstrap Succeeded|Failed] [--report-json FILE]

``nodesmith verify`` runs exactly this suite and turns ``--report-json`` into its table. The
options only sharpen what is checked; without them the node's own cloud-init data is the
reference (its meta-data hostname, its user-data files). Checks that cannot apply are skipped
with the reason, never passed.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import paramiko
import pytest
import testinfra
import yaml

from bootstrap.vm.verify import expected_bootstrap

NODE_INFO_KEY = pytest.StashKey[dict[str, Any]]()
RESULTS_KEY = pytest.StashKey[list[dict[str, Any]]]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("nodesmith node readiness")
    group.addoption(
        "--known-hosts",
        default=None,
        help="pin the node's SSH host key: refuse any key not in this file",
    )
    group.addoption(
        "--machine-name",
        default=None,
        help="expected hostname (default: the node's cloud-init local-hostname)",
    )
    group.addoption(
        "--kubelet-version",
        default=None,
        help="the Machine's Kubernetes version the kubelet must have",
    )
    group.addoption(
        "--rendered-userdata",
        default=None,
        help="the cloud-config nodesmith rendered; its write_files are checked",
    )
    group.addoption(
        "--expect-bootstrap",
        default="Succeeded",
        type=expected_bootstrap,
        help="the bootstrap outcome this node should show: Succeeded, Failed or "
        "Failed:REASON (e.g. Failed:KubeadmNotFound on an image without kubeadm)",
    )
    group.addoption(
        "--cloud-init-timeout",
        default=900,
        type=int,
        help="seconds to wait for cloud-init to finish before checking",
    )
    group.addoption("--report-json", default=None, help="write results and nodeInfo as JSON")


_HERE = Path(__file__).resolve().parent


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """Without ``--hosts`` there is no node: a plain ``pytest tests`` run leaves the suite out
    (tests/test_vm.py runs it against real VMs through ``nodesmith verify``)."""
    if not _host_spec(config) and _HERE in (collection_path, *collection_path.parents):
        return True
    return None


def pytest_configure(config: pytest.Config) -> None:
    config.stash[RESULTS_KEY] = []
    config.stash[NODE_INFO_KEY] = {}


def _pinned_paramiko(backend: Any, known_hosts: str) -> paramiko.SSHClient:
    client = paramiko.SSHClient()
    client.load_host_keys(known_hosts)
    client.set_missing_host_key_policy(paramiko.RejectPolicy())
    client.connect(
        backend.host.name,
        port=int(backend.host.port or 22),
        username=backend.host.user,
        key_filename=backend.ssh_identity_file,
        timeout=backend.timeout,
        allow_agent=False,
        look_for_keys=False,
    )
    return client


@pytest.fixture(scope="session")
def host(pytestconfig: pytest.Config) -> Any:
    """The one node under test, from ``--hosts`` (commands run with sudo unless root)."""
    spec = _host_spec(pytestconfig)
    if not spec or "," in spec:
        pytest.exit("tests/node needs exactly one --hosts=paramiko://user@host:port?...", 2)
    node = testinfra.get_host(spec)
    user = node.backend.host.user if node.backend.host else None
    if user and user != "root":
        node = testinfra.get_host(spec, sudo=True)
    known = pytestconfig.getoption("known_hosts")
    if known and node.backend.NAME == "paramiko":
        node.backend.__dict__["client"] = _pinned_paramiko(node.backend, known)
    return node


@pytest.fixture(scope="session", autouse=True)
def cloud_init_finished(host: Any, pytestconfig: pytest.Config) -> str:
    """Every check looks at a node whose cloud-init has finished (or given up)."""
    limit = pytestconfig.getoption("cloud_init_timeout")
    res = host.run(f"timeout {limit} cloud-init status --wait --long")
    out: str = res.stdout
    return out


@pytest.fixture(scope="session")
def bootstrap_failed(host: Any) -> bool:
    """The node's bootstrap reported Failed. Its script then exits 1, as CABPK's runcmd does,
    so cloud-init records a scripts-user failure and cloud-final.service fails: that one
    failure is the bootstrap's, judged by test_bootstrap_status, not a cloud-init defect."""
    f = host.file("/run/cluster-api/bootstrap-status.json")
    return bool(f.exists and json.loads(f.content_string).get("phase") == "Failed")


@pytest.fixture(scope="session")
def node_info(pytestconfig: pytest.Config) -> dict[str, Any]:
    info: dict[str, Any] = pytestconfig.stash[NODE_INFO_KEY]
    return info


@pytest.fixture(scope="session")
def instance_data(host: Any) -> dict[str, Any]:
    """cloud-init's view of this instance (meta-data, datasource)."""
    raw = host.file("/run/cloud-init/instance-data.json").content_string
    data: dict[str, Any] = json.loads(raw)
    return data


@pytest.fixture(scope="session")
def userdata(host: Any, pytestconfig: pytest.Config) -> dict[str, Any]:
    """The cloud-config whose files are checked: the rendered one if given, else the node's."""
    given = pytestconfig.getoption("rendered_userdata")
    if given:
        text = Path(given).read_text(encoding="utf-8")
    else:
        text = host.file("/var/lib/cloud/instance/user-data.txt").content_string
    doc = yaml.safe_load(text)
    if not isinstance(doc, dict):
        pytest.fail("userdata is not a #cloud-config mapping")
    return doc


# --- the report ---------------------------------------------------------------------------------


def _message(report: pytest.TestReport) -> str:
    detail = dict(report.user_properties).get("detail")
    if report.passed and detail:
        return str(detail)
    if report.skipped and isinstance(report.longrepr, tuple):
        return str(report.longrepr[2]).removeprefix("Skipped: ")
    if report.failed:
        crash = getattr(report.longrepr, "reprcrash", None)
        if crash is not None:
            return str(crash.message)
        return str(report.longrepr)[-500:]
    return ""


@pytest.hookimpl(trylast=True)
def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.when == "call" or (report.when == "setup" and not report.passed):
        config = getattr(report, "_config", None) or _CONFIG[0]
        config.stash[RESULTS_KEY].append(
            {
                "check": report.nodeid.split("::", 1)[-1],
                "file": report.nodeid.split("::", 1)[0].rsplit("/", 1)[-1],
                "outcome": report.outcome,
                "message": _message(report),
                "seconds": round(report.duration, 2),
            }
        )


_CONFIG: list[pytest.Config] = []


@pytest.hookimpl(tryfirst=True)
def pytest_sessionstart(session: pytest.Session) -> None:
    _CONFIG[:] = [session.config]


def _host_spec(config: pytest.Config) -> str:
    hosts = config.getoption("hosts") or []
    if isinstance(hosts, str):
        hosts = [h for h in hosts.split(",") if h]
    return str(hosts[0]) if hosts else ""


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    path = session.config.getoption("report_json")
    if not path:
        return
    results = session.config.stash[RESULTS_KEY]
    counts = {
        k: sum(1 for r in results if r["outcome"] == k) for k in ("passed", "failed", "skipped")
    }
    doc = {
        "kind": "NodeReadinessReport",
        "generatedAt": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "host": _host_spec(session.config).split("?", 1)[0],
        "ok": counts["failed"] == 0 and counts["passed"] > 0 and exitstatus == 0,
        "summary": counts,
        "nodeInfo": session.config.stash[NODE_INFO_KEY].get("nodeInfo", {}),
        "runtime": session.config.stash[NODE_INFO_KEY].get("runtime", {}),
        "checks": results,
    }
    tmp = Path(path).with_name(Path(path).name + ".tmp")
    tmp.write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
    tmp.replace(path)

"""Real VMs from the real image: vm up/down, verify, the bootstrap outcomes, two nodes at once.

Two VMs boot at the same time from the session's ``built_image`` (TCG, no -kernel: GRUB from
the image's own disk):

* ``worker-a`` via ``nodesmith vm up``; its kubeadm stand-in fails transiently twice then
  succeeds, through the real cloud-init path. Afterwards the bootstrap script is re-run on it
  with the stand-in told to fail terminally, then to succeed.
* ``worker-b`` via ``nodesmith verify IMAGE ... --keep``: the end-to-end proof (suite green but
  for the explicitly skipped kubelet checks), then kept up to compare identities with worker-a.

kubeadm cannot exist here; the stand-in (tests/standin/kubeadm) is delivered through the test
bundle's ``files`` and is never part of the image.
"""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import paramiko
import pytest
from standin.bundle import (
    BOOTSTRAP,
    BOOTSTRAP_CONFIG,
    CALLS,
    CONTROL_PATH,
    SENTINEL,
    STATUS,
    worker_bundle,
)

from bootstrap.hostutil import alive
from bootstrap.vm import qemu as vm

pytestmark = [pytest.mark.vm, pytest.mark.timeout(1800)]

REPO = Path(__file__).resolve().parents[2]
NODESMITH = str(Path(sys.executable).parent / "nodesmith")
RENDER_FLAGS = ["--no-image-manifest", "--unsafe-skip-ca-verification", "--ssh-timeout", "900"]
BACKOFF = 1  # seconds, from the Machine annotation bootstrap.nodesmith.dev/retry-backoff
# examples/worker.yaml does what CAPV's and CAPZ's templates do: a static pod in the user's
# files (as kube-vip), and a pre-command editing the kubeadm file where CABPK writes it (sed -i).
EDITED_LABELS = "nodesmith.dev/pool=md-0,nodesmith.dev/kubeadm-file=edited"
USER_STATIC_POD = "nodesmith-static.yaml"


@dataclass
class Booted:
    state_root: Path
    bundle: Path
    image: Path
    up_stdout: str
    verify_rc: int
    verify_out: str
    report: dict[str, Any]
    junit: Path
    env: dict[str, str]

    def state(self, name: str) -> vm.VMState:
        return vm.VMState.load(name, self.state_root)


def _ssh(state: vm.VMState, command: str, timeout: float = 120) -> tuple[int, str]:
    client = vm.pinned_client(state)
    try:
        _, out, err = client.exec_command(command, timeout=timeout)
        text = out.read().decode() + err.read().decode()
        return out.channel.recv_exit_status(), text
    finally:
        client.close()


def _json(state: vm.VMState, path: str) -> Any:
    rc, out = _ssh(state, f"sudo cat {path}")
    assert rc == 0, out
    return json.loads(out)


@pytest.fixture(scope="module")
def booted(built_image: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Booted]:
    work = tmp_path_factory.mktemp("vms")
    root = work / "state"
    env = dict(os.environ, NODESMITH_STATE_DIR=str(root))
    image = built_image / "image.qcow2"
    bundle = worker_bundle(
        work,
        {
            "worker-a": {"mode": "transient", "failures": 2},
            "worker-b": {"mode": "succeed"},
        },
        backoff=BACKOFF,
    )
    junit, report = work / "b.xml", work / "b.json"
    up = subprocess.Popen(
        [
            NODESMITH,
            "vm",
            "up",
            str(image),
            "-f",
            str(bundle),
            "--machine",
            "default/worker-a",
            "--accel",
            "auto",
            *RENDER_FLAGS,
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    ver = subprocess.Popen(
        [
            NODESMITH,
            "verify",
            str(image),
            "-f",
            str(bundle),
            "--machine",
            "default/worker-b",
            *RENDER_FLAGS,
            "--junit",
            str(junit),
            "--json",
            str(report),
            "--keep",
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        up_out, up_err = up.communicate(timeout=1000)
        ver_out, _ = ver.communicate(timeout=1500)
        assert up.returncode == 0, up_err[-3000:]
        assert report.is_file(), ver_out[-3000:]
        yield Booted(
            root,
            bundle,
            image,
            up_out,
            ver.returncode,
            ver_out,
            json.loads(report.read_text()),
            junit,
            env,
        )
    finally:
        for proc in (up, ver):
            if proc.poll() is None:
                proc.kill()
        for name in ("worker-a", "worker-b"):
            if (root / name / "vm.json").exists():
                vm.down(name, root)


def test_vm_up_prints_ssh_address_and_boots_an_overlay(booted: Booted) -> None:
    state = booted.state("worker-a")
    assert booted.up_stdout.splitlines()[0] == f"ssh://nodesmith@127.0.0.1:{state.port}"
    info = json.loads(
        subprocess.run(
            ["qemu-img", "info", "-U", "--output=json", str(state.path / "overlay.qcow2")],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    )
    assert info["backing-filename"] == str(booted.image.resolve())
    qemu = (state.path / "qemu.cmd").read_text()
    assert f"restrict=on,hostfwd=tcp:127.0.0.1:{state.port}-:22" in qemu
    assert "-kernel" not in qemu
    assert state.accel == "tcg" or "kvm_pvm" not in state.accel_reason


def test_verify_image_end_to_end_green_but_kubelet(booted: Booted) -> None:
    report = booted.report
    checks = {c["check"]: c for c in report["checks"]}
    failed = {k: c["message"] for k, c in checks.items() if c["outcome"] == "failed"}
    assert booted.verify_rc == 0 and report["ok"], (failed, booted.verify_out[-3000:])
    skipped = {k: c["message"] for k, c in checks.items() if c["outcome"] == "skipped"}
    assert set(skipped) == {"test_kubelet_version", "test_kubelet_enabled"}, skipped
    assert all("no kubelet" in m for m in skipped.values()), skipped
    for must in (
        "test_cloud_init_no_module_failures",
        "test_cri_runtime_version",
        "test_bootstrap_status",
        "test_rendered_files_present",
        "test_hostname_is_machine_name",
        "test_ssh_host_keys_from_first_boot",
    ):
        assert checks[must]["outcome"] == "passed", checks[must]
    info = report["nodeInfo"]
    assert info["containerRuntimeVersion"].startswith("containerd://1.")
    assert info["kubeletVersion"] is None
    assert info["architecture"] == "amd64" and "Debian GNU/Linux 12" in info["osImage"]
    assert len(info["machineID"]) == 32 and info["bootID"]
    suite = ET.parse(booted.junit).getroot()
    suite = suite if suite.tag == "testsuite" else suite.find("testsuite")
    assert suite is not None
    assert int(suite.get("failures", "1")) == 0 and int(suite.get("errors", "1")) == 0
    assert int(suite.get("skipped", "0")) == 2
    assert "READY" in booted.verify_out and "test_cri_runtime_version" in booted.verify_out
    # --keep left worker-b running: the table's address is the one recorded.
    assert report["target"]["vm"] == "worker-b"


def test_standin_transient_failures_then_success_via_cloud_init(booted: Booted) -> None:
    state = booted.state("worker-a")
    _rc, _out = _ssh(state, "timeout 600 cloud-init status --wait")
    status = _json(state, STATUS)
    assert status["phase"] == "Succeeded", status
    assert status["reason"] == "Bootstrapped" and status["terminal"] is False
    assert status["attempts"] == 3
    history = status["history"]
    assert [h["exitCode"] for h in history] == [1, 1, 0]
    assert [h.get("backoff") for h in history] == [BACKOFF, 2 * BACKOFF, None]
    calls = [json.loads(line) for line in _ssh(state, f"sudo cat {CALLS}")[1].splitlines()]
    joins = [c for c in calls if c["verb"] == "join"]
    assert [c["attempt"] for c in joins] == [1, 2, 3]
    assert joins[0]["argv"] == ["join", "--config", "/run/kubeadm/kubeadm-join-config.yaml"]
    assert joins[0]["kinds"] == ["JoinConfiguration"]
    gaps = [b["time"] - a["time"] for a, b in itertools.pairwise(joins)]
    assert gaps[0] >= BACKOFF and gaps[1] >= 2 * BACKOFF, gaps  # exponential backoff
    assert [c["verb"] for c in calls].count("reset") == 2  # a reset after each failure
    assert _ssh(state, f"test -f {SENTINEL}")[0] == 0
    # every try read the file as the pre-command edited it, and found the user's static pod,
    # which each reset (emptying the manifests directory, as kubeadm's) had removed
    assert [c["kubeletExtraArgs"]["node-labels"] for c in joins] == [EDITED_LABELS] * 3
    assert [c["staticPods"] for c in joins] == [[USER_STATIC_POD]] * 3


def test_verify_host_against_running_node(booted: Booted, tmp_path: Path) -> None:
    state = booted.state("worker-a")
    out_json = tmp_path / "a.json"
    proc = subprocess.run(
        [
            NODESMITH,
            "verify",
            "--host",
            state.ssh_address,
            "-i",
            str(state.key_file),
            "--known-hosts",
            str(state.known_hosts),
            "--machine-name",
            "worker-a",
            "--userdata",
            str(state.userdata_file),
            "--json",
            str(out_json),
        ],
        env=booted.env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    report = json.loads(out_json.read_text())
    failed = [c for c in report["checks"] if c["outcome"] == "failed"]
    assert proc.returncode == 0, (failed, proc.stdout[-2000:], proc.stderr[-2000:])
    assert report["nodeInfo"]["machineID"] != booted.report["nodeInfo"]["machineID"]


def _rerun_bootstrap(state: vm.VMState, control: dict[str, Any]) -> tuple[int, str]:
    """Reset the node to 'not joined', give the stand-in new orders, run the script again."""
    script = " && ".join(
        [
            "sudo rm -f /etc/kubernetes/kubelet.conf /run/cluster-api/* " + CALLS,
            f"echo '{json.dumps(control)}' | sudo tee {CONTROL_PATH} >/dev/null",
            f"sudo {BOOTSTRAP} {BOOTSTRAP_CONFIG}",
        ]
    )
    return _ssh(state, script)


def test_standin_terminal_failure_stops_at_once(booted: Booted) -> None:
    state = booted.state("worker-a")
    started = time.monotonic()
    rc, out = _rerun_bootstrap(state, {"mode": "terminal", "code": 2})
    assert rc != 0, out
    status = _json(state, STATUS)
    assert status["phase"] == "Failed" and status["terminal"] is True, status
    assert status["reason"] == "PreflightFailed"
    assert status["attempts"] == 1 and "Some fatal errors occurred" in status["message"]
    assert _ssh(state, f"sudo test -e {SENTINEL}")[0] != 0, "sentinel written on failure"
    calls = _ssh(state, f"sudo cat {CALLS}")[1].splitlines()
    assert len(calls) == 1, calls  # no retry, no reset
    assert time.monotonic() - started < 30


def test_standin_success_first_time_then_idempotent(booted: Booted) -> None:
    state = booted.state("worker-a")
    rc, out = _rerun_bootstrap(state, {"mode": "succeed"})
    assert rc == 0, out
    status = _json(state, STATUS)
    assert status["phase"] == "Succeeded" and status["attempts"] == 1, status
    assert [h.get("backoff") for h in status["history"]] == [None]
    assert _ssh(state, f"test -f {SENTINEL}")[0] == 0
    rc, out = _ssh(state, f"sudo {BOOTSTRAP} {BOOTSTRAP_CONFIG}")
    assert rc == 0 and "this node has joined; not running kubeadm again" in out, out
    assert len(_ssh(state, f"sudo cat {CALLS}")[1].splitlines()) == 1
    assert _json(state, STATUS) == status  # the second run keeps what the first recorded


def test_two_vms_from_one_image_have_distinct_identities(booted: Booted) -> None:
    a, b = booted.state("worker-a"), booted.state("worker-b")
    assert a.image == b.image and a.port != b.port
    ids = {}
    for st in (a, b):
        rc, out = _ssh(
            st, "hostname; cat /etc/machine-id; sudo cat /etc/ssh/ssh_host_*_key.pub | sha256sum"
        )
        assert rc == 0, out
        ids[st.name] = out.split()
        client = vm.pinned_client(st)
        transport = client.get_transport()
        assert transport is not None
        served = transport.get_remote_server_key()
        ids[st.name].append(served.get_base64())
        client.close()
    assert ids["worker-a"][0] == "worker-a" and ids["worker-b"][0] == "worker-b"
    for i, what in enumerate(["hostname", "machine-id", "host keys", "-", "served key"]):
        if what != "-":
            assert ids["worker-a"][i] != ids["worker-b"][i], what


def test_pinning_refuses_another_vms_host_key(booted: Booted) -> None:
    a, b = booted.state("worker-a"), booted.state("worker-b")
    client = paramiko.SSHClient()
    client.load_host_keys(str(b.known_hosts))
    client.get_host_keys().clear()
    line = b.known_hosts.read_text().split()
    client.get_host_keys().add(
        f"[127.0.0.1]:{a.port}",
        line[1],
        paramiko.Ed25519Key(data=__import__("base64").b64decode(line[2])),
    )
    client.set_missing_host_key_policy(paramiko.RejectPolicy())
    with pytest.raises(paramiko.BadHostKeyException):
        client.connect(
            "127.0.0.1",
            port=a.port,
            username=a.user,
            key_filename=str(a.key_file),
            allow_agent=False,
            look_for_keys=False,
        )


def test_vm_down_stops_and_removes_overlay(booted: Booted) -> None:
    for name in ("worker-a", "worker-b"):
        state = booted.state(name)
        proc = subprocess.run(
            [NODESMITH, "vm", "down", name],
            env=booted.env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert proc.returncode == 0, proc.stderr
        assert not state.path.exists()
        assert not Path(f"/proc/{state.pid}").exists() or not alive(state.pid)


def test_vm_up_refuses_machine_the_image_cannot_serve(built_image: Path, tmp_path: Path) -> None:
    """With the image's manifest (no kubelet), a v1.20 worker is refused before booting."""
    bundle = worker_bundle(tmp_path, {"worker-c": {"mode": "succeed"}})
    env = dict(os.environ, NODESMITH_STATE_DIR=str(tmp_path / "state"))
    proc = subprocess.run(
        [
            NODESMITH,
            "vm",
            "up",
            str(built_image / "image.qcow2"),
            "-f",
            str(bundle),
            "--machine",
            "worker-c",
            "--unsafe-skip-ca-verification",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 65, proc.stderr
    assert "kubelet" in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "state").exists()

"""The on-node bootstrap script, run for real on this host inside a private mount namespace.

The script under test is the packed copy taken out of rendered userdata, i.e. exactly what a
node receives. /run is a fresh tmpfs and /etc an overlay inside the namespace, so the host is
never touched. kubeadm cannot exist here: a kubeadm STAND-IN (written below, never shipped)
records its arguments and exits as each test tells it to.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from proc import is_alive
from render_helpers import file_bytes

from bootstrap.render import RenderOptions
from bootstrap.render.batch import render_all
from bootstrap.render.bootstrap_script import shell_config
from bootstrap.render.loader import load_paths
from bootstrap.render.resolve import Bundle
from bootstrap.resources import data_dir

REPO = Path(__file__).resolve().parents[2]
# Every test runs both twins: the Python script cloud-init nodes get and the bash one Ignition
# nodes (Flatcar, no python3) get; the same table proves the same phases, reasons and retries.
INTERPRETERS = {"python": "/usr/bin/python3", "bash": "/bin/bash"}
IMPL = "python"


@pytest.fixture(autouse=True, params=sorted(INTERPRETERS))
def implementation(request: pytest.FixtureRequest) -> Iterator[str]:
    global IMPL
    IMPL = request.param
    yield IMPL
    IMPL = "python"


pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("unshare") is None,
    reason="needs root and unshare(1) for a private mount namespace",
)

STANDIN = textwrap.dedent("""\
    #!/usr/bin/python3
    # kubeadm STAND-IN for nodesmith's tests; never part of an image.
    import json, os, sys
    args = sys.argv[1:]
    with open("/run/standin/calls.jsonl", "a") as f:
        f.write(json.dumps(args) + "\\n")
    with open("/run/standin/seen.json", "w") as f:  # what the pre-commands left it
        json.dump({"PROXY": os.environ.get("PROXY"), "cwd": os.getcwd()}, f)
    pods = "/etc/kubernetes/manifests"
    with open("/run/standin/manifests.jsonl", "a") as f:  # the static pods each call found
        names = sorted(os.listdir(pods)) if os.path.isdir(pods) else []
        found = {n: open(os.path.join(pods, n)).read() for n in names}
        f.write(json.dumps([args[0], found]) + "\\n")
    if args[:1] == ["reset"]:  # as the real one: "Deleting contents of directories"
        for d in (pods, "/etc/kubernetes/pki"):
            for n in os.listdir(d) if os.path.isdir(d) else []:
                os.remove(os.path.join(d, n))
        sys.exit(0)
    config = args[args.index("--config") + 1]
    text = open(config).read()
    if "kind: JoinConfiguration" not in text and "kind: InitConfiguration" not in text:
        print("stand-in: not a kubeadm config"); sys.exit(3)
    mode = open("/run/standin/mode").read().split()
    if mode[0] == "says":  # says CODE MESSAGE...: print MESSAGE, exit CODE
        print(" ".join(mode[2:])); sys.exit(int(mode[1]))
    if mode[0] == "ok":
        sys.exit(0)
    if mode[0] == "hang":  # a kubeadm that never returns, with a child of its own
        import subprocess, time
        child = subprocess.Popen(["sleep", "600"])
        open("/run/standin/child.pid", "w").write(str(child.pid))
        print("[wait-control-plane] waiting for the kubelet", flush=True)
        time.sleep(600)
    if mode[0] == "garbage":  # bytes that are not UTF-8, then exit CODE
        sys.stdout.buffer.write(b"\\xff\\xfe caf\\xe9 \\xc3( [preflight] failed\\n")
        sys.exit(int(mode[1]))
    if mode[0] == "transient":
        count = len([l for l in open("/run/standin/calls.jsonl") if '"reset"' not in l])
        if count <= int(mode[1]):
            os.makedirs(pods, exist_ok=True)  # a half-done init leaves its own static pods
            open(os.path.join(pods, "kube-apiserver.yaml"), "w").write("kubeadm's")
            print("error execution phase preflight: couldn't validate the identity of the "
                  "API Server: Get https://192.0.2.10:6443: connection refused; "
                  "token " + mode[2] if len(mode) > 2 else "connection refused")
            sys.exit(1)
        sys.exit(0)
    print("[preflight] Some fatal errors occurred"); sys.exit(int(mode[1]))
""")

RUNNER = textwrap.dedent("""\
    set -e
    T="$1"
    mount --make-rprivate /
    mount -t tmpfs tmpfs /run
    mount -t overlay overlay -o lowerdir=/etc,upperdir=$T/upper,workdir=$T/work /etc
    mkdir -p /run/kubeadm /run/standin
    cp $T/kubeadm.yaml "$(python3 -c 'import json,sys; c=json.load(open(sys.argv[1]));
    print(c["command"][3])' $T/config.json)"
    cp $T/mode /run/standin/mode
    if [ -f $T/joined ]; then mkdir -p /etc/kubernetes; touch /etc/kubernetes/kubelet.conf; fi
    if [ -f $T/status-before ]; then
        mkdir -p /run/cluster-api; cp $T/status-before /run/cluster-api/bootstrap-status.json
    fi
    if [ -f $T/read-only-status ]; then
        mkdir -p /run/cluster-api; mount -t tmpfs -o ro tmpfs /run/cluster-api
    fi
    set +e
    PATH=$T/bin:/usr/sbin:/usr/bin:/sbin:/bin $(cat $T/interpreter) $T/script $T/config \\
        > $T/out.txt 2>&1
    echo $? > $T/rc
    cp -a /run/cluster-api $T/result 2>/dev/null
    cp -a /run/standin $T/standin-result 2>/dev/null
    exit 0
""")


def _rendered(
    machine: str = "default/demo-md-0",
    annotations: dict[str, str] | None = None,
    version: str | None = None,
):
    objects = load_paths([str(REPO / "examples")])
    for obj in objects:
        if obj["kind"] == "Machine" and annotations:
            obj["metadata"].setdefault("annotations", {}).update(annotations)
        if obj["kind"] == "Machine" and version:
            obj["spec"]["version"] = version
    bundle = Bundle(objects)  # the whole cluster in one run: the workers join its init
    names = [f"{namespace}/{name}" for namespace, name in bundle.machines]
    batch = render_all(bundle, names, RenderOptions(unsafe_skip_ca_verification=True))
    assert not batch.failures, batch.failures
    result = next(r for r in batch.results if r.machine == machine)
    files = {f["path"]: f for f in yaml.safe_load(result.userdata)["write_files"]}
    return files


def _run(
    tmp_path: Path,
    mode: str,
    *,
    standin: bool = True,
    joined: bool = False,
    read_only_status: bool = False,
    status_before: dict[str, Any] | None = None,
    config: dict[str, Any] | None = None,
    files: dict[str, Any] | None = None,
    raw_config: str | None = None,
    **retry: str,
) -> dict[str, Any]:
    annotations = {f"bootstrap.nodesmith.dev/retry-{k}": v for k, v in retry.items()}
    files = files or _rendered(annotations=annotations)
    cfg = json.loads(files["/run/kubeadm/nodesmith-bootstrap.json"]["content"])
    cfg.update(config or {})
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    if IMPL == "python":  # the packed copy out of the rendered userdata
        script = file_bytes(files["/usr/local/sbin/nodesmith-bootstrap"])
        (tmp_path / "config").write_text(json.dumps(cfg))
    else:  # the bash twin Ignition nodes get, with the same config as bash variables
        script = (data_dir("cloudinit") / "nodesmith-bootstrap.sh").read_bytes()
        (tmp_path / "config").write_text(shell_config(cfg) if raw_config is None else raw_config)
    (tmp_path / "script").write_bytes(script)
    (tmp_path / "interpreter").write_text(INTERPRETERS[IMPL])
    (tmp_path / "kubeadm.yaml").write_text(files[cfg["command"][3]]["content"])
    (tmp_path / "mode").write_text(mode)
    for d in ("upper", "work", "bin"):
        (tmp_path / d).mkdir(exist_ok=True)
    if standin:
        (tmp_path / "bin" / "kubeadm").write_text(STANDIN)
        (tmp_path / "bin" / "kubeadm").chmod(0o755)
    if joined:
        (tmp_path / "joined").touch()
    if read_only_status:
        (tmp_path / "read-only-status").touch()
    if status_before is not None:
        (tmp_path / "status-before").write_text(json.dumps(status_before))
    (tmp_path / "runner.sh").write_text(RUNNER)
    started = time.monotonic()
    subprocess.run(
        ["unshare", "-m", "sh", str(tmp_path / "runner.sh"), str(tmp_path)], check=True, timeout=120
    )
    result: dict[str, Any] = {
        "seconds": time.monotonic() - started,
        "rc": int((tmp_path / "rc").read_text()),
        "out": (tmp_path / "out.txt").read_text(),
        "config": cfg,
    }
    status = tmp_path / "result" / "bootstrap-status.json"
    result["status"] = json.loads(status.read_text()) if status.exists() else None
    result["sentinel"] = (tmp_path / "result" / "bootstrap-success.complete").exists()
    calls = tmp_path / "standin-result" / "calls.jsonl"
    result["calls"] = (
        [json.loads(line) for line in calls.read_text().splitlines()] if calls.exists() else []
    )
    return result


def test_success_runs_pre_kubeadm_post_and_writes_sentinel(tmp_path: Path) -> None:
    r = _run(tmp_path, "ok")
    assert r["rc"] == 0, r["out"]
    st = r["status"]
    assert st["phase"] == "Succeeded" and st["reason"] == "Bootstrapped"
    assert st["terminal"] is False and st["attempts"] == 1 and st["role"] == "worker-join"
    assert st["startedAt"] <= st["finishedAt"]
    assert r["sentinel"]
    assert r["calls"] == [["join", "--config", "/run/kubeadm/kubeadm-join-config.yaml"]]


def test_transient_failures_retry_with_backoff_then_succeed(tmp_path: Path) -> None:
    r = _run(tmp_path, "transient 2 TOKEN", backoff="1", **{"max-backoff": "2"})
    assert r["rc"] == 0, r["out"]
    st = r["status"]
    assert st["phase"] == "Succeeded" and st["attempts"] == 3
    assert [h["exitCode"] for h in st["history"]] == [1, 1, 0]
    assert [h.get("backoff") for h in st["history"]] == [1, 2, None]
    # A half-done join is reset before the next try.
    assert [c[0] for c in r["calls"]] == ["join", "reset", "join", "reset", "join"]
    assert r["sentinel"]
    assert "Retrying" in r["out"] and "Running RunningJoin" in r["out"]


def test_a_retry_keeps_the_users_static_pods_and_drops_kubeadms(tmp_path: Path) -> None:
    """CAPV writes kube-vip's static pod (and its pre-commands edit it); kubeadm reset empties
    the directory between tries: the retried kubeadm must find the user's pod as it was."""
    write = ("mkdir -p /etc/kubernetes/manifests && "
             "echo 'kind: Pod # edited' > /etc/kubernetes/manifests/kube-vip.yaml")  # fmt: skip
    r = _run(tmp_path, "transient 1", backoff="1", config={"pre": [write]})
    assert r["rc"] == 0, r["out"]
    lines = (tmp_path / "standin-result" / "manifests.jsonl").read_text().splitlines()
    seen = [json.loads(line) for line in lines]
    user = {"kube-vip.yaml": "kind: Pod # edited\n"}
    assert seen == [
        ["join", user],  # the first try: what the pre-commands left
        ["reset", {**user, "kube-apiserver.yaml": "kubeadm's"}],  # after the failed try
        ["join", user],  # put back after the reset; kubeadm's own are not
    ]


def test_token_in_kubeadm_output_is_redacted_from_status_and_log(tmp_path: Path) -> None:
    files = _rendered(annotations={"bootstrap.nodesmith.dev/retry-backoff": "1"})
    token = json.loads(files["/run/kubeadm/nodesmith-bootstrap.json"]["content"])["redact"][0]
    assert token in files["/run/kubeadm/kubeadm-join-config.yaml"]["content"]
    r = _run(tmp_path, "transient 1 " + token, files=files)
    status_text = (tmp_path / "result" / "bootstrap-status.json").read_text()
    assert r["rc"] == 0 and r["status"]["attempts"] == 2
    assert "connection refused" in r["out"]  # the kubeadm output did reach the log ...
    assert token not in r["out"] and "<redacted>" in r["out"]  # ... without the token
    assert token not in status_text


def test_tokens_kubeadm_made_itself_are_redacted_too(tmp_path: Path) -> None:
    # kubeadm init prints "kubeadm join ... --token <new token>": not one nodesmith knows.
    other = "abcdef.0123456789abcdef"
    r = _run(tmp_path, "transient 1 " + other, backoff="1")
    assert r["rc"] == 0 and "connection refused" in r["out"]
    assert other not in r["out"] and "<redacted>" in r["out"]
    assert other not in (tmp_path / "result" / "bootstrap-status.json").read_text()


@pytest.mark.parametrize(("code", "reason"), [(2, "PreflightFailed"), (3, "ValidationFailed")])
def test_terminal_kubeadm_failure_stops_at_once(tmp_path: Path, code: int, reason: str) -> None:
    r = _run(tmp_path, f"terminal {code}", backoff="1")
    assert r["rc"] == 1
    st = r["status"]
    assert st["phase"] == "Failed" and st["reason"] == reason and st["terminal"] is True
    assert st["attempts"] == 1 and "fatal errors" in st["message"]
    assert not r["sentinel"]
    assert [c[0] for c in r["calls"]] == ["join"]  # no retry, no post-commands


# kubeadm's own words when the config is wrong; it exits 1 for most of them, which alone
# would read as transient. Each must stop at the first attempt, the reason naming the kind.
CONFIG_FAILURES = [
    (1, 'no kind "JoinConfiguration" is registered for version "kubeadm.k8s.io/v1beta3" in '
        'scheme "k8s.io/kubernetes/cmd/kubeadm/app/apis/kubeadm/scheme/scheme.go:31"',
     "ConfigVersionUnsupported"),
    (1, 'your configuration file uses an old API spec: "kubeadm.k8s.io/v1beta1"',
     "ConfigVersionUnsupported"),
    (1, 'error converting YAML to JSON: yaml: line 3: mapping values are not allowed here',
     "ConfigDecodeFailed"),
    (1, 'strict decoding error: unknown field "nodeRegistration.imagePullPolcy"',
     "ConfigDecodeFailed"),
    (1, 'json: cannot unmarshal number into Go struct field of type string',
     "ConfigDecodeFailed"),
    (1, 'nodeRegistration.name: Invalid value: "Worker_0": a lowercase RFC 1123 subdomain',
     "ValidationFailed"),
    (1, 'discovery.bootstrapToken.apiServerEndpoint: Required value: must be set',
     "ValidationFailed"),
]  # fmt: skip


@pytest.mark.parametrize(("code", "message", "reason"), CONFIG_FAILURES)
def test_config_failures_are_terminal_whatever_the_exit_code(
    tmp_path: Path, code: int, message: str, reason: str
) -> None:
    r = _run(tmp_path, f"says {code} {message}", backoff="1")
    st = r["status"]
    assert (r["rc"], st["phase"], st["reason"], st["terminal"]) == (1, "Failed", reason, True)
    assert st["attempts"] == 1 and [c[0] for c in r["calls"]] == ["join"]


def test_real_kubeadm_1_20_refusing_a_v1beta3_config_is_terminal(
    tmp_path: Path, kubernetes_build: Path
) -> None:
    """The real kubeadm v1.20.2 (built from Debian's source) given a config it cannot read:
    it exits 1 ("no kind is registered"), and the script must not retry for 15 minutes."""
    files = _rendered(version="v1.31.4")  # a v1.31 Machine: kubeadm.k8s.io/v1beta4
    (tmp_path / "bin").mkdir()
    shutil.copy(kubernetes_build / "bin" / "kubeadm", tmp_path / "bin" / "kubeadm")
    r = _run(tmp_path, "ok", standin=False, files=files, backoff="1")
    st = r["status"]
    assert (st["phase"], st["reason"], st["terminal"], st["attempts"]) == (
        "Failed",
        "ConfigVersionUnsupported",
        True,
        1,
    ), st
    assert "is registered for version" in st["message"]
    assert [h["exitCode"] for h in st["history"]] == [1]


def test_deadline_turns_transient_into_failed_but_not_terminal(tmp_path: Path) -> None:
    r = _run(tmp_path, "transient 99", backoff="1", deadline="3")
    assert r["rc"] == 1
    st = r["status"]
    assert st["phase"] == "Failed" and st["reason"] == "DeadlineExceeded"
    assert st["terminal"] is False and 2 <= st["attempts"] <= 4
    assert not r["sentinel"]


def test_missing_kubeadm_is_terminal_and_named(tmp_path: Path) -> None:
    r = _run(tmp_path, "ok", standin=False)
    assert r["rc"] == 1
    st = r["status"]
    assert st["reason"] == "KubeadmNotFound" and st["terminal"] is True
    assert "kubeadm" in st["message"] and not r["sentinel"]


def test_failing_pre_command_is_terminal_and_skips_kubeadm(tmp_path: Path) -> None:
    r = _run(tmp_path, "ok", config={"pre": ["echo about to fail", "exit 7"]})
    assert r["rc"] == 1
    st = r["status"]
    assert st["reason"] == "PreKubeadmCommandFailed" and st["terminal"] is True
    assert "command 1 exited 7" in st["message"]
    assert r["calls"] == [] and not r["sentinel"]


@pytest.mark.parametrize(
    ("pre", "post", "reason", "seen", "post_out"),
    [
        # export and cd carry over, to kubeadm and to the post-commands, as in CABPK's runcmd.
        (["export PROXY=http://proxy:3128", "mkdir -p /run/w && cd /run/w"],
         ['echo "$PROXY $(pwd)" > {out}'], "Bootstrapped",
         {"PROXY": "http://proxy:3128", "cwd": "/run/w"}, "http://proxy:3128 /run/w"),
        # A shell variable and a function defined in one command are there in the next of
        # the same list (only exports and the directory outlive the list, as kubeadm runs
        # between the lists).
        (["greet() { echo hi $1; }", "N=3", 'greet "$N" > {out}'], ['test -z "$N"'],
         "Bootstrapped", {"PROXY": None, "cwd": None}, "hi 3"),
        # Unlike runcmd, a failing command stops the rest: no kubeadm, no post-commands.
        (["true", "false", "touch {out}"], [], "PreKubeadmCommandFailed", None, None),
        (["cd /nonexistent"], [], "PreKubeadmCommandFailed", None, None),
        ([], ["exit 4", "touch {out}"], "PostKubeadmCommandFailed",
         {"PROXY": None, "cwd": None}, None),
    ],
)  # fmt: skip
def test_commands_share_one_shell_and_stop_at_the_first_failure(
    tmp_path: Path, pre: list[str], post: list[str], reason: str, seen: Any, post_out: Any
) -> None:
    out = tmp_path / "post-out.txt"
    fill = lambda cmds: [c.replace("{out}", str(out)) for c in cmds]  # noqa: E731
    r = _run(tmp_path, "ok", config={"pre": fill(pre), "post": fill(post)})
    assert r["status"]["reason"] == reason, r["out"]
    assert r["rc"] == (0 if reason == "Bootstrapped" else 1)
    kubeadm_seen = tmp_path / "standin-result" / "seen.json"
    if seen is None:
        assert r["calls"] == [] and not kubeadm_seen.exists()
    else:
        got = json.loads(kubeadm_seen.read_text())
        assert got["PROXY"] == seen["PROXY"]
        assert seen["cwd"] is None or got["cwd"] == seen["cwd"]
    if post_out is None:
        assert not out.exists()
    else:
        assert out.read_text().strip() == post_out
    if reason != "Bootstrapped":
        failed = 1 if pre[:1] == ["true"] else 0
        assert f"command {failed} exited" in r["status"]["message"]


def test_failing_post_command_means_no_sentinel(tmp_path: Path) -> None:
    r = _run(tmp_path, "ok", config={"post": ["false"]})
    assert r["rc"] == 1
    assert r["status"]["reason"] == "PostKubeadmCommandFailed"
    assert not r["sentinel"]


def test_rerun_after_a_reboot_records_that_the_node_had_joined(tmp_path: Path) -> None:
    # /run is empty after a reboot: no status of this boot, kubelet.conf from the last one.
    r = _run(tmp_path, "terminal 3", joined=True)
    assert r["rc"] == 0 and r["calls"] == []  # kubeadm is not run again
    st = r["status"]
    assert (st["phase"], st["reason"], st["terminal"]) == ("Succeeded", "AlreadyJoined", False)
    assert "/etc/kubernetes/kubelet.conf exists" in st["message"]
    assert r["sentinel"]


def test_rerun_in_the_same_boot_keeps_the_recorded_outcome(tmp_path: Path) -> None:
    # Joined, then a post-command failed: a second run must not paint that over.
    before = {"phase": "Failed", "reason": "PostKubeadmCommandFailed", "terminal": True}
    r = _run(tmp_path, "ok", joined=True, status_before=before)
    assert r["rc"] == 0 and r["calls"] == []
    assert r["status"] == before and not r["sentinel"]
    assert "not running kubeadm again" in r["out"]


def test_kubeadm_still_running_at_the_deadline_is_killed_with_its_children(
    tmp_path: Path,
) -> None:
    r = _run(tmp_path, "hang", deadline="3")
    assert r["rc"] == 1
    st = r["status"]
    assert (st["phase"], st["reason"], st["terminal"]) == ("Failed", "DeadlineExceeded", True)
    assert "was still running at the 3s deadline and was killed" in st["message"]
    assert "waiting for the kubelet" in st["message"]  # its output up to the kill is kept
    assert [h["exitCode"] for h in st["history"]] == [None]
    assert r["seconds"] < 30  # killed at 3 s, not after the stand-in's 600 s
    child = int((tmp_path / "standin-result" / "child.pid").read_text())
    assert not is_alive(child), "kubeadm's child outlived the kill"
    assert not r["sentinel"]


def test_the_last_try_uses_the_time_left_before_the_deadline(tmp_path: Path) -> None:
    # Deadline 10 s, backoff 4 s: tries at 0 and 4 s; the next backoff (8 s) would pass the
    # deadline, so the third try waits only so long that it still has the room of the
    # longest try so far (plus a reset and 1 s). Giving up after the second try, at about
    # 4 s (what the script did before), wastes more than half the deadline.
    r = _run(tmp_path, "transient 99", backoff="4", deadline="10", **{"max-backoff": "60"})
    st = r["status"]
    assert (st["phase"], st["reason"], st["terminal"]) == ("Failed", "DeadlineExceeded", False)
    assert st["attempts"] == 3
    backoffs = [h.get("backoff") for h in st["history"]]
    assert backoffs[0] == 4 and 1 < backoffs[1] < 5 and backoffs[2] is None, backoffs
    assert 7 < r["seconds"] < 10


def test_output_that_is_not_utf8_is_decoded_with_replacement(tmp_path: Path) -> None:
    """Python replaces each byte that is not UTF-8 with U+FFFD; bash (iconv -c) drops it."""
    r = _run(tmp_path, "garbage 3")
    st = r["status"]
    assert (r["rc"], st["phase"], st["reason"]) == (1, "Failed", "ValidationFailed")
    shown = {"python": "\ufffd\ufffd caf\ufffd \ufffd( [preflight] failed",
             "bash": " caf ( [preflight] failed"}  # fmt: skip
    assert shown[IMPL] in st["message"]
    assert "Traceback" not in r["out"]


def test_an_unwritable_status_does_not_stop_the_join(tmp_path: Path) -> None:
    r = _run(tmp_path, "ok", read_only_status=True)
    assert r["calls"] == [["join", "--config", "/run/kubeadm/kubeadm-join-config.yaml"]]
    assert r["out"].count("cannot record status in /run/cluster-api") == 1
    assert "Read-only file system" in r["out"] and "Traceback" not in r["out"]
    # Joined, but the sentinel the infrastructure provider waits for could not be written:
    # cloud-init must see a failure.
    assert r["rc"] == 1 and "bootstrap-success.complete cannot be written" in r["out"]
    assert r["status"] is None


def test_a_defect_in_the_script_ends_in_failed_not_running(tmp_path: Path) -> None:
    # Python: "pre" not a list breaks the script itself; bash: a config it cannot source.
    r = _run(tmp_path, "ok", config={"pre": 5}, raw_config="VERB=join\nPRE=(\n")
    st = r["status"]
    assert (r["rc"], st["phase"], st["reason"], st["terminal"]) == (
        1,
        "Failed",
        "BootstrapScriptFailed",
        True,
    )
    assert {"python": "TypeError", "bash": "cannot read the config"}[IMPL] in st["message"]
    assert r["calls"] == []


# ---------------------------------------------------------------- reports to the management


class _Reports:
    """A real HTTP endpoint on 127.0.0.1 that records what the node script POSTs."""

    def __init__(
        self, tls: Path | None = None, answers: dict[str, list[int]] | None = None
    ) -> None:
        """``tls``: a directory holding ``apiserver.crt``/``.key``, served over HTTPS.
        ``answers``: per phase, the HTTP statuses its first POSTs get (a fault injected);
        every POST is in ``attempts``, the accepted ones in ``received``."""
        import http.server
        import ssl
        import threading

        received: list[dict[str, Any]] = []
        attempts: list[tuple[str, int]] = []
        self.received, self.attempts = received, attempts
        queued = {k: list(v) for k, v in (answers or {}).items()}

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                return

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                pending = queued.get(body["phase"], [])
                code = pending.pop(0) if pending else 202
                attempts.append((body["phase"], code))
                if code == 202:
                    received.append(
                        {"path": self.path, "auth": self.headers["Authorization"], **body}
                    )
                self.send_response(code)
                self.send_header("Content-Length", "0")
                self.end_headers()

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        scheme = "http"
        if tls is not None:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(tls / "apiserver.crt", tls / "apiserver.key")
            self.server.socket = context.wrap_socket(self.server.socket, server_side=True)
            scheme = "https"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        port = self.server.server_address[1]
        self.url = f"{scheme}://127.0.0.1:{port}/v1/reports/default/demo-md-0"

    def close(self) -> None:
        self.server.shutdown()


CREDENTIAL = "nsr1.eyJucyI6ImRlZmF1bHQifQ.c2lnbmF0dXJl"


def test_each_phase_change_is_reported_in_order_with_the_credential(tmp_path: Path) -> None:
    reports = _Reports()
    try:
        config = {"reportUrl": reports.url, "reportCredential": CREDENTIAL}
        r = _run(tmp_path, "transient 1", backoff="1", config=config)
    finally:
        reports.close()
    assert r["rc"] == 0, r["out"]
    seen = [(x["phase"], x["reason"], x["terminal"], x["attempts"]) for x in reports.received]
    assert seen[0] == ("Running", "Started", False, 0)
    assert seen[-1] == ("Succeeded", "Bootstrapped", False, 2)
    retries = [s for s in seen if s[0] == "Retrying"]
    assert len(retries) == 1 and retries[0][2:] == (False, 1)
    assert len(seen) == len(set(seen))  # a report per change, none repeated
    assert {x["auth"] for x in reports.received} == {f"Bearer {CREDENTIAL}"}
    assert {x["path"] for x in reports.received} == {"/v1/reports/default/demo-md-0"}


def test_a_terminal_failure_is_reported_as_terminal(tmp_path: Path) -> None:
    reports = _Reports()
    try:
        config = {"reportUrl": reports.url, "reportCredential": CREDENTIAL}
        r = _run(tmp_path, "terminal 2", config=config)
    finally:
        reports.close()
    assert r["rc"] == 1
    last = reports.received[-1]
    assert (last["phase"], last["reason"], last["terminal"]) == ("Failed", "PreflightFailed", True)


@pytest.mark.parametrize(
    ("answers", "attempts", "accepted", "given_up"),
    [
        ([503, 503], 3, True, False),  # the Service between endpoints: retried until taken
        ([502], 2, True, False),
        ([429], 2, True, False),
        ([409], 1, False, False),  # recorded already (a try that timed out after it arrived)
        ([403], 1, False, True),  # refused for good: another 4xx is not retried
        ([422], 1, False, True),
    ],
)
def test_the_last_report_is_retried_while_the_endpoint_fails_transiently(
    tmp_path: Path, answers: list[int], attempts: int, accepted: bool, given_up: bool
) -> None:
    reports = _Reports(answers={"Succeeded": answers})
    try:
        config = {"reportUrl": reports.url, "reportCredential": CREDENTIAL}
        r = _run(tmp_path, "ok", config=config)
    finally:
        reports.close()
    assert r["rc"] == 0 and r["status"]["phase"] == "Succeeded", r["out"]
    assert [c for p, c in reports.attempts if p == "Succeeded"] == [*answers, 202][:attempts]
    assert (reports.received[-1]["phase"] == "Succeeded") is accepted
    assert r["out"].count("could not report Succeeded") == (1 if given_up else 0)


def test_an_intermediate_report_is_sent_once(tmp_path: Path) -> None:
    reports = _Reports(answers={"Running": [503]})
    try:
        config = {"reportUrl": reports.url, "reportCredential": CREDENTIAL}
        r = _run(tmp_path, "ok", config=config)
    finally:
        reports.close()
    assert r["rc"] == 0, r["out"]
    # Started got the 503 and was dropped; the next Running report (the join) went through.
    assert [c for p, c in reports.attempts if p == "Running"] == [503, 202]
    assert [x["reason"] for x in reports.received] == ["RunningJoin", "Bootstrapped"]


@pytest.mark.parametrize(
    ("trust", "delivered"),
    [
        ("the endpoint's CA rendered into the config", True),
        ("no CA rendered: the system store does not know the endpoint's", False),
        ("another CA rendered", False),
    ],
)
def test_an_https_endpoint_is_trusted_by_the_rendered_ca_alone(
    tmp_path: Path, trust: str, delivered: bool
) -> None:
    from bootstrap.kubernetes.apiserver import loopback_certificates

    for name in ("endpoint", "other"):
        (tmp_path / name).mkdir()
        loopback_certificates(tmp_path / name)
    reports = _Reports(tls=tmp_path / "endpoint")
    config: dict[str, Any] = {"reportUrl": reports.url, "reportCredential": CREDENTIAL}
    if trust.startswith("the endpoint's"):
        config["reportCA"] = (tmp_path / "endpoint/ca.crt").read_text()
    elif trust.startswith("another"):
        config["reportCA"] = (tmp_path / "other/ca.crt").read_text()
    try:
        r = _run(tmp_path, "ok", config=config)
    finally:
        reports.close()
    assert r["rc"] == 0 and r["status"]["phase"] == "Succeeded", r["out"]
    phases = [x["phase"] for x in reports.received]
    if delivered:
        assert phases[0] == "Running" and phases[-1] == "Succeeded"
        assert "could not report" not in r["out"]
    else:
        assert phases == [] and "could not report" in r["out"]


@pytest.mark.parametrize("endpoint", ["refused", "silent"])
def test_an_unreachable_management_never_blocks_or_fails_the_bootstrap(
    tmp_path: Path, endpoint: str
) -> None:
    import socket

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    if endpoint == "silent":
        listener.listen(64)  # accepts connections into its backlog, never answers
    else:
        listener.close()  # nothing listens: connection refused
    try:
        config = {
            "reportUrl": f"http://127.0.0.1:{port}/v1/reports/default/demo-md-0",
            "reportCredential": CREDENTIAL,
            "reportRetry": 3,  # the last report's retries: 120 s by default
        }
        started = time.monotonic()
        r = _run(tmp_path, "ok", config=config)
        seconds = time.monotonic() - started
    finally:
        listener.close()
    assert r["rc"] == 0, r["out"]
    assert r["status"]["phase"] == "Succeeded" and r["sentinel"]
    assert "could not report" in r["out"]
    assert CREDENTIAL not in r["out"]
    # the bootstrap itself never waited on a report; only the exit waits for the last one,
    # for its retries (3 s here) and its last try
    assert seconds < 20, seconds

#!/usr/bin/python3
"""nodesmith-bootstrap: turn a booted machine into a Kubernetes node, and say how it went.

Written by nodesmith's userdata and run once by cloud-init's runcmd with the path of its JSON
config. It runs the pre-commands, kubeadm, then the post-commands. Each list runs as one
shell script, as cloud-init's runcmd runs CABPK's, and what it exports and the directory it
ends in carry over to kubeadm and to the post-commands; unlike runcmd, the first failing command
stops the bootstrap (Failed, PreKubeadmCommandFailed or PostKubeadmCommandFailed, naming the
command), so a failed pre-command never silently leads on to kubeadm. kubeadm exit 1 is transient
(API server unreachable, token not valid yet): retried with exponential backoff until the
deadline. Exit 2 (preflight), 3 (validation) and a missing kubeadm are terminal, and so is a
config kubeadm cannot decode or rejects, whatever its exit code (kubeadm exits 1 for "no kind
is registered for version"): retrying cannot fix the config.

The deadline bounds the whole kubeadm phase. Waits shrink so that the last try still has the
time of the longest one before it; a kubeadm (or its reset) still running at the deadline is
killed with its whole process group: DeadlineExceeded, terminal, since a hang is not what a
retry on this node fixes. Still failing transiently at the deadline is DeadlineExceeded too,
not terminal.

Progress goes to /run/cluster-api/bootstrap-status.json; the sentinel is written only on
success. Recording is best effort: a status that cannot be written is said once in the log and
does not stop the join. Output that is not UTF-8 is decoded with replacement. Whatever goes
wrong inside the script itself still ends in a Failed status, never in Running for good.
A node that has already joined (/etc/kubernetes/kubelet.conf exists) is not joined again: its
status from this boot is kept, or, after a reboot emptied /run, AlreadyJoined is recorded with
the sentinel. Uses python3 only, which cloud-init guarantees.
"""

import contextlib
import json
import os
import re
import shlex
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import urllib.request
from datetime import datetime, timezone

RUN = "/run/cluster-api"
STATUS = RUN + "/bootstrap-status.json"
SENTINEL = RUN + "/bootstrap-success.complete"
JOINED = "/etc/kubernetes/kubelet.conf"
PKI = "/etc/kubernetes/pki"
PKI_COPY = "/run/kubeadm/pki.orig"
# kubeadm reset empties the static pod directory; what the user's files and pre-commands put
# there (CAPV's kube-vip) is kept here and put back before the next try, as the PKI is.
MANIFESTS = "/etc/kubernetes/manifests"
MANIFESTS_COPY = "/run/kubeadm/manifests.orig"
TERMINAL_CODES = {2: "PreflightFailed", 3: "ValidationFailed"}
# What kubeadm prints when the config itself is wrong; the reason names the kind of failure.
CONFIG_ERRORS = (
    (
        "ConfigVersionUnsupported",
        re.compile(
            r"no kind \S+ is registered for version|uses an old API spec|unsupported apiVersion"
        ),
    ),
    (
        "ConfigDecodeFailed",
        re.compile(
            r"error converting YAML to JSON|unknown field|strict decoding error|cannot unmarshal"
            r"|did not find expected key|mapping values are not allowed"
        ),
    ),
    ("ValidationFailed", re.compile(r"\b(Invalid|Unsupported|Required|Forbidden) value:")),
)
TOKEN = re.compile(r"\b[a-z0-9]{6}\.[a-z0-9]{16}\b")
KILL_GRACE = 10  # seconds to collect a killed command's last output
SLACK = 1  # seconds of room a try is given beyond the longest one so far
REPORT_RETRY = 120  # seconds the last report is retried for, unless the config's reportRetry
REPORT_RETRY_DELAY = 4


def now():
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def log(text):
    """To cloud-init's log as UTF-8, whatever the locale says stdout is."""
    sys.stdout.buffer.write(text.encode("utf-8", "replace"))
    sys.stdout.buffer.flush()


class Status:
    def __init__(self, cfg):
        self.secrets = [s for s in cfg.get("redact", []) if s]
        self.unrecorded = None  # why the status file cannot be written, once known
        self.doc = {
            "phase": "Running",
            "reason": "Started",
            "message": "",
            "role": cfg["role"],
            "terminal": False,
            "attempts": 0,
            "history": [],
            "startedAt": now(),
        }
        self.report_url = cfg.get("reportUrl")
        self.report_credential = cfg.get("reportCredential") or ""
        self.report_ca = cfg.get("reportCA")  # None: the system's trust store
        retry = cfg.get("reportRetry", REPORT_RETRY)
        self.report_retry = retry if type(retry) is int and 0 <= retry < 100000 else REPORT_RETRY
        self.reported = None
        self.sender = None

    def redact(self, text, limit=2000):
        for s in self.secrets:
            text = text.replace(s, "<redacted>")
        # Any bootstrap token, also ones kubeadm made itself ("kubeadm init" prints its join
        # command with the token it generated).
        text = TOKEN.sub("<redacted>", text)
        return text[-limit:] if limit else text

    def write(self, **changes):
        if "message" in changes:
            changes["message"] = self.redact(changes["message"])
        self.doc.update(changes, updatedAt=now())
        try:
            os.makedirs(RUN, exist_ok=True)
            tmp = STATUS + ".tmp"
            with open(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644), "w") as f:
                json.dump(self.doc, f, indent=2)
            os.replace(tmp, STATUS)
        except OSError as exc:
            if self.unrecorded is None:
                self.unrecorded = str(exc)
                log(
                    "nodesmith-bootstrap: cannot record status in %s (%s); going on\n"
                    % (STATUS, exc)
                )
        log(
            "nodesmith-bootstrap: %s %s %s\n"
            % (self.doc["phase"], self.doc["reason"], self.doc["message"][-300:])
        )
        self.report()

    def report(self):
        """Tell the management cluster (``reportUrl``) about a phase change, from a thread: a
        slow or unreachable endpoint never holds up or fails the bootstrap. Reports go in
        order (each waits for the one before, 6 s at most, and gives up after 5 s); errors are
        logged and dropped. The last report (Succeeded or Failed) is the one the management
        cluster must not miss: it is retried for ``reportRetry`` s (120 by default) while
        ``report_again`` says a later try can help, and the script waits for it before exiting
        (the status and the sentinel are already written)."""
        if not self.report_url:
            return
        body = {
            "phase": self.doc["phase"],
            "reason": self.doc["reason"],
            "terminal": bool(self.doc["terminal"]),
            "attempts": int(self.doc["attempts"]),
        }
        key = sorted(body.items())
        if key == self.reported:
            return
        self.reported = key
        final = body["phase"] in ("Succeeded", "Failed")
        previous, url, credential = self.sender, self.report_url, self.report_credential
        ca = self.report_ca

        def send():
            if previous is not None:
                previous.join(6)
            request = urllib.request.Request(
                url,
                data=json.dumps(body).encode(),
                method="POST",
                headers={
                    "Content-Type": "application/json",
                    "Authorization": "Bearer " + credential,
                },
            )
            give_up = time.monotonic() + (self.report_retry if final else 0)
            while True:
                try:
                    tls = ssl.create_default_context(cadata=ca) if ca else None
                    urllib.request.urlopen(request, timeout=5, context=tls).close()
                    return
                except Exception as exc:  # HTTP 4xx/5xx, refused, timeout: the node goes on
                    if getattr(exc, "code", None) == 409:
                        return  # recorded already (a try that timed out after it arrived)
                    if not report_again(exc) or time.monotonic() + REPORT_RETRY_DELAY > give_up:
                        log(
                            "nodesmith-bootstrap: could not report %s to the management "
                            "cluster (%s); going on\n" % (body["phase"], type(exc).__name__)
                        )
                        return
                time.sleep(REPORT_RETRY_DELAY)

        self.sender = threading.Thread(target=send)
        self.sender.daemon = True
        self.sender.start()

    def flush(self):
        """Let the last report arrive before the script exits: 6 s for the one before it, its
        reportRetry s of retries and its last try."""
        if self.sender is not None:
            self.sender.join(self.report_retry + 20)

    def fail(self, reason, message, terminal=True):
        self.write(
            phase="Failed", reason=reason, message=message, terminal=terminal, finishedAt=now()
        )
        return 1


def report_again(exc):
    """True for what a later try can fix (the bash twin's send_report says the same from
    curl's exit code): a refused, reset or closed connection, a timeout, a name that does
    not resolve yet, HTTP 408, 429 or 5xx; never another 4xx or a TLS failure (an untrusted
    certificate among them), which only a new config changes."""
    code = getattr(exc, "code", None)
    if isinstance(code, int):
        return code in (408, 429) or code >= 500
    reason = getattr(exc, "reason", exc)
    if isinstance(reason, ssl.SSLError):
        return False
    return isinstance(reason, (ConnectionError, TimeoutError, socket.timeout, socket.gaierror))


# The environment and working directory the user's commands left: None until they change it.
SHELL = {"env": None, "cwd": None}


def run(status, argv, shell=False, timeout=None):
    """Run a command; its output goes to our stdout (cloud-init's log) with secrets redacted.

    Returns (exit code, output); the code is None when the command was still running after
    timeout seconds and was killed, with every process it started (its own session).
    """
    proc = subprocess.Popen(
        argv,
        shell=shell,
        env=SHELL["env"],
        cwd=SHELL["cwd"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=timeout is not None,
    )
    try:
        raw, _ = proc.communicate(timeout=timeout)
        code = proc.returncode
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):  # it may have ended just now
            os.killpg(proc.pid, signal.SIGKILL)
        try:
            raw, _ = proc.communicate(timeout=KILL_GRACE)
        except subprocess.TimeoutExpired as exc:  # something left the group and holds the pipe
            raw = exc.output or b""
        code = None
    out = status.redact(raw.decode("utf-8", "replace"), limit=None)
    log(out)
    return code, out.strip()


def commands(status, cmds, reason):
    """Run ``cmds`` in one /bin/sh, in order; stop at the first that fails.

    After each command the script notes its index; at the end it saves its environment and
    directory, which every later command (kubeadm included) starts from.
    """
    if not cmds:
        return 0
    with tempfile.TemporaryDirectory(prefix="nodesmith-shell.") as work:  # 0700
        index, env, cwd = (shlex.quote(os.path.join(work, n)) for n in ("index", "env", "cwd"))
        lines = []
        for i, cmd in enumerate(cmds):
            lines += [
                "printf %d " + str(i) + " > " + index,
                cmd,
                "__nodesmith_rc=$?; [ $__nodesmith_rc -eq 0 ] || exit $__nodesmith_rc",
            ]
        lines += ["unset __nodesmith_rc", "pwd > " + cwd, "env -0 > " + env]
        code, out = run(status, ["/bin/sh", "-c", "\n".join(lines)])
        failed = _read(os.path.join(work, "index"))
        if code != 0:
            which = "command %s" % failed if failed else "the commands"
            return status.fail(reason, "%s exited %s: %s" % (which, code, out[-500:]))
        saved_env, saved_cwd = _read(os.path.join(work, "env")), _read(os.path.join(work, "cwd"))
        if saved_env is not None and saved_cwd is not None:  # a command may have exited 0 early
            SHELL["env"] = dict(item.split("=", 1) for item in saved_env.split("\0") if "=" in item)
            SHELL["cwd"] = saved_cwd.rstrip("\n") or None
    return 0


def _read(path):
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read()
    except OSError:
        return None


def terminal_reason(code, out):
    """The terminal reason of a failed kubeadm run, or None when retrying may help."""
    for reason, pattern in CONFIG_ERRORS:
        if pattern.search(out):
            return reason
    return TERMINAL_CODES.get(code)


def killed(status, cfg, what, out):
    return status.fail(
        "DeadlineExceeded",
        "%s was still running at the %ds deadline and was killed: %s"
        % (what, cfg.get("deadline", 900), out),
    )


def kubeadm(status, cfg):
    argv = cfg["command"]
    verb = cfg["verb"]
    if shutil.which(argv[0]) is None:
        return status.fail(
            "KubeadmNotFound",
            "%s is not installed on this node: it is configured and ready to join, but cannot "
            "run kubeadm %s" % (argv[0], verb),
        )
    backoff, deadline = cfg.get("backoff", 5), time.monotonic() + cfg.get("deadline", 900)
    pki = cfg.get("pkiDir", PKI)  # the ClusterConfiguration's certificatesDir
    if cfg["role"] != "worker-join" and os.path.isdir(pki):
        shutil.copytree(pki, PKI_COPY, dirs_exist_ok=True)
    if os.path.isdir(MANIFESTS) and os.listdir(MANIFESTS):  # before kubeadm adds its own
        shutil.copytree(MANIFESTS, MANIFESTS_COPY, dirs_exist_ok=True)
    longest, reset_took = 0.0, None
    while True:
        attempt = status.doc["attempts"] + 1
        status.write(
            phase="Running", attempts=attempt, message="", reason="Running" + verb.capitalize()
        )
        started, started_at = time.monotonic(), now()
        code, out = run(status, argv, timeout=max(deadline - started, 0))
        took = time.monotonic() - started
        longest = max(longest, took)
        status.doc["history"].append(
            {
                "attempt": attempt,
                "exitCode": code,
                "startedAt": started_at,
                "seconds": round(took, 1),
            }
        )
        if code is None:
            return killed(status, cfg, "kubeadm " + verb, out)
        if code == 0:
            return 0
        terminal = terminal_reason(code, out)
        if terminal:
            return status.fail(terminal, "kubeadm %s exited %d: %s" % (verb, code, out))
        # The next try waits its backoff, but only so long that a reset and a try as long as
        # the longest so far still end before the deadline; no such room left: give up.
        needed = longest + (took if reset_took is None else reset_took) + SLACK
        wait = min(backoff, deadline - time.monotonic() - needed)
        if wait < 0:
            return status.fail(
                "DeadlineExceeded",
                "kubeadm %s still failing after %d attempts: %s" % (verb, attempt, out),
                terminal=False,
            )
        status.doc["history"][-1]["backoff"] = round(wait, 1)
        status.write(
            phase="Retrying",
            reason="Transient",
            message=out,
            nextRetryAt=datetime.fromtimestamp(time.time() + wait, timezone.utc).strftime(
                "%Y-%m-%dT%H:%M:%SZ"
            ),
        )
        time.sleep(wait)
        backoff = min(backoff * 2, cfg.get("maxBackoff", 60))
        # A half-done attempt blocks the next preflight.
        reset_started = time.monotonic()
        code, out = run(
            status, [argv[0], "reset", "--force"], timeout=max(deadline - reset_started, 0)
        )
        reset_took = time.monotonic() - reset_started
        if code is None:
            return killed(status, cfg, "kubeadm reset", out)
        for kept, where in ((PKI_COPY, pki), (MANIFESTS_COPY, MANIFESTS)):
            if os.path.isdir(kept):
                shutil.copytree(kept, where, dirs_exist_ok=True)


def already_joined(status):
    """kubelet.conf exists: this node joined on an earlier run. Keep what this boot recorded;
    after a reboot (/run is empty) record that it had joined, with the sentinel."""
    log(
        "nodesmith-bootstrap: %s exists, this node has joined; not running kubeadm again\n" % JOINED
    )
    if os.path.exists(STATUS):
        return 0
    status.write(
        phase="Succeeded",
        reason="AlreadyJoined",
        message="%s exists: joined on an earlier run; kubeadm not run again" % JOINED,
        finishedAt=now(),
    )
    return succeeded(status)


def succeeded(status):
    try:
        with open(SENTINEL, "w") as f:
            f.write("success\n")
    except OSError as exc:
        log(
            "nodesmith-bootstrap: the node is bootstrapped but %s cannot be written (%s)\n"
            % (SENTINEL, exc)
        )
        return 1
    return 0


def bootstrap(status, cfg):
    if os.path.exists(JOINED):
        return already_joined(status)
    status.write()
    code = (
        commands(status, cfg.get("pre", []), "PreKubeadmCommandFailed")
        or kubeadm(status, cfg)
        or commands(status, cfg.get("post", []), "PostKubeadmCommandFailed")
    )
    if code:
        return code
    status.write(
        phase="Succeeded",
        reason="Bootstrapped",
        message="kubeadm %s succeeded" % cfg["verb"],
        finishedAt=now(),
    )
    return succeeded(status)


def main():
    with open(sys.argv[1]) as f:
        cfg = json.load(f)
    status = Status(cfg)
    try:
        return bootstrap(status, cfg)
    except Exception:  # a defect here must not leave the status at Running for good
        return status.fail("BootstrapScriptFailed", traceback.format_exc())
    finally:
        status.flush()


if __name__ == "__main__":
    sys.exit(main())

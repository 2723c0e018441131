#!/usr/bin/python3
"""nodesmith-bootstrap: turn a booted machine into a Kubernetes node, and say how it went.

Written by nodesmith's userdata and run once by cloud-init's runcmd with the path of its JSON
config. It runs the pre-commands, kubeadm, then the post-commands. kubeadm exit 1 is transient
(API server unreachable, token not valid yet): retried with exponential backoff until the
deadline. Exit 2 (preflight), 3 (validation) and a missing kubeadm are terminal, and so is a
config kubeadm cannot decode or rejects, whatever its exit code (kubeadm exits 1 for "no kind
is registered for version"): retrying cannot fix the config. Progress goes to
/run/cluster-api/bootstrap-status.json; the sentinel is written only on success. A node that
has already joined (/etc/kubernetes/kubelet.conf exists) is left alone. Uses python3 only,
which cloud-init guarantees.
"""

import json
import os
import re
import shutil
import subprocess
import sys
import time
from datetime import datetime, timezone

RUN = "/run/cluster-api"
STATUS = RUN + "/bootstrap-status.json"
SENTINEL = RUN + "/bootstrap-success.complete"
JOINED = "/etc/kubernetes/kubelet.conf"
PKI = "/etc/kubernetes/pki"
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


def now():
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


class Status:
    def __init__(self, cfg):
        self.secrets = [s for s in cfg.get("redact", []) if s]
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
        tmp = STATUS + ".tmp"
        with open(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644), "w") as f:
            json.dump(self.doc, f, indent=2)
        os.replace(tmp, STATUS)
        print(
            "nodesmith-bootstrap: %s %s %s"
            % (self.doc["phase"], self.doc["reason"], self.doc["message"][-300:]),
            flush=True,
        )

    def fail(self, reason, message, terminal=True):
        self.write(
            phase="Failed", reason=reason, message=message, terminal=terminal, finishedAt=now()
        )
        return 1


def run(status, argv, shell=False):
    """Run a command; its output goes to our stdout (cloud-init's log) with secrets redacted."""
    proc = subprocess.run(
        argv, shell=shell, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True
    )
    out = status.redact(proc.stdout, limit=None)
    sys.stdout.write(out)
    return proc.returncode, out.strip()


def commands(status, cmds, reason):
    for i, cmd in enumerate(cmds):
        code, out = run(status, cmd, shell=True)
        if code != 0:
            return status.fail(reason, "command %d exited %d: %s" % (i, code, out[-500:]))
    return 0


def terminal_reason(code, out):
    """The terminal reason of a failed kubeadm run, or None when retrying may help."""
    for reason, pattern in CONFIG_ERRORS:
        if pattern.search(out):
            return reason
    return TERMINAL_CODES.get(code)


def kubeadm(status, cfg):
    argv = cfg["command"]
    if shutil.which(argv[0]) is None:
        return status.fail(
            "KubeadmNotFound",
            "%s is not installed on this node: it is configured and ready to join, but cannot "
            "run kubeadm %s" % (argv[0], cfg["verb"]),
        )
    backoff, deadline = cfg.get("backoff", 5), time.monotonic() + cfg.get("deadline", 900)
    if cfg["role"] != "worker-join" and os.path.isdir(PKI):
        shutil.copytree(PKI, "/run/kubeadm/pki.orig", dirs_exist_ok=True)
    while True:
        attempt = status.doc["attempts"] + 1
        reason = "Running" + cfg["verb"].capitalize()
        status.write(phase="Running", attempts=attempt, message="", reason=reason)
        started, started_at = time.monotonic(), now()
        code, out = run(status, argv)
        record = {
            "attempt": attempt,
            "exitCode": code,
            "startedAt": started_at,
            "seconds": round(time.monotonic() - started, 1),
        }
        status.doc["history"].append(record)
        if code == 0:
            return 0
        terminal = terminal_reason(code, out)
        if terminal:
            return status.fail(terminal, "kubeadm %s exited %d: %s" % (cfg["verb"], code, out))
        if time.monotonic() + backoff > deadline:
            return status.fail(
                "DeadlineExceeded",
                "kubeadm %s still failing after %d attempts: %s" % (cfg["verb"], attempt, out),
                terminal=False,
            )
        record["backoff"] = backoff
        status.write(
            phase="Retrying",
            reason="Transient",
            message=out,
            nextRetryAt=datetime.fromtimestamp(time.time() + backoff, timezone.utc).strftime(
                "%Y-%m-%dT%H:%M:%SZ"
            ),
        )
        time.sleep(backoff)
        backoff = min(backoff * 2, cfg.get("maxBackoff", 60))
        run(status, [argv[0], "reset", "--force"])  # a half-done attempt blocks the next preflight
        if os.path.isdir("/run/kubeadm/pki.orig"):
            shutil.copytree("/run/kubeadm/pki.orig", PKI, dirs_exist_ok=True)


def main():
    with open(sys.argv[1]) as f:
        cfg = json.load(f)
    if os.path.exists(JOINED):
        print("nodesmith-bootstrap: %s exists, this node has joined; nothing to do" % JOINED)
        return 0
    os.makedirs(RUN, exist_ok=True)
    status = Status(cfg)
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
    with open(SENTINEL, "w") as f:
        f.write("success\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

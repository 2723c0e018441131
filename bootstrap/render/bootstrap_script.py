"""The on-node bootstrap script as the userdata carries it, and the plain account of what it runs.

CABPK's userdata lists every command in ``runcmd``, so an operator reads what a node will do
without decoding anything. nodesmith runs the same commands through its retry/status script,
so that reading must not get harder: the userdata opens with a comment block naming, in order,
the pre commands, the exact ``kubeadm init``/``kubeadm join`` command line, the post commands
and the sentinel written on success; the script's config is indented JSON; and the script
itself ships as plain text, gzip+base64 only when plain it would push the userdata over the
size budget. The header says which of the two applies and why.
"""

from __future__ import annotations

import shlex
from functools import lru_cache
from typing import Any

from bootstrap import __version__
from bootstrap.render.templates import packed_script, plain_script
from bootstrap.render.yamlio import dump

SCRIPT = "nodesmith-bootstrap.py"
SCRIPT_PATH = "/usr/local/sbin/nodesmith-bootstrap"
SCRIPT_CONFIG_PATH = "/run/kubeadm/nodesmith-bootstrap.json"
# The script's own paths (cloudinit/nodesmith-bootstrap.py); CAPI's sentinel contract.
STATUS_PATH = "/run/cluster-api/bootstrap-status.json"
SENTINEL_PATH = "/run/cluster-api/bootstrap-success.complete"


@lru_cache(maxsize=2)
def script_entry(compressed: bool) -> str:
    """The script's write_files item as YAML, dumped once per form.

    It is the same for every Machine; dumping it per render was a fifth of a worker render's
    time. The template appends it to the write_files list.
    """
    entry: dict[str, Any] = {"path": SCRIPT_PATH, "owner": "root:root", "permissions": "0755"}
    if compressed:
        entry |= {"encoding": "gz+b64", "content": packed_script(SCRIPT)}
    else:
        entry["content"] = plain_script(SCRIPT)
    return dump([entry])


def comment_safe(text: str) -> str:
    """``text`` fit for one YAML comment line: what YAML would read as a line break or reject
    (control characters, NEL, U+2028/9, a BOM) is shown escaped, never passed through."""
    return "".join(c if c.isprintable() or c == "\t" else repr(c)[1:-1] for c in text)


def _entry(label: str, text: str) -> list[str]:
    """One step, continuation lines of a multi-line command indented under its first."""
    first, *rest = text.split("\n")
    pad = " " * len(label)
    return [comment_safe(label + first), *(comment_safe(pad + line) for line in rest)]


def run_order(config: dict[str, Any]) -> list[str]:
    """The comment lines (without ``# ``) saying what the node runs, in order."""
    lines = [
        f"In order, the node runs (runcmd: {SCRIPT_PATH}, its config",
        f"{SCRIPT_CONFIG_PATH}; transient kubeadm failures are retried,",
        f"progress in {STATUS_PATH}):",
    ]
    for command in config["pre"]:
        lines += _entry("  pre:     ", command)
    lines += _entry("  kubeadm: ", shlex.join(config["command"]))
    for command in config["post"]:
        lines += _entry("  post:    ", command)
    lines.append(f"  success: {SENTINEL_PATH}")
    return lines


def script_form(compressed: bool, plain_size: int, budget: int) -> list[str]:
    """The comment lines saying how the script ships, and why when it is compressed."""
    if not compressed:
        return [f"{SCRIPT_PATH} ships as plain text (last write_files entry)."]
    return [
        f"{SCRIPT_PATH} ships gzip+base64 (last write_files entry): plain,",
        f"this userdata would be {plain_size} bytes, over the {budget // 1024} KiB budget.",
        f"Readable source: cloudinit/{SCRIPT} in nodesmith {__version__}.",
    ]


# The bash twin's config: the same keys as bash variables, in run order.
_SHELL_VARS = (
    ("ROLE", "role"),
    ("VERB", "verb"),
    ("PRE", "pre"),
    ("COMMAND", "command"),
    ("POST", "post"),
    ("BACKOFF", "backoff"),
    ("MAX_BACKOFF", "maxBackoff"),
    ("DEADLINE", "deadline"),
    ("PKI_DIR", "pkiDir"),
    ("REDACT", "redact"),
    ("REPORT_URL", "reportUrl"),
    ("REPORT_CREDENTIAL", "reportCredential"),
    ("REPORT_CA", "reportCA"),
    ("REPORT_RETRY", "reportRetry"),
    ("CONSUME_CONFIG", "consumeConfig"),
)


def shell_config(config: dict[str, Any]) -> str:
    """The script config for ``nodesmith-bootstrap.sh`` (Ignition nodes have no python3):
    bash variables and arrays, every value shell-quoted, so sourcing it runs nothing."""
    lines = ["# nodesmith-bootstrap config: sourced by /opt/bin/nodesmith-bootstrap (bash)"]
    for var, key in _SHELL_VARS:
        if key not in config:
            continue
        value = config[key]
        if isinstance(value, list):
            lines.append(f"{var}=(" + " ".join(shlex.quote(str(v)) for v in value) + ")")
        else:
            lines.append(f"{var}={shlex.quote(str(value))}")
    return "\n".join(lines) + "\n"

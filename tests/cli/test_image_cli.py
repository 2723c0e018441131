"""``nodesmith image apply-roles --ssh``, stopped by SIGTERM while pyinfra is connecting.

The SSH peer is a listener that accepts and never answers (a test double standing in for a
builder VM that hangs: the fault to inject), so pyinfra is surely still running when the
signal comes. The private key comes in $NODESMITH_SSH_PRIVATE_KEY, as Packer's cloud templates
pass it, and is written to a temporary file under this test's TMPDIR.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from bootstrap.sshkeys import generate

NODESMITH = str(Path(sys.executable).with_name("nodesmith"))


def _processes_with(needle: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if needle in cmdline and state != "Z":
            found.append(int(entry.name))
    return found


def test_sigterm_removes_the_key_file_and_stops_pyinfra(tmp_path: Path) -> None:
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    private = generate("nodesmith-test").private_openssh
    env = {**os.environ, "TMPDIR": str(tmp), "NODESMITH_SSH_PRIVATE_KEY": private}
    proc = subprocess.Popen(
        [NODESMITH, "image", "apply-roles", "--ssh", "127.0.0.1", "--ssh-port", str(port),
         "--no-apt-update", "--log", str(tmp_path / "roles.log")],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    try:
        listener.settimeout(120)
        conn, _ = listener.accept()  # pyinfra is connecting: the key file exists now
        assert [p.name for p in tmp.iterdir() if p.name.startswith("nodesmith-key-")]
        pyinfra = _processes_with(f"--ssh-port {port} ")
        assert pyinfra, "pyinfra is not running"
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
        listener.close()
    conn.close()
    assert proc.returncode == 143, out
    assert out.strip().splitlines()[-1] == "nodesmith: terminated"
    assert sorted(p.name for p in tmp.iterdir()) == []  # key file and known_hosts dir gone
    deadline = time.monotonic() + 10
    while _processes_with(f"--ssh-port {port} ") and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _processes_with(f"--ssh-port {port} ") == [], "pyinfra outlived nodesmith"

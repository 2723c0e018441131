"""A byte relay between stdin/stdout and a TCP address: qemu's ``guestfwd=...-cmd:`` target.

The VMs' user networking is ``restrict=on``: a guest reaches nothing on the host but what a
forward rule names. A ``guestfwd`` to a chardev would be one connection for the VM's lifetime;
with ``cmd:`` qemu starts this relay for each connection the guest opens (HTTP reports to the
controller's endpoint close after every request), wired to that connection on stdin/stdout.

    python -m bootstrap.vm.relay HOST PORT
"""

from __future__ import annotations

import os
import socket
import sys
import threading


def _pump_in(sock: socket.socket) -> None:
    while chunk := os.read(0, 65536):
        sock.sendall(chunk)
    sock.shutdown(socket.SHUT_WR)


def main(argv: list[str]) -> int:
    if len(argv) != 3 or not argv[2].isdigit():
        print("usage: python -m bootstrap.vm.relay HOST PORT", file=sys.stderr)
        return 2
    try:
        sock = socket.create_connection((argv[1], int(argv[2])), timeout=30)
    except OSError:
        return 1  # nobody listens: the guest sees its connection closed
    threading.Thread(target=_pump_in, args=(sock,), daemon=True).start()
    try:
        while chunk := sock.recv(65536):
            os.write(1, chunk)
    except OSError:
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))

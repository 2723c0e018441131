"""Find the data directories (templates, roles, image definitions) in a checkout or a wheel.

The wheel carries ``cloudinit/``, ``roles/`` and ``images/`` under ``bootstrap/_data/``; an
editable install or a checkout reads them from the repository root instead.
"""

from __future__ import annotations

from pathlib import Path

_PACKAGE = Path(__file__).resolve().parent
# Where a checkout keeps what the wheel ships under another name.
_CHECKOUT_PATHS = {"tests-node": "tests/node"}


def data_dir(name: str) -> Path:
    """The directory holding ``name``: ``cloudinit``, ``roles``, ``images`` or ``tests-node``."""
    shipped = _PACKAGE / "_data" / name
    if shipped.is_dir():
        return shipped
    checkout = _PACKAGE.parent / _CHECKOUT_PATHS.get(name, name)
    if checkout.is_dir():
        return checkout
    raise FileNotFoundError(f"nodesmith data directory {name!r} is missing from the install")

"""The house rules of ``bootstrap/``, checked on the source: one room per concern, rooms in
layers (render < serve, controller < vm < cli), no import cycles, and ``nodesmith --version``
stays light."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

from bootstrap import __version__

PACKAGE = Path(__file__).resolve().parents[1] / "bootstrap"


def _module(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path, top_level_only: bool) -> set[str]:
    """bootstrap modules ``path`` imports (module level only, when asked: lazy imports inside
    functions cannot make an import-time cycle)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    nodes = tree.body if top_level_only else list(ast.walk(tree))
    found: set[str] = set()
    for node in nodes:
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("bootstrap"):
            found.add(node.module)
            found.update(f"{node.module}.{a.name}" for a in node.names)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("bootstrap"))
    return found


MODULES = {_module(p): p for p in PACKAGE.rglob("*.py")}


def test_the_engine_never_imports_the_command_line() -> None:
    offenders = {
        name: sorted(i for i in _imports(path, False) if i.startswith("bootstrap.cli"))
        for name, path in MODULES.items()
        if not name.startswith("bootstrap.cli")
    }
    assert {k: v for k, v in offenders.items() if v} == {}


# A room imports only rooms of a lower layer (and the small shared helpers at the top, which
# import no room): data flows one way, parse -> render -> write/serve/apply.
LAYERS = {
    "render": 1, "kubernetes": 1, "image": 1,  # the engines: none knows another
    "serve": 2, "controller": 2,  # drivers of render, side by side
    "vm": 3,  # boots what image builds, with what render, kubernetes and controller give
    "cli": 4,
}  # fmt: skip


def _room(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[1] in LAYERS else None


def test_rooms_import_only_lower_layers() -> None:
    offenders: dict[str, list[str]] = {}
    for name, path in MODULES.items():
        room = _room(name)
        rank = LAYERS[room] if room else 0
        for imported in _imports(path, False):
            other = _room(imported)
            if other is not None and other != room and LAYERS[other] >= rank:
                offenders.setdefault(name, []).append(imported)
    assert offenders == {}


def test_no_import_cycles() -> None:
    graph = {
        name: {i for i in _imports(path, True) if i in MODULES and i != name}
        for name, path in MODULES.items()
    }
    # A package's __init__ importing its own submodules is how it exports them, not a cycle.
    for name, deps in graph.items():
        graph[name] = {d for d in deps if not name.startswith(d + ".")}
    seen: dict[str, int] = {}
    cycles: list[list[str]] = []

    def visit(node: str, stack: list[str]) -> None:
        seen[node] = 1
        for dep in sorted(graph[node]):
            if seen.get(dep) == 1:
                cycles.append([*stack[stack.index(dep) :], dep] if dep in stack else [node, dep])
            elif dep not in seen:
                visit(dep, [*stack, dep])
        seen[node] = 2

    for name in sorted(graph):
        if name not in seen:
            visit(name, [name])
    assert cycles == []


def test_every_concern_is_a_subpackage() -> None:
    rooms = sorted(p.name for p in PACKAGE.iterdir() if (p / "__init__.py").is_file())
    assert rooms == ["cli", "controller", "image", "kubernetes", "render", "serve", "vm"]
    loose = sorted(p.stem for p in PACKAGE.glob("*.py") if p.stem != "__init__")
    # Only small helpers shared by several rooms stay at the top.
    assert loose == ["aptsources", "checksums", "errors", "fsutil", "hostutil", "log",
                     "manifest", "progress", "resources", "seed", "sshkeys"]  # fmt: skip


def test_version_imports_nothing_heavy() -> None:
    probe = (
        "import sys, runpy; sys.argv = ['nodesmith', '--version']\n"
        "try:\n    runpy.run_module('bootstrap.cli', run_name='__main__')\n"
        "except SystemExit:\n    pass\n"
        "heavy = [m for m in ('paramiko', 'pydantic', 'jinja2', 'pycdlib', 'yaml', 'uvicorn',"
        " 'cryptography', 'lightkube') if m in sys.modules]\nprint('heavy=' + ','.join(heavy))"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                         check=True).stdout.strip().splitlines()  # fmt: skip
    assert out == [f"nodesmith {__version__}", "heavy="]

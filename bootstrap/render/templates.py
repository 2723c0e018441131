"""Render the Jinja2 templates in ``cloudinit/`` and dump YAML the way cloud-init reads it.

Templates only lay documents out; every decision is made in Python before they are called.
The environment is strict (an undefined name is an error) and never autoescapes, since the
output is YAML, not HTML. Only nodesmith's own templates are ever rendered.
"""

from __future__ import annotations

import ast
import base64
import functools
import gzip
from typing import Any

import jinja2

from bootstrap.render.yamlio import dump
from bootstrap.resources import data_dir


@functools.cache
def environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(data_dir("cloudinit"))),
        undefined=jinja2.StrictUndefined,
        autoescape=False,
        keep_trailing_newline=True,
        trim_blocks=True,
    )
    env.filters["to_yaml"] = dump
    return env


def render(name: str, **context: Any) -> str:
    return environment().get_template(name).render(**context)


def _without_docstrings(source: str) -> str:
    """The same Python program with docstrings and comments gone: it rides in every userdata."""
    tree = ast.parse(source)
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Module | ast.FunctionDef | ast.ClassDef)
            and node.body
            and isinstance(node.body[0], ast.Expr)
            and isinstance(node.body[0].value, ast.Constant)
            and isinstance(node.body[0].value.value, str)
        ):
            node.body = node.body[1:] or [ast.Pass()]
    shebang = source.splitlines()[0] if source.startswith("#!") else "#!/usr/bin/python3"
    return f"{shebang}\n# packed by nodesmith from cloudinit/ (see its source for docs)\n" + (
        ast.unparse(tree) + "\n"
    )


@functools.cache
def plain_script(name: str) -> str:
    """A Python script from ``cloudinit/`` without its docstrings and comments, read once."""
    source = (data_dir("cloudinit") / name).read_text(encoding="utf-8")
    return _without_docstrings(source)


@functools.cache
def packed_script(name: str) -> str:
    """:func:`plain_script`, gzipped and base64-encoded once."""
    raw = plain_script(name).encode()
    return base64.b64encode(gzip.compress(raw, compresslevel=9, mtime=0)).decode()

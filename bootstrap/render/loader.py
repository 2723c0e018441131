"""Read Kubernetes objects from YAML/JSON files, directories or stdin into one bundle.

A bundle is the flat list of objects a render sees: Clusters, Machines, KubeadmConfigs and
Secrets, in any API version nodesmith reads. Parsing here is only about syntax; what the
objects mean is decided in ``bootstrap.objects``.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import yaml

from bootstrap.errors import TerminalError
from bootstrap.render import yamlio
from bootstrap.render.doccache import DocumentCache

YAML_SUFFIXES = (".yaml", ".yml", ".json")


class ParseError(TerminalError):
    """The bytes are not YAML/JSON Kubernetes objects (HTTP 400, exit 65)."""

    http_status = 400


# Nodes a bundle may expand to. YAML aliases let a few hundred bytes stand for billions of
# nodes ("billion laughs"); every later step walks the expanded tree, so it is bounded here.
MAX_NODES = 1_000_000


def _documents(
    text: str, source: str, cache: DocumentCache | None = None
) -> Iterator[dict[str, Any]]:
    try:
        docs, values = (cache or yamlio).load_all_counted(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or "invalid YAML"
        raise ParseError(f"{problem}{where}", reason="ParseError", obj=source) from None
    except RecursionError:
        raise ParseError("document nests too deeply", reason="ParseError", obj=source) from None
    except ValueError as exc:  # e.g. an integer beyond Python's digit limit
        raise ParseError(f"unreadable value: {exc}", reason="ParseError", obj=source) from None
    if values is None or values >= MAX_NODES:  # else the builder has already checked it all
        _check_tree(docs, source)
    for index, doc in enumerate(docs):
        yield from _flatten(doc, f"{source}[{index}]")


def _check_tree(docs: Any, source: str) -> None:
    """Refuse trees that expand past MAX_NODES, and strings with lone surrogates.

    A ``"\\ud800"`` escape parses to a str that cannot be encoded as UTF-8 output.
    """
    stack = [docs]
    seen = 0
    while stack:
        item = stack.pop()
        seen += 1
        if seen > MAX_NODES:
            raise ParseError(
                f"expands to more than {MAX_NODES} values (YAML aliases?)",
                reason="ParseError",
                obj=source,
            )
        if isinstance(item, str):
            if not item.isascii():
                try:
                    item.encode("utf-8")
                except UnicodeEncodeError:
                    raise ParseError(
                        "holds a string with a lone surrogate escape (not valid Unicode)",
                        reason="ParseError",
                        obj=source,
                    ) from None
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)


def _flatten(doc: Any, where: str) -> Iterator[dict[str, Any]]:
    """Accept a plain object, a ``kind: List`` / ``{"items": [...]}``, or a JSON list."""
    if doc is None:
        return
    if isinstance(doc, list):
        for i, item in enumerate(doc):
            yield from _flatten(item, f"{where}[{i}]")
        return
    if not isinstance(doc, dict):
        raise ParseError(
            f"expected a Kubernetes object (a mapping), got {type(doc).__name__}",
            reason="ParseError",
            obj=where,
        )
    if "kind" not in doc and isinstance(doc.get("items"), list):
        yield from _flatten(doc["items"], f"{where}.items")
        return
    if str(doc.get("kind", "")).endswith("List") and isinstance(doc.get("items"), list):
        yield from _flatten(doc["items"], f"{where}.items")
        return
    yield doc


def parse_text(
    text: str | bytes, source: str = "<input>", cache: DocumentCache | None = None
) -> list[dict[str, Any]]:
    """Parse multi-document YAML (JSON is YAML) into a list of object mappings.

    With ``cache`` (the server's), documents seen before are not parsed again; the objects
    returned are then shared with other callers and must not be modified.
    """
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError:
            raise ParseError("input is not UTF-8", reason="ParseError", obj=source) from None
    return list(_documents(text, source, cache))


def parse_json(text: str | bytes, source: str = "<input>") -> list[dict[str, Any]]:
    """Parse a JSON body: one object, a list of objects, or ``{"items": [...]}``."""
    try:
        doc = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise ParseError(f"invalid JSON: {exc}", reason="ParseError", obj=source) from None
    _check_tree(doc, source)
    return list(_flatten(doc, source))


def _files_in(path: Path) -> list[Path]:
    return sorted(p for p in path.rglob("*") if p.is_file() and p.suffix in YAML_SUFFIXES)


def load_paths(paths: Iterable[str]) -> list[dict[str, Any]]:
    """Load every ``-f`` argument: a file, a directory (recursively, sorted) or ``-``."""
    objects: list[dict[str, Any]] = []
    for arg in paths:
        if arg == "-":
            stream = getattr(sys.stdin, "buffer", None)
            # Bytes, so input that is not UTF-8 is a ParseError rather than a traceback.
            data = stream.read() if stream is not None else sys.stdin.read()
            objects.extend(parse_text(data, "<stdin>"))
            continue
        path = Path(arg)
        if path.is_dir():
            files = _files_in(path)
        elif path.is_file():
            files = [path]
        else:
            raise TerminalError("no such file or directory", reason="FileNotFound", obj=arg)
        for file in files:
            try:
                text = file.read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError) as exc:
                raise ParseError(
                    f"cannot read: {exc}", reason="ParseError", obj=str(file)
                ) from None
            objects.extend(parse_text(text, str(file)))
    return objects

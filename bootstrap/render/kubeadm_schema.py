"""Refuse kubeadm (and kubelet/kube-proxy) documents with fields their API version lacks.

kubeadm decodes its config strictly, so a field that is misspelt, or that belongs to the other
API version (``extraArgs`` as a map in v1beta4, ``timeoutForControlPlane`` in v1beta4), fails
on the node, minutes after boot, where nobody sees it. We check every generated document
before rendering instead and fail terminally, naming the full path and the API version.

The field lists are data beside the code (``bootstrap/render/schemas/<group>_<version>.json``,
e.g. ``kubeadm.k8s.io_v1beta4.json``), taken from the upstream Go types (each file's ``source``
names them). A field spec is Go-like:
``string``, ``bool``, ``int``, ``number``, ``duration``/``time`` (strings on the wire),
``object`` (any mapping, contents not checked), ``any``, ``[]T``, ``map[string]T`` or the
name of a struct in the same file. ``null`` is accepted anywhere, as Go's decoder does
(``taints: null`` is meaningful). The files are compiled once into a tree of nodes, and a check
walks the document only; paths are built only when something is wrong.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from bootstrap.errors import ObjectRef, TerminalError, invalid, kind_of, may_be_secret, show_value

_SCHEMA_DIR = Path(__file__).resolve().parent / "schemas"

_STRUCT, _LIST, _MAP, _SCALAR, _OBJECT, _ANY = range(6)

_SCALARS: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "duration": (str,),
    "time": (str,),
    "bool": (bool,),
    "int": (int,),
    "number": (int, float),
}

_MAX_LISTED = 12  # list the known fields in the message when there are at most this many


class _Node:
    """One compiled field spec. ``label`` says what was expected, for messages."""

    __slots__ = ("fields", "item", "label", "tag", "types")

    def __init__(self, tag: int, label: str) -> None:
        self.tag = tag
        self.label = label
        self.fields: dict[str, _Node] = {}
        self.item: _Node | None = None
        self.types: tuple[type, ...] = ()


class _Bad(Exception):
    """Raised deep in the walk; each frame adds its path segment while it unwinds."""

    def __init__(self, reason: str, why: str, value: Any) -> None:
        super().__init__(why)
        self.reason = reason
        self.why = why
        self.value = value
        self.parts: list[str] = []


class _Shown(str):
    """A value description that ``show_value`` prints without quotes."""

    def __repr__(self) -> str:
        return str(self)


class _Schema:
    """The compiled kinds of one apiVersion."""

    def __init__(self, path: Path) -> None:
        raw = json.loads(path.read_text(encoding="utf-8"))
        self.api_version: str = raw["apiVersion"]
        self.source: str = raw.get("source", "")
        self._types: dict[str, dict[str, str]] = raw["types"]
        self._compiled: dict[str, _Node] = {}
        self.kinds: dict[str, _Node] = {}
        for kind in raw["kinds"]:
            node = self._struct(kind)
            # TypeMeta is inlined in every kind.
            node.fields.setdefault("apiVersion", self._spec("string"))
            node.fields.setdefault("kind", self._spec("string"))
            self.kinds[kind] = node

    def _struct(self, name: str) -> _Node:
        node = self._compiled.get(name)
        if node is not None:
            return node
        if name not in self._types:
            raise ValueError(f"{self.api_version}: field spec names unknown type {name!r}")
        fields = self._types[name]
        shown = ", ".join(fields) if len(fields) <= _MAX_LISTED else ""
        node = _Node(_STRUCT, f"{name}{{{shown}}}" if shown else name)
        self._compiled[name] = node  # before the fields: allows recursive types
        node.fields = {field: self._spec(spec) for field, spec in fields.items()}
        return node

    def _spec(self, spec: str) -> _Node:
        if spec.startswith("[]"):
            item = self._spec(spec[2:])
            node = _Node(_LIST, f"a list of {item.label}")
            node.item = item
            return node
        if spec.startswith("map[string]"):
            item = self._spec(spec[len("map[string]") :])
            node = _Node(_MAP, f"a map of {item.label}")
            node.item = item
            return node
        if spec in _SCALARS:
            node = _Node(_SCALAR, spec)
            node.types = _SCALARS[spec]
            return node
        if spec == "object":
            return _Node(_OBJECT, "a mapping")
        if spec == "any":
            return _Node(_ANY, "anything")
        return self._struct(spec)


def _describe(value: Any, field: str) -> Any:
    """What a message shows for a bad value: a scalar itself unless its field may be secret;
    a map only by its keys and a list by its length (either may hold a token)."""
    if isinstance(value, Mapping):
        return _Shown(f"a map with keys {show_value([str(k) for k in value])}")
    if isinstance(value, list | tuple):
        return _Shown(f"a list of {len(value)}")
    if may_be_secret(field):
        return _Shown(f"{kind_of(value)}, not shown: it may be secret")
    return value


def _scalar_ok(node: _Node, value: Any) -> bool:
    kind = type(value)
    if kind in node.types:
        return True
    if kind is bool:  # bool is an int subclass; only a "bool" spec takes it
        return False
    return isinstance(value, node.types)


def _check(node: _Node, value: Any, field: str) -> None:
    """Walk ``value`` against ``node``; ``field`` is the key it sits under (for messages)."""
    if value is None:
        return
    tag = node.tag
    if tag == _STRUCT:
        if not isinstance(value, Mapping):
            raise _Bad("InvalidFieldType", f"expected {node.label}", _describe(value, field))
        fields = node.fields
        for key, sub in value.items():
            child = fields.get(key)
            if child is None:
                bad = _Bad("UnknownField", f"unknown field in {node.label}", _Shown(repr(key)))
                bad.parts.append(f".{key}")
                raise bad
            if child.tag == _SCALAR:
                if sub is not None and not _scalar_ok(child, sub):
                    bad = _Bad("InvalidFieldType", f"expected {child.label}", _describe(sub, key))
                    bad.parts.append(f".{key}")
                    raise bad
                continue
            if child.tag == _ANY:
                continue
            try:
                _check(child, sub, key)
            except _Bad as nested:
                nested.parts.append(f".{key}")
                raise
        return
    if tag == _LIST:
        if not isinstance(value, list | tuple):
            raise _Bad("InvalidFieldType", f"expected {node.label}", _describe(value, field))
        item = node.item
        assert item is not None
        for index, sub in enumerate(value):
            try:
                _check(item, sub, field)
            except _Bad as nested:
                nested.parts.append(f"[{index}]")
                raise
        return
    if tag == _MAP:
        if not isinstance(value, Mapping):
            raise _Bad("InvalidFieldType", f"expected {node.label}", _describe(value, field))
        item = node.item
        assert item is not None
        for key, sub in value.items():
            if not isinstance(key, str):
                raise _Bad("InvalidFieldType", "map keys must be strings", _Shown(repr(key)))
            try:
                _check(item, sub, field)
            except _Bad as nested:
                nested.parts.append(f"[{key}]")
                raise
        return
    if tag == _SCALAR:
        if not _scalar_ok(node, value):
            raise _Bad("InvalidFieldType", f"expected {node.label}", _describe(value, field))
        return
    if tag == _OBJECT and not isinstance(value, Mapping):
        raise _Bad("InvalidFieldType", f"expected {node.label}", _describe(value, field))


def _load() -> dict[str, _Schema]:
    schemas: dict[str, _Schema] = {}
    for path in sorted(_SCHEMA_DIR.glob("*.json")):
        schema = _Schema(path)
        schemas[schema.api_version] = schema
    if not schemas:
        raise FileNotFoundError(f"no kubeadm field lists under {_SCHEMA_DIR}")
    return schemas


_SCHEMAS = _load()

API_VERSIONS: tuple[str, ...] = tuple(_SCHEMAS)
"""Every apiVersion a field list is shipped for."""


def kinds(api_version: str) -> tuple[str, ...]:
    """The kinds checked for ``api_version`` (empty if the version is unknown)."""
    schema = _SCHEMAS.get(api_version)
    return tuple(schema.kinds) if schema else ()


def known_fields(api_version: str, kind: str) -> frozenset[str]:
    """Top-level field names of ``kind`` in ``api_version``; KeyError if either is unknown."""
    return frozenset(_SCHEMAS[api_version].kinds[kind].fields)


def check_document(doc: dict[str, Any], where: ObjectRef | str) -> None:
    """Raise TerminalError for an unknown apiVersion/kind, unknown field or wrong shape.

    ``where`` names the object the document was built from (``KubeadmConfig default/w0``);
    the error's field is the full path, e.g. ``ClusterConfiguration.apiServer.extraArgs[0].nme``,
    and its message names the API version.
    """
    if not isinstance(doc, Mapping):
        raise invalid(
            where,
            "<document>",
            _describe(doc, ""),
            "a config document must be a mapping",
            reason="InvalidFieldType",
        )
    api_version = doc.get("apiVersion")
    schema = _SCHEMAS.get(api_version) if isinstance(api_version, str) else None
    if schema is None:
        raise invalid(
            where,
            "apiVersion",
            api_version,
            f"unsupported apiVersion (supported: {', '.join(API_VERSIONS)})",
            reason="UnknownAPIVersion",
        )
    kind = doc.get("kind")
    node = schema.kinds.get(kind) if isinstance(kind, str) else None
    if node is None or not isinstance(kind, str):
        raise invalid(
            where,
            "kind",
            kind,
            f"unsupported kind for {api_version} (supported: {', '.join(schema.kinds)})",
            reason="UnknownKind",
        )
    try:
        _check(node, doc, "")
    except _Bad as bad:
        path = kind + "".join(reversed(bad.parts))
        raise _error(where, path, bad, schema.api_version) from None


def _error(where: ObjectRef | str, path: str, bad: _Bad, api_version: str) -> TerminalError:
    return invalid(where, path, bad.value, f"{bad.why} ({api_version})", reason=bad.reason)


def drop_newer_fields(doc: dict[str, Any]) -> list[str]:
    """Remove from ``doc`` the fields its apiVersion lacks but a newer kubeadm API has.

    CABPK drops such fields for an older target (a v1beta4-only ``encryptionAlgorithm`` on a
    Kubernetes 1.30 node) instead of refusing the config; a field no version knows is still a
    typo, left for ``check_document`` to refuse. Returns the dropped paths, e.g.
    ``ClusterConfiguration.encryptionAlgorithm``.
    """
    api_version, kind = doc.get("apiVersion"), doc.get("kind")
    schema = _SCHEMAS.get(api_version) if isinstance(api_version, str) else None
    if schema is None or not isinstance(kind, str) or kind not in schema.kinds:
        return []
    api_version = schema.api_version
    newer = [
        s.kinds[kind]
        for v, s in _SCHEMAS.items()
        if v.startswith("kubeadm.k8s.io/") and v > api_version and kind in s.kinds
    ]
    dropped: list[str] = []
    _drop(schema.kinds[kind], newer, doc, kind, dropped)
    return dropped


def _drop(node: _Node, newer: list[_Node], value: Any, path: str, dropped: list[str]) -> None:
    if node.tag == _STRUCT and isinstance(value, dict):
        for key in list(value):
            child = node.fields.get(key)
            later = [n.fields[key] for n in newer if n.tag == _STRUCT and key in n.fields]
            if child is None:
                if later:
                    del value[key]
                    dropped.append(f"{path}.{key}")
                continue
            _drop(child, later, value[key], f"{path}.{key}", dropped)
    elif node.tag == _LIST and isinstance(value, list) and node.item is not None:
        items = [n.item for n in newer if n.tag == _LIST and n.item is not None]
        for index, item in enumerate(value):
            _drop(node.item, items, item, f"{path}[{index}]", dropped)


__all__ = ["API_VERSIONS", "check_document", "drop_newer_fields", "kinds", "known_fields"]

"""YAML in and out on libyaml, with the Python parts PyYAML runs per value made cheaper.

``load_all`` reads multi-document YAML like ``yaml.load_all(text, CSafeLoader)`` at about
twice its speed; ``dump`` writes a value the way nodesmith's documents are written (block
style, insertion order, multi-line text as literal blocks) through libyaml's emitter.

With libyaml the scanning, parsing and composing are C, but PyYAML builds the Python values
in its generic ``SafeConstructor`` (deep-construction generators, per-node state), which is
half of the time ``nodesmith serve`` spends on a YAML body. Kubernetes bundles are plain
mappings, sequences and strings, so those are built here directly from the composed nodes;
every other scalar goes through the same SafeConstructor method PyYAML would call (``yes``
is still ``True``, ``0o17`` still 15, timestamps still datetimes). A document using anything
else (merge keys, ``!!set``, ``!!binary``, unknown tags, unhashable keys) is handed to
PyYAML's own ``construct_document``, so its result or its error is exactly PyYAML's. One
difference, on both paths: a key given twice in one mapping is an error, not a silent
overwrite.
Aliases keep PyYAML's semantics too: one node becomes one shared Python object.
"""

from __future__ import annotations

import functools
import io
import re
from collections.abc import Callable
from typing import Any

import yaml
from yaml.constructor import ConstructorError
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode
from yaml.resolver import Resolver

from bootstrap.errors import show_value

_CLoader: type = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_CDumper: type = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
_RESOLVER = Resolver()
_MEMO_LEN = 128  # longer scalars are rare (file contents) and not worth keeping


@functools.lru_cache(maxsize=8192)
def _implicit_tag(value: str, quoted_implicit: bool) -> str:
    tag: str = _RESOLVER.resolve(ScalarNode, value, (True, quoted_implicit))  # type: ignore[no-untyped-call]
    return tag


class MemoResolve:
    """``resolve`` with the implicit-tag regex scan memoized.

    Both libyaml's composer and PyYAML's representer ask the Python resolver, for every plain
    scalar, which of a dozen regexes (bool, int, float, null, timestamp...) it matches. A
    bundle repeats the same keys and values ("apiVersion", "kind", "name"...), so the answer is
    cached by value. Safe only because the safe resolver has no path resolvers: the tag of a
    scalar depends on its text alone.
    """

    def resolve(self, kind: Any, value: Any, implicit: Any) -> Any:
        if kind is ScalarNode and implicit[0] and len(value) <= _MEMO_LEN:
            return _implicit_tag(value, implicit[1])
        return Resolver.resolve(self, kind, value, implicit)  # type: ignore[arg-type,no-untyped-call]


class Loader(MemoResolve, _CLoader):  # type: ignore[misc]
    """libyaml's safe loader with the memoized resolver."""


class _OutputResolver(Resolver):
    """What the readers of our output take for a non-string, beyond YAML 1.1.

    kubeadm and kubectl read YAML with Go (yaml.v2 / sigs.k8s.io/yaml), which also takes
    ``1e3``, ``1.5E3`` (YAML 1.2 floats: no dot or no exponent sign needed) and ``y``/``n``
    (booleans) for non-strings. PyYAML, on YAML 1.1, writes those strings plain, so a node
    named ``1e3`` reached kubeadm as a number. Telling the emitter they resolve to something
    else makes it quote them. Output only: the loader keeps PyYAML's reading.
    """


_OutputResolver.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?$"),
    list("-+.0123456789"),
)
_OutputResolver.add_implicit_resolver(
    "tag:yaml.org,2002:bool", re.compile(r"^(?:y|Y|n|N)$"), list("yYnN")
)
_OUTPUT_RESOLVER = _OutputResolver()


@functools.lru_cache(maxsize=8192)
def _output_tag(value: str, quoted_implicit: bool) -> str:
    tag: str = _OUTPUT_RESOLVER.resolve(ScalarNode, value, (True, quoted_implicit))  # type: ignore[no-untyped-call]
    return tag


class _OutputResolve:
    """``resolve`` for emitting: the Go-reader view above, memoized like ``MemoResolve``."""

    def resolve(self, kind: Any, value: Any, implicit: Any) -> Any:
        if kind is ScalarNode and implicit[0]:
            if len(value) <= _MEMO_LEN:
                return _output_tag(value, implicit[1])
            return _OUTPUT_RESOLVER.resolve(kind, value, implicit)  # type: ignore[no-untyped-call]
        return Resolver.resolve(self, kind, value, implicit)  # type: ignore[arg-type,no-untyped-call]


class Dumper(_OutputResolve, _CDumper):  # type: ignore[misc]
    """libyaml's safe dumper; strings Go would read as numbers or booleans are quoted."""


assert not Resolver.yaml_path_resolvers, "MemoResolve assumes no YAML path resolvers"

_STR = "tag:yaml.org,2002:str"
_SEQ = "tag:yaml.org,2002:seq"
_MAP = "tag:yaml.org,2002:map"
_SCALARS = {
    f"tag:yaml.org,2002:{name}": f"construct_yaml_{name}"
    for name in ("null", "bool", "int", "float", "timestamp")
}
_KEY_TAGS = frozenset({_STR, *_SCALARS})
_MERGE = "tag:yaml.org,2002:merge"  # hashable keys PyYAML would not treat specially


class _Fallback(Exception):
    """The document needs PyYAML's full constructor."""


class _Tally:
    """What the builder saw: values built, and whether the result is a plain tree.

    Plain means no collection was reached twice (no aliased map or list) and every string is
    ASCII; then ``values`` is exactly the size of the expanded tree and no string can hold a
    lone surrogate, so a caller need not walk the result again to check either.
    """

    def __init__(self) -> None:
        self.values = 0
        self.plain = True


def _builder(loader: Any, tally: _Tally) -> Callable[[Node], Any]:
    scalars = {tag: getattr(loader, method) for tag, method in _SCALARS.items()}
    built: dict[int, Any] = {}

    def build(node: Node) -> Any:
        tally.values += 1
        tag = node.tag
        if type(node) is ScalarNode:
            if tag == _STR:
                value = node.value
                if not value.isascii():
                    tally.plain = False
                return value
            make = scalars.get(tag)
            if make is None:
                raise _Fallback
            return make(node)
        done = built.get(id(node))
        if done is not None:
            tally.plain = False  # an alias: the tree is larger than the nodes built
            return done
        if tag == _MAP and type(node) is MappingNode:
            mapping: dict[Any, Any] = {}
            built[id(node)] = mapping
            for index, (key_node, value_node) in enumerate(node.value):
                if type(key_node) is not ScalarNode or key_node.tag not in _KEY_TAGS:
                    raise _Fallback  # merge keys, '=' keys, collections as keys
                key = build(key_node)
                if key in mapping and _given_before(node, index):
                    raise _duplicate(node, key_node)
                mapping[key] = build(value_node)
            return mapping
        if tag == _SEQ and type(node) is SequenceNode:
            sequence: list[Any] = []
            built[id(node)] = sequence
            sequence.extend(build(item) for item in node.value)
            return sequence
        raise _Fallback

    return build


def _duplicate(mapping: Node, key: Node) -> yaml.YAMLError:
    """A key given twice in one mapping. PyYAML keeps the last silently; two files joined
    without ``---`` then lose a whole object (the Cluster vanished behind a misleading error)."""
    return ConstructorError(
        "while constructing a mapping",
        mapping.start_mark,
        f"found duplicate key {show_value(key.value)}",
        key.start_mark,
    )


def _given_before(mapping: Node, index: int) -> bool:
    """Is key ``index`` of ``mapping`` written the same (tag and text) before it? Asked only
    when Python sees a repeated key, which ``1`` and ``true`` are too (1 == True)."""
    key = mapping.value[index][0]
    return any(
        isinstance(other, ScalarNode) and (other.tag, other.value) == (key.tag, key.value)
        for other, _ in mapping.value[:index]
    )


def _refuse_duplicate_keys(root: Node) -> None:
    """The same check on a document PyYAML constructs itself (merge keys and other tags):
    plain scalar keys only, each node once (aliases are not walked twice)."""
    stack, seen = [root], set()
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, MappingNode):
            keys: set[tuple[str, str]] = set()
            for key_node, value_node in node.value:
                if isinstance(key_node, ScalarNode) and key_node.tag != _MERGE:
                    if (key_node.tag, key_node.value) in keys:
                        raise _duplicate(node, key_node)
                    keys.add((key_node.tag, key_node.value))
                stack += [key_node, value_node]
        elif isinstance(node, SequenceNode):
            stack += node.value


def load_all_counted(text: str) -> tuple[list[Any], int | None]:
    """Every document of ``text``, and the number of values in them when that is known
    without another walk (a plain tree, see ``_Tally``), else None."""
    loader = Loader(text)
    docs: list[Any] = []
    tally = _Tally()
    try:
        while loader.check_node():
            node = loader.get_node()
            try:
                docs.append(_builder(loader, tally)(node))
            except _Fallback:
                tally.plain = False
                _refuse_duplicate_keys(node)
                docs.append(loader.construct_document(node))
    finally:
        loader.dispose()
    return docs, tally.values if tally.plain else None


def load_all(text: str) -> list[Any]:
    """Every document of ``text``; raises what ``yaml.load_all`` would raise."""
    return load_all_counted(text)[0]


_NULL, _BOOL, _INT = ("tag:yaml.org,2002:null", "tag:yaml.org,2002:bool",
                      "tag:yaml.org,2002:int")  # fmt: skip


def _str_style(value: str) -> str | None:
    """Literal block (``|``) for printable multi-line text, so files stay readable."""
    return "|" if "\n" in value and value.replace("\n", "").isprintable() else None


def _represent(dumper: Any, value: Any) -> Node:
    """The node PyYAML's SafeRepresenter would make, without its per-value machinery.

    dict, list, str, bool, int and None, by exact type; anything else (floats, dates,
    subclasses) is PyYAML's own ``represent_data``. Unlike PyYAML, an object that occurs twice
    is written out twice, never as an ``&id001`` anchor: cloud-init and kubeadm read both, a
    person reads the former.
    """
    kind = type(value)
    if kind is str:
        return ScalarNode(_STR, value, style=_str_style(value))
    if kind is dict:
        return MappingNode(_MAP, [(_represent(dumper, k), _represent(dumper, v))
                                  for k, v in value.items()], flow_style=False)  # fmt: skip
    if kind is list:
        return SequenceNode(_SEQ, [_represent(dumper, v) for v in value], flow_style=False)
    if kind is bool:
        return ScalarNode(_BOOL, "true" if value else "false")
    if kind is int:
        return ScalarNode(_INT, str(value))
    if value is None:
        return ScalarNode(_NULL, "null")
    node: Node = dumper.represent_data(value)
    return node


def dump(value: Any) -> str:
    """``value`` as one YAML document: block style, keys in insertion order, no line folding,
    UTF-8 text as is, multi-line strings as literal blocks."""
    stream = io.StringIO()
    dumper = Dumper(stream, default_flow_style=False, sort_keys=False, width=1_000_000,
                    allow_unicode=True)  # fmt: skip
    try:
        dumper.open()
        dumper.serialize(_represent(dumper, value))
        dumper.close()
    finally:
        dumper.dispose()
    return stream.getvalue()


def dump_stream(objects: list[dict[str, Any]]) -> bytes:
    """Kubernetes objects as one ``---``-separated stream, as ``kubectl apply -f`` reads it.

    PyYAML's own representer on purpose (these files are read back by tools and a person
    rarely edits them, so they keep PyYAML's usual layout), with the quoting of ``Dumper``.
    """
    return yaml.dump_all(objects, Dumper=Dumper, sort_keys=False).encode()

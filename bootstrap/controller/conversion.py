"""KubeadmConfig and KubeadmConfigTemplate between v1beta1 and v1beta2, as plain JSON objects:
the pure part of the CRD conversion webhook (no I/O, no client).

The mapping is Cluster API's (``api/bootstrap/kubeadm/v1beta1/conversion.go`` and
``util/conversion``), on the whole object; the kubeadm documents are open in our CRDs, so a field
not named here passes through unchanged both ways. Under ``spec`` (``spec.template.spec`` for a
template):

- ``extraArgs`` / ``kubeletExtraArgs``: a map in v1beta1, a ``[{name, value}]`` list in v1beta2
  (sorted by name going up; going down a repeated name keeps its last value).
- ``clusterConfiguration.apiServer.timeoutForControlPlane`` (a Go duration) becomes
  ``initConfiguration.timeouts.controlPlaneComponentHealthCheckSeconds`` and, as upstream does,
  the same key of ``joinConfiguration.timeouts``; ``joinConfiguration.discovery.timeout`` becomes
  ``joinConfiguration.timeouts.tlsBootstrapSeconds``; a bootstrap token's ``ttl`` its
  ``ttlSeconds``. Seconds are the duration truncated, capped at 2^31-1 (upstream's
  ``ConvertToSeconds``); going down they are written as Go writes a duration (``"4m0s"``).
- v1beta1 only: ``useExperimentalRetryJoin``, the documents' ``apiVersion``/``kind``, and
  ``clusterConfiguration.kubernetesVersion``/``clusterName``/``networking``. v1beta2 only: the
  ``timeouts`` keys no v1beta1 field holds.
- status: ``ready`` <-> ``initialization.dataSecretCreated`` (``ready`` has no omitempty in
  v1beta1, so it is always written going down; ``false`` is dropped going up), the v1beta1
  conditions and ``failureReason``/``failureMessage`` <-> ``deprecated.v1beta1``, v1beta1's
  ``v1beta2.conditions`` <-> v1beta2's ``conditions``.

What the target version cannot hold is kept in the annotation :data:`ANNOTATION`, a compact JSON
object ``{"from": <apiVersion>, "fields": [...]}``. Each field is ``{"path": [...], "value": v}``
(no ``value``: the field was absent) and, when it depends on what the other version holds,
``"if"``: the paths there, with ``"sha256"`` of what they held when it was written. Converting
back to ``from``, a field is put back only while those paths hold the same (a v1beta1 client
that edits ``files`` keeps the v1beta2-only timeouts; one that edits an ``extraArgs`` map gets
its edit). Every conversion is checked by converting its result back: whatever that would not
give back exactly is stashed too, under the whole ``spec`` or ``status`` as its condition, so an
untouched object round-trips exactly.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Final

from bootstrap.errors import ObjectRef, TerminalError, kind_of, may_be_secret, show_value

GROUP = "bootstrap.cluster.x-k8s.io"
V1BETA1 = f"{GROUP}/v1beta1"
V1BETA2 = f"{GROUP}/v1beta2"
ANNOTATION = "cluster.x-k8s.io/conversion-data"
"""What one version cannot hold, kept for the way back."""

REVIEW_API_VERSION = "apiextensions.k8s.io/v1"
VERSIONS = (V1BETA1, V1BETA2)
KINDS = ("KubeadmConfig", "KubeadmConfigTemplate")
MAX_SECONDS = 2**31 - 1  # the v1beta2 seconds fields are int32

Obj = dict[str, Any]
Path = tuple[str | int, ...]


class ConversionError(TerminalError):
    """An object that cannot be converted: the message names the field and the value."""

    def __init__(
        self, message: str, *, obj: ObjectRef | str | None = None, field: str | None = None
    ) -> None:
        super().__init__(message, reason="ConversionFailed", obj=obj, field=field)


class _Absent:
    def __repr__(self) -> str:
        return "<absent>"


_ABSENT: Final = _Absent()

_CPCHS = "controlPlaneComponentHealthCheckSeconds"
_TLS = "tlsBootstrapSeconds"
_TIMEOUTS = (
    _CPCHS,
    "kubeletHealthCheckSeconds",
    "kubernetesAPICallSeconds",
    "etcdAPICallSeconds",
    _TLS,
    "discoverySeconds",
)
_COMPONENTS: tuple[Path, ...] = (
    ("apiServer",),
    ("controllerManager",),
    ("scheduler",),
    ("etcd", "local"),
)
_V1BETA1_CLUSTER_ONLY = ("kubernetesVersion", "clusterName", "networking")
_DURATION = 'must be a Go duration such as "4m0s", "20m" or "1h30m"'


# ---------------------------------------------------------------------------------------------
# Go durations


_UNITS = {
    "ns": 1,
    "us": 10**3,
    "\u00b5s": 10**3,  # µ (micro sign)
    "\u03bcs": 10**3,  # μ (Greek mu)
    "ms": 10**6,
    "s": 10**9,
    "m": 60 * 10**9,
    "h": 3600 * 10**9,
}
_NUMBER = re.compile(r"([0-9]*)(?:\.([0-9]*))?")
_MAX_NANOS = 2**63 - 1


def _parse_duration(text: str) -> int | None:
    """Go's ``time.ParseDuration``: the nanoseconds, or None when ``text`` is not a duration."""
    rest, negative = text, False
    if rest[:1] in ("-", "+"):
        negative, rest = rest[0] == "-", rest[1:]
    if rest == "0":
        return 0
    if not rest:
        return None
    total = 0
    while rest:
        number = _NUMBER.match(rest)
        assert number is not None  # the pattern matches the empty string
        whole, fraction = number.group(1), number.group(2)
        if (not whole and not fraction) or len(whole) > 20:
            return None
        rest = rest[number.end() :]
        end = 0
        while end < len(rest) and rest[end] not in "0123456789.":
            end += 1
        unit = _UNITS.get(rest[:end])
        if unit is None:
            return None
        rest = rest[end:]
        total += int(whole or "0") * unit
        if fraction:
            digits = fraction[:20]  # beyond a nanosecond's precision anyway
            total += int(digits) * unit // 10 ** len(digits)
        if total > _MAX_NANOS + (1 if negative else 0):
            return None
    return -total if negative else total


def _format_seconds(seconds: int) -> str:
    """Whole seconds as Go's ``Duration.String`` writes them: ``0s``, ``4m0s``, ``24h0m0s``."""
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes}m{secs}s"
    if minutes:
        return f"{minutes}m{secs}s"
    return f"{secs}s"


# ---------------------------------------------------------------------------------------------
# Paths into a JSON document


def _show(path: Path) -> str:
    """``spec.initConfiguration.bootstrapTokens[0].ttl``."""
    text = ""
    for part in path:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else part)
    return text


def _get(doc: Any, path: Path) -> Any:
    """The value at ``path``, or ``_ABSENT``; never raises."""
    node = doc
    for part in path:
        if isinstance(part, int):
            if not isinstance(node, list) or not 0 <= part < len(node):
                return _ABSENT
            node = node[part]
        else:
            if not isinstance(node, dict) or part not in node:
                return _ABSENT
            node = node[part]
    return node


def _set(doc: Any, path: Path, value: Any) -> None:
    """Set ``path`` to ``value``, making the maps on the way; a list index that is not there (or a
    scalar on the way) leaves ``doc`` as it is."""
    node = doc
    for part in path[:-1]:
        if isinstance(part, int):
            if not isinstance(node, list) or not 0 <= part < len(node):
                return
            node = node[part]
        else:
            if not isinstance(node, dict):
                return
            if node.get(part) is None:
                node[part] = {}
            node = node[part]
    last = path[-1]
    if isinstance(last, int):
        if isinstance(node, list) and 0 <= last < len(node):
            node[last] = value
    elif isinstance(node, dict):
        node[last] = value


def _root_depth(path: Path) -> int:
    """How deep the spec (or status) root of ``path`` is: maps above it are never pruned."""
    return 3 if path[:3] == ("spec", "template", "spec") else 1


def _delete(doc: Any, path: Path) -> None:
    """Remove ``path``, and the maps it leaves empty below its spec or status root."""
    chain: list[tuple[Any, str | int]] = []
    node = doc
    for part in path[:-1]:
        child = _get(node, (part,))
        if child is _ABSENT:
            return
        chain.append((node, part))
        node = child
    if not isinstance(node, dict) or path[-1] not in node:
        return
    del node[path[-1]]
    for depth in range(len(path) - 1, _root_depth(path), -1):
        parent, key = chain[depth - 1]
        if isinstance(parent, dict) and parent[key] == {}:
            del parent[key]
        else:
            break


def _copy(value: Any) -> Any:
    """A deep copy of JSON data that shares nothing (``copy.deepcopy`` keeps a map that sits in
    two places one map, and a conversion changes it in place)."""
    if isinstance(value, dict):
        return {key: _copy(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_copy(item) for item in value]
    return value


def _canon(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _same(a: Any, b: Any) -> bool:
    """Equal as JSON (``true`` is not ``1``); ``_ABSENT`` equals only itself."""
    if a is _ABSENT or b is _ABSENT:
        return a is b
    return a is b or _canon(a) == _canon(b)


def _digest(doc: Any, paths: tuple[Path, ...]) -> str:
    held = [[list(p), [] if (v := _get(doc, p)) is _ABSENT else [v]] for p in paths]
    return hashlib.sha256(_canon(held).encode()).hexdigest()[:16]


# ---------------------------------------------------------------------------------------------
# One conversion run: errors name the object, losses are collected


@dataclass
class _Entry:
    """A field the target version cannot hold: its path and value (``_ABSENT``: it was not
    there), put back only while the ``when`` paths hold what they held (``digest``)."""

    path: Path
    value: Any
    when: tuple[Path, ...] = ()
    digest: str = ""


@dataclass
class _Run:
    ref: ObjectRef | str | None
    losses: list[_Entry] = field(default_factory=list)

    def fail(self, path: Path | str, value: Any, why: str, secret: bool = False) -> ConversionError:
        where = path if isinstance(path, str) else _show(path)
        leaf = path[-1] if isinstance(path, tuple) and path else where
        if isinstance(value, dict):
            shown = f"a map with keys {show_value([str(k) for k in value])}"
        elif isinstance(value, list):
            shown = f"a list of {len(value)}"
        elif secret or may_be_secret(leaf) or self._under_secret(path):
            shown = f"{kind_of(value)}, not shown: it may be secret"
        else:
            shown = show_value(value)
        return ConversionError(f"{why} (got {shown})", obj=self.ref, field=where)

    @staticmethod
    def _under_secret(path: Path | str) -> bool:
        """An item of a list whose name may be secret (``bootstrapTokens[0]``) is not shown."""
        return (
            isinstance(path, tuple)
            and len(path) > 1
            and isinstance(path[-1], int)
            and may_be_secret(path[-2])
        )

    def walk(self, doc: Any, path: Path) -> Any:
        """The value at ``path`` (``_ABSENT`` if it or a map on the way is missing or null); a
        map or list on the way that is something else is a ConversionError."""
        node = doc
        for i, part in enumerate(path):
            if isinstance(part, int):
                if not isinstance(node, list):
                    raise self.fail(path[:i], node, "must be a list")
                if part >= len(node):
                    return _ABSENT
                node = node[part]
            else:
                if not isinstance(node, dict):
                    raise self.fail(path[:i], node, "must be a map")
                if node.get(part) is None:
                    return _ABSENT
                node = node[part]
        return node

    def mapping(self, doc: Any, path: Path) -> Obj | None:
        value = self.walk(doc, path)
        if value is _ABSENT:
            return None
        if not isinstance(value, dict):
            raise self.fail(path, value, "must be a map")
        return value

    def items(self, doc: Any, path: Path) -> range:
        """The indices of the list of maps at ``path``."""
        value = self.walk(doc, path)
        if value is _ABSENT:
            return range(0)
        if not isinstance(value, list):
            raise self.fail(path, value, "must be a list")
        for i, item in enumerate(value):
            if not isinstance(item, dict):
                raise self.fail((*path, i), item, "must be a map")
        return range(len(value))

    def lose(self, doc: Any, path: Path, when: tuple[Path, ...] = ()) -> None:
        """Move the field at ``path`` out of ``doc`` into the losses."""
        value = self.walk(doc, path)
        if value is not _ABSENT:
            _delete(doc, path)
            self.losses.append(_Entry(path, value, when))

    def seconds(self, path: Path, value: Any) -> int:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise self.fail(path, value, "must be a whole number of seconds")
        if isinstance(value, float) and not value.is_integer():
            raise self.fail(path, value, "must be a whole number of seconds")
        seconds = int(value)
        if seconds < 0:
            raise self.fail(path, value, "must not be negative")
        if seconds > MAX_SECONDS:
            raise self.fail(path, value, f"must be at most {MAX_SECONDS} seconds")
        return seconds


# ---------------------------------------------------------------------------------------------
# The fields that change shape


def _args_list(args: dict[str, str]) -> list[Obj]:
    return [{"name": name, "value": args[name]} for name in sorted(args)]


def _args_up(run: _Run, doc: Obj, path: Path) -> None:
    value = run.walk(doc, path)
    if value is _ABSENT:
        return
    if not isinstance(value, dict):
        raise run.fail(path, value, "must be a map of flag names to strings")
    for name, arg in value.items():
        if not isinstance(arg, str):
            raise run.fail(f"{_show(path)}[{name}]", arg, "must be a string", may_be_secret(name))
    _set(doc, path, _args_list(value))


def _args_down(run: _Run, doc: Obj, path: Path) -> None:
    value = run.walk(doc, path)
    if value is _ABSENT:
        return
    if not isinstance(value, list):
        raise run.fail(path, value, "must be a list of {name, value}")
    args: dict[str, str] = {}
    for i, item in enumerate(value):
        if not isinstance(item, dict):
            raise run.fail((*path, i), item, "must be a map with a name and a value")
        name = item.get("name")
        if not isinstance(name, str):
            raise run.fail((*path, i, "name"), name, "must be a string")
        arg = item.get("value", "")
        if not isinstance(arg, str):
            raise run.fail((*path, i, "value"), arg, "must be a string", may_be_secret(name))
        args[name] = arg  # a repeated name: the last one wins, as upstream's ConvertFromArgs
    _set(doc, path, args)
    if not _same(value, _args_list(args)):  # repeated, unsorted, or more than name and value
        run.losses.append(_Entry(path, value, (path,)))


def _duration_up(run: _Run, doc: Obj, source: Path, target: Path) -> int | None:
    text = run.walk(doc, source)
    if text is _ABSENT:
        return None
    run.walk(doc, target)  # the maps on the way there are maps
    if not isinstance(text, str):
        raise run.fail(source, text, _DURATION)
    nanos = _parse_duration(text)
    if nanos is None:
        raise run.fail(source, text, _DURATION)
    if nanos < 0:
        raise run.fail(source, text, "must not be negative")
    seconds = min(nanos // 10**9, MAX_SECONDS)  # truncated and capped, as upstream
    _delete(doc, source)
    _set(doc, target, seconds)
    if _format_seconds(seconds) != text:  # "20m", "1.5s": the way back restores the text
        run.losses.append(_Entry(source, text, (target,)))
    return seconds


def _seconds_down(run: _Run, doc: Obj, source: Path, target: Path) -> None:
    value = run.walk(doc, source)
    if value is _ABSENT:
        return
    run.walk(doc, target)
    seconds = run.seconds(source, value)
    _delete(doc, source)
    _set(doc, target, _format_seconds(seconds))


def _documents(root: Path) -> tuple[Path, Path, Path]:
    return (
        (*root, "clusterConfiguration"),
        (*root, "initConfiguration"),
        (*root, "joinConfiguration"),
    )


def _spec_up(run: _Run, doc: Obj, root: Path) -> None:
    if run.mapping(doc, root) is None:
        return
    cluster, init, join = _documents(root)
    run.lose(doc, (*root, "useExperimentalRetryJoin"))
    for document in (cluster, init, join):
        if run.mapping(doc, document) is not None:
            for key in ("apiVersion", "kind"):
                run.lose(doc, (*document, key))
    for key in _V1BETA1_CLUSTER_ONLY:
        run.lose(doc, (*cluster, key))
    for component in _COMPONENTS:
        _args_up(run, doc, cluster + component + ("extraArgs",))
    for document in (init, join):
        _args_up(run, doc, (*document, "nodeRegistration", "kubeletExtraArgs"))
    for i in run.items(doc, (*init, "bootstrapTokens")):
        token = (*init, "bootstrapTokens", i)
        _duration_up(run, doc, (*token, "ttl"), (*token, "ttlSeconds"))
    timeout = (*cluster, "apiServer", "timeoutForControlPlane")
    seconds = _duration_up(run, doc, timeout, (*init, "timeouts", _CPCHS))
    if seconds is not None:  # upstream sets the join's too: it is one v1beta1 field
        run.walk(doc, (*join, "timeouts", _CPCHS))
        _set(doc, (*join, "timeouts", _CPCHS), seconds)
    _duration_up(run, doc, (*join, "discovery", "timeout"), (*join, "timeouts", _TLS))


def _timeouts_down(run: _Run, doc: Obj, document: Path) -> dict[str, Any] | None:
    """Take ``timeouts`` out of a document, its known keys checked."""
    path = (*document, "timeouts")
    timeouts = run.mapping(doc, path)
    if timeouts is None:
        return None
    for key in _TIMEOUTS:
        if timeouts.get(key) is not None:
            run.seconds((*path, key), timeouts[key])
    _delete(doc, path)
    return timeouts


def _spec_down(run: _Run, doc: Obj, root: Path) -> None:
    if run.mapping(doc, root) is None:
        return
    cluster, init, join = _documents(root)
    for component in _COMPONENTS:
        _args_down(run, doc, cluster + component + ("extraArgs",))
    for document in (init, join):
        _args_down(run, doc, (*document, "nodeRegistration", "kubeletExtraArgs"))
    for i in run.items(doc, (*init, "bootstrapTokens")):
        token = (*init, "bootstrapTokens", i)
        _seconds_down(run, doc, (*token, "ttlSeconds"), (*token, "ttl"))
    timeout = (*cluster, "apiServer", "timeoutForControlPlane")
    run.walk(doc, timeout)
    run.walk(doc, (*join, "discovery", "timeout"))
    init_timeouts = _timeouts_down(run, doc, init) or {}
    join_timeouts = _timeouts_down(run, doc, join) or {}
    for key, value in init_timeouts.items():
        if key == _CPCHS and value is not None:
            _set(doc, timeout, _format_seconds(int(value)))
        else:
            run.losses.append(_Entry((*init, "timeouts", key), value))
    for key, value in join_timeouts.items():
        if key == _TLS and value is not None:
            _set(doc, (*join, "discovery", "timeout"), _format_seconds(int(value)))
        elif key == _CPCHS:  # up again it follows timeoutForControlPlane unless that is edited
            run.losses.append(_Entry((*join, "timeouts", key), value, (timeout,)))
        else:
            run.losses.append(_Entry((*join, "timeouts", key), value))
    if init_timeouts.get(_CPCHS) is not None and _CPCHS not in join_timeouts:
        run.losses.append(_Entry((*join, "timeouts", _CPCHS), _ABSENT, (timeout,)))


# ---------------------------------------------------------------------------------------------
# Status (KubeadmConfig only)

_V1BETA1_DEPRECATED = ("conditions", "failureReason", "failureMessage")


def _status_up(run: _Run, doc: Obj) -> None:
    status = run.mapping(doc, ("status",))
    if status is None:
        return
    carried = run.mapping(doc, ("status", "v1beta2"))
    ready = status.get("ready")
    if ready is not None and not isinstance(ready, bool):
        raise run.fail(("status", "ready"), ready, "must be true or false")
    skip = ("ready", "v1beta2", *_V1BETA1_DEPRECATED)
    out: Obj = {key: value for key, value in status.items() if key not in skip}
    if ready:
        initialization = out.get("initialization")
        out["initialization"] = {
            **(initialization if isinstance(initialization, dict) else {}),
            "dataSecretCreated": True,
        }
    deprecated = {key: status[key] for key in _V1BETA1_DEPRECATED if key in status}
    if deprecated:
        out["deprecated"] = {"v1beta1": deprecated}
    if carried is not None and "conditions" in carried:
        out["conditions"] = carried["conditions"]
    doc["status"] = out


def _status_down(run: _Run, doc: Obj) -> None:
    status = run.mapping(doc, ("status",))
    if status is None:
        return
    initialization = run.mapping(doc, ("status", "initialization")) or {}
    run.mapping(doc, ("status", "deprecated"))
    deprecated = run.mapping(doc, ("status", "deprecated", "v1beta1")) or {}
    created = initialization.get("dataSecretCreated")
    if created is not None and not isinstance(created, bool):
        path = ("status", "initialization", "dataSecretCreated")
        raise run.fail(path, created, "must be true or false")
    out: Obj = {"ready": created is True}  # no omitempty on v1beta1's ready
    skip = ("initialization", "conditions", "deprecated")
    out.update((key, value) for key, value in status.items() if key not in skip)
    out.update((key, deprecated[key]) for key in _V1BETA1_DEPRECATED if key in deprecated)
    if "conditions" in status:
        out["v1beta2"] = {"conditions": status["conditions"]}
    doc["status"] = out
    if created is False:  # up again false is dropped, unless ready is still false
        path = ("status", "initialization", "dataSecretCreated")
        run.losses.append(_Entry(path, False, (("status", "ready"),)))


# ---------------------------------------------------------------------------------------------
# The annotation


@dataclass
class _Stash:
    source: str
    entries: list[_Entry]
    empty_annotations: bool  # the object had an empty annotations map: keep it


def _valid_path(path: Any) -> bool:
    return (
        isinstance(path, list)
        and bool(path)
        and all(
            isinstance(p, str) or (isinstance(p, int) and not isinstance(p, bool)) for p in path
        )
        and path[0] not in ("apiVersion", "kind", "metadata")  # never metadata: the API
    )  # server refuses a conversion that changes it


def _load(raw: Any) -> _Stash | None:
    """The annotation's stash; None when it is not one we wrote (it is then dropped)."""
    try:
        data = json.loads(raw)
    except (TypeError, ValueError, RecursionError):
        return None
    if not isinstance(data, dict) or data.get("from") not in VERSIONS:
        return None
    fields = data.get("fields")
    if not isinstance(fields, list):
        return None
    entries = []
    for item in fields:
        if not isinstance(item, dict) or not _valid_path(item.get("path")):
            return None
        when = item.get("if", [])
        digest = item.get("sha256", "")
        if not isinstance(when, list) or not all(map(_valid_path, when)):
            return None
        if not isinstance(digest, str):
            return None
        value = item.get("value", _ABSENT)
        paths = tuple(tuple(p) for p in when)
        entries.append(_Entry(tuple(item["path"]), value, paths, digest))
    return _Stash(data["from"], entries, data.get("emptyAnnotations") is True)


def _dump(source: str, entries: list[_Entry], empty_annotations: bool) -> str:
    fields = []
    for entry in entries:
        item: Obj = {"path": list(entry.path)}
        if entry.value is not _ABSENT:
            item["value"] = entry.value
        if entry.when:
            item["if"] = [list(p) for p in entry.when]
            item["sha256"] = entry.digest
        fields.append(item)
    data: Obj = {"from": source, "fields": fields}
    if empty_annotations:
        data["emptyAnnotations"] = True
    return _canon(data)


def _take_stash(run: _Run, body: Obj) -> _Stash | None:
    """Remove our annotation from ``body`` (and the annotations map it alone made)."""
    meta = run.mapping(body, ("metadata",))
    if meta is None:
        return None
    annotations = run.mapping(body, ("metadata", "annotations"))
    if annotations is None or ANNOTATION not in annotations:
        return None
    stash = _load(annotations.pop(ANNOTATION))
    if not annotations and not (stash is not None and stash.empty_annotations):
        del meta["annotations"]
    return stash


def _apply(doc: Obj, entry: _Entry) -> None:
    if entry.value is _ABSENT:
        _delete(doc, entry.path)
    else:
        _set(doc, entry.path, _copy(entry.value))


def _restore(stash: _Stash, source: Obj, out: Obj) -> None:
    """Put back each stashed field whose condition ``source`` still meets."""
    for entry in stash.entries:
        if entry.when and _digest(source, entry.when) != entry.digest:
            continue
        _apply(out, entry)


def _diff(a: Any, b: Any, path: Path = ()) -> Iterator[Path]:
    """The paths (as deep as both sides are maps) where ``a`` and ``b`` differ."""
    if isinstance(a, dict) and isinstance(b, dict):
        for key in sorted({*a, *b}):
            if not path and key in ("apiVersion", "metadata"):
                continue
            yield from _diff(a.get(key, _ABSENT), b.get(key, _ABSENT), (*path, key))
    elif not _same(a, b):
        yield path


def _pure(run: _Run, body: Obj, to: str) -> Obj:
    """``body`` as ``to``, without the annotation; what is lost goes to ``run.losses``."""
    doc: Obj = _copy(body)
    doc["apiVersion"] = to
    template = doc.get("kind") == "KubeadmConfigTemplate"
    root: Path = ("spec", "template", "spec") if template else ("spec",)
    if to == V1BETA2:
        _spec_up(run, doc, root)
        if not template:
            _status_up(run, doc)
    else:
        _spec_down(run, doc, root)
        if not template:
            _status_down(run, doc)
    return doc


def _stash_for(run: _Run, body: Obj, out: Obj, source: str) -> list[_Entry]:
    """What ``out`` must carry for the way back to give ``body`` again: the losses the way back
    would not undo by itself, then whatever else it would not give back exactly."""
    try:
        back = _pure(_Run(run.ref), out, source)
    except ConversionError:  # not reached for what _pure wrote; kept whole if it ever is
        entries = [
            _Entry((key,), body[key], ((key,),)) for key in ("spec", "status") if key in body
        ]
    else:
        entries = [e for e in run.losses if not _same(_get(back, e.path), e.value)]
        for entry in entries:
            _apply(back, entry)
        entries += [
            _Entry(path, _get(body, path), (path[:1],)) for path in _diff(back, body) if path
        ]
    for entry in entries:
        entry.digest = _digest(out, entry.when) if entry.when else ""
    return entries


def _ref(obj: Obj) -> ObjectRef | str | None:
    kind = obj.get("kind") if isinstance(obj.get("kind"), str) else None
    meta = obj.get("metadata")
    if kind and isinstance(meta, dict) and isinstance(meta.get("name"), str):
        namespace = meta.get("namespace")
        return ObjectRef(kind, namespace if isinstance(namespace, str) else "", meta["name"])
    return kind


def convert(obj: dict[str, Any], to: str) -> dict[str, Any]:
    """``obj`` (a KubeadmConfig or KubeadmConfigTemplate at v1beta1 or v1beta2) as apiVersion
    ``to``: a new dict, ``obj`` untouched; at its own version, an equal copy. A ConversionError
    names the field and the value that cannot be converted.

    >>> convert({"apiVersion": V1BETA2, "kind": "KubeadmConfig", "status": {}}, V1BETA1)["status"]
    {'ready': False}
    """
    if not isinstance(obj, dict):
        raise ConversionError(f"an object must be a map (got {kind_of(obj)})")
    kind = obj.get("kind")
    if kind not in KINDS:
        raise ConversionError(
            f"must be KubeadmConfig or KubeadmConfigTemplate (got {show_value(kind)})",
            field="kind",
        )
    run = _Run(_ref(obj))
    source = obj.get("apiVersion")
    if source not in VERSIONS:
        raise run.fail("apiVersion", source, f"must be {V1BETA1} or {V1BETA2}")
    if to not in VERSIONS:
        raise run.fail("apiVersion", to, f"cannot be converted to: only {V1BETA1} or {V1BETA2}")
    body: Obj = _copy(obj)
    if source == to:
        return body
    stash = _take_stash(run, body)
    out = _pure(run, body, to)
    if stash is not None and stash.source == to:
        _restore(stash, body, out)
    entries = _stash_for(run, body, out, source)
    if entries:
        meta = body.get("metadata")
        empty = isinstance(meta, dict) and meta.get("annotations") == {}
        out.setdefault("metadata", {}).setdefault("annotations", {})[ANNOTATION] = _dump(
            source, entries, empty
        )
    return out


# ---------------------------------------------------------------------------------------------
# ConversionReview


def _request(body: Any) -> tuple[str, str, list[Any]]:
    if not isinstance(body, dict):
        raise ConversionError(f"a ConversionReview must be a map (got {kind_of(body)})")
    request = body.get("request")
    if not isinstance(request, dict):
        raise ConversionError("missing (a ConversionReview request)", field="request")
    uid = request.get("uid")
    if not isinstance(uid, str) or not uid:
        raise ConversionError(f"must be a string (got {show_value(uid)})", field="request.uid")
    desired = request.get("desiredAPIVersion")
    if desired not in VERSIONS:
        raise ConversionError(
            f"must be {V1BETA1} or {V1BETA2} (got {show_value(desired)})",
            field="request.desiredAPIVersion",
        )
    objects = request.get("objects")
    if not isinstance(objects, list):
        raise ConversionError(f"must be a list (got {kind_of(objects)})", field="request.objects")
    return uid, desired, objects


def review(body: dict[str, Any]) -> dict[str, Any]:
    """A ConversionReview request (apiextensions.k8s.io/v1) -> its response: the objects in
    order and ``result.status`` Success, or Failure with the message naming the field (and no
    objects). Never raises."""
    request = body.get("request") if isinstance(body, dict) else None
    uid = request.get("uid") if isinstance(request, dict) else None
    response: Obj = {"uid": uid if isinstance(uid, str) else ""}
    try:
        _, desired, objects = _request(body)
        converted = []
        for i, obj in enumerate(objects):
            if not isinstance(obj, dict):
                raise ConversionError(
                    f"must be a map (got {kind_of(obj)})", field=f"request.objects[{i}]"
                )
            converted.append(convert(obj, desired))
        response["convertedObjects"] = converted
        response["result"] = {"status": "Success"}
    except ConversionError as error:
        response["result"] = {"status": "Failure", "message": str(error)}
    except Exception as error:  # never a 500: the API server shows this message
        message = f"conversion failed unexpectedly: {type(error).__name__}"
        response["result"] = {"status": "Failure", "message": message}
    return {"apiVersion": REVIEW_API_VERSION, "kind": "ConversionReview", "response": response}

"""Soak: 10,000 requests to one real ``nodesmith serve`` worker, good and bad mixed.

Good bundles (YAML and JSON, envelope, Secret and gzip outputs) are interleaved with
malformed, oversized (declared and streamed) and hostile ones: alias bombs, deep nesting,
type confusion, cross-namespace references, NUL bytes, integers over Python's conversion
limit, wrong tokens, bad names, bad media types. Every answer must be exactly the expected
status with a JSON body; the server must stay up, never answer 500, and its RSS must grow
by under 10% between the 2,000th and the 10,000th request.
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import http.client
import json
import random
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from serve_helpers import (
    WORKER_PATH,
    WORKER_YAML,
    Reply,
    ServeProcess,
    as_yaml,
    rss_kib,
    worker_objects,
)

pytestmark = pytest.mark.timeout(290)

TOTAL = 10_000
LIMIT = 1024 * 1024


@dataclass(frozen=True)
class Case:
    name: str
    weight: int
    expect: int
    body: bytes = b""
    content_type: str = "application/yaml"
    path: str = WORKER_PATH
    token: str | None = None  # None: the right token
    special: str = ""  # "declared" | "chunked": oversized bodies sent by hand


def _edited(edit: Callable[[list[dict]], object]) -> bytes:
    objects = worker_objects()
    edit(objects)
    return as_yaml(objects)


def _bomb(indent: str) -> str:
    """A YAML alias bomb: 9**8 list elements if expanded, a few hundred bytes as text."""
    rows = []
    for i in range(8):
        items = [f"*l{i - 1}"] * 9 if i else ["x"] * 9
        rows.append(f"{indent}l{i}: &l{i} [{', '.join(items)}]")
    return "\n".join(rows) + "\n"


def _cases() -> list[Case]:
    good_json = json.dumps(worker_objects()).encode()
    objs = worker_objects()
    head = as_yaml(objs[:2]).decode()
    tail = as_yaml(objs[3:]).decode()
    bomb_in_config = (
        f"{head}---\napiVersion: bootstrap.cluster.x-k8s.io/v1beta1\nkind: KubeadmConfig\n"
        f"metadata:\n  name: worker-0\n  namespace: default\n  annotations:\n{_bomb('    ')}"
        f"spec:\n  joinConfiguration: {{}}\n  preKubeadmCommands: *l7\n---\n{tail}"
    ).encode()
    bomb_in_secret = (
        WORKER_YAML.decode()
        + "---\napiVersion: v1\nkind: Secret\nmetadata: {name: junk, namespace: default}\n"
        + f"stringData:\n{_bomb('  ')}"
    ).encode()
    at_limit = good_json + b" " * (LIMIT - len(good_json))

    def version(o: list[dict]) -> None:
        o[1]["spec"]["version"] = "v1.14.3"

    def no_endpoint(o: list[dict]) -> None:
        del o[0]["spec"]["controlPlaneEndpoint"]

    def spec_string(o: list[dict]) -> None:
        o[2]["spec"] = "hello"

    def metadata_list(o: list[dict]) -> None:
        o[1]["metadata"] = ["x"]

    def version_int(o: list[dict]) -> None:
        o[1]["spec"]["version"] = 131

    def cluster_elsewhere(o: list[dict]) -> None:
        o[0]["metadata"]["namespace"] = "other"

    def no_ca(o: list[dict]) -> None:
        del o[3]

    def bad_ca(o: list[dict]) -> None:
        o[3]["data"]["tls.crt"] = "!!notbase64!!"

    def ignition(o: list[dict]) -> None:
        o[2]["spec"]["format"] = "ignition"

    def ignition_swap(o: list[dict]) -> None:  # what Ignition cannot carry is refused
        o[2]["spec"]["format"] = "ignition"
        o[2]["spec"]["mounts"] = [["swap", "none", "swap", "sw"]]

    def unknown_field(o: list[dict]) -> None:
        o[2]["spec"]["joinConfiguration"]["surprise"] = {"a": 1}

    return [
        Case("good-yaml", 140, 200, WORKER_YAML),
        Case("good-json", 140, 200, good_json, "application/json"),
        Case("good-secret", 40, 200, WORKER_YAML, path=WORKER_PATH + "?output=secret"),
        Case("good-gzip", 40, 200, good_json, "application/json", WORKER_PATH + "?gzip=true"),
        Case("at-limit", 3, 200, at_limit, "application/json"),
        Case("bomb-in-secret", 10, 400, bomb_in_secret),  # refused at parse: bounded expansion
        Case("not-found", 40, 404, WORKER_YAML, path="/v1/machines/default/worker-7/userdata"),
        Case(
            "other-namespace",
            20,
            404,
            WORKER_YAML,
            path="/v1/machines/kube-system/worker-0/userdata",
        ),
        Case("unknown-path", 10, 404, WORKER_YAML, path="/v1/machines/default/worker-0/x"),
        Case("traversal", 5, 404, WORKER_YAML, path="/v1/machines/../../../etc/passwd"),
        Case("bad-yaml", 40, 400, b"kind: [unclosed\n  - {"),
        Case("bad-json", 40, 400, b'{"items": [', "application/json"),
        Case("scalar-docs", 20, 400, b"- a\n- b\n"),
        Case("not-utf8", 10, 400, b"\xff\xfe\xfd" * 100),
        Case("nul-byte", 10, 400, WORKER_YAML.replace(b"worker-0", b"wor\x00ker", 1)),
        Case("empty", 10, 400, b""),
        Case("huge-int", 10, 400, WORKER_YAML + b"---\nkind: Secret\nx: " + b"9" * 6000 + b"\n"),
        Case("deep-json", 10, 400, b"[" * 200_000, "application/json"),
        Case("deep-yaml", 3, 400, b"[" * 600),
        Case("python-tag", 10, 400, WORKER_YAML + b"---\n!!python/object/apply:os.system [id]\n"),
        Case("bad-namespace", 20, 400, WORKER_YAML, path="/v1/machines/NS/worker-0/userdata"),
        Case("bad-name", 20, 400, WORKER_YAML, path="/v1/machines/default/a_b/userdata"),
        Case("bad-query", 10, 400, WORKER_YAML, path=WORKER_PATH + "?gzip=maybe"),
        Case("no-token", 20, 401, WORKER_YAML, token=""),
        Case("wrong-token", 30, 401, WORKER_YAML, token="not-the-token"),
        Case("media-type", 20, 415, WORKER_YAML, "text/plain"),
        Case("declared-2mib", 20, 413, special="declared"),
        Case("chunked-over", 1, 413, special="chunked"),
        Case("old-version", 30, 422, _edited(version)),
        Case("spec-string", 15, 422, _edited(spec_string)),
        Case("metadata-list", 15, 422, _edited(metadata_list)),
        Case("version-int", 15, 422, _edited(version_int)),
        Case("cluster-elsewhere", 15, 422, _edited(cluster_elsewhere)),
        Case("no-ca", 15, 503, _edited(no_ca)),  # the CA may still come: retry later
        Case("bad-ca", 15, 422, _edited(bad_ca)),
        Case("ignition", 10, 200, _edited(ignition)),
        Case("ignition-swap", 10, 422, _edited(ignition_swap)),
        Case("unknown-field", 15, 422, _edited(unknown_field)),
        Case("bomb-in-config", 10, 400, bomb_in_config),
        Case("no-endpoint", 30, 503, _edited(no_endpoint)),
    ]


def _check_good(case: Case, reply: Reply) -> None:
    body = reply.json()
    if "output=secret" in case.path:
        assert base64.b64decode(body["data"]["value"]).startswith(b"#cloud-config")
        return
    gzipped = body["encoding"] == "gzip+base64"
    raw = base64.b64decode(body["value"]) if gzipped else body["value"].encode()
    assert body["sha256"] == hashlib.sha256(raw).hexdigest()
    plain = gzip.decompress(raw) if gzipped else raw
    expected = b'{\n  "ignition": {' if case.name == "ignition" else b"#cloud-config"
    assert plain.startswith(expected)
    assert gzipped == ("gzip=true" in case.path)


class Client:
    """One keep-alive connection, reopened after the server closes it (413)."""

    def __init__(self, srv: ServeProcess) -> None:
        self.srv = srv
        self.conn: http.client.HTTPConnection | None = None

    def send(self, case: Case) -> Reply:
        if case.special == "declared":
            return self.srv.oversized_declared(2 * LIMIT)
        if case.special == "chunked":
            return self.srv.oversized_chunked(32 * LIMIT)[0]
        if self.conn is None:
            self.conn = self.srv.connection()
        headers = {"Content-Type": case.content_type}
        token = self.srv.token if case.token is None else case.token
        if token:
            headers["Authorization"] = f"Bearer {token}"
        reply = self.srv.request("POST", case.path, case.body, headers, self.conn)
        if reply.headers.get("connection") == "close":
            self.conn.close()
            self.conn = None
        return reply


def test_soak(tmp_path: Path) -> None:
    srv = ServeProcess(tmp_path).start()
    cases = _cases()
    rng = random.Random(20261202)
    order = rng.choices(cases, weights=[c.weight for c in cases], k=TOTAL)
    client = Client(srv)
    seen: Counter[str] = Counter()
    rss: dict[int, int] = {}
    started = time.monotonic()
    try:
        for i, case in enumerate(order, 1):
            reply = client.send(case)
            assert reply.status == case.expect, (i, case.name, reply.status, reply.body[:300])
            if reply.status == 200:
                _check_good(case, reply)
            else:
                error = reply.json()
                assert error["reason"] and error["message"], (case.name, error)
            seen[case.name] += 1
            if i in (2_000, 10_000):
                rss[i] = rss_kib(srv.proc.pid)  # type: ignore[union-attr]
        elapsed = time.monotonic() - started
        assert srv.proc is not None and srv.proc.poll() is None, "server died"
        assert srv.request("GET", "/healthz").status == 200
        assert set(seen) == {c.name for c in cases}, "every kind of request was sent"
        growth = (rss[10_000] - rss[2_000]) / rss[2_000]
        print(
            f"soak: {TOTAL} requests in {elapsed:.1f}s, RSS {rss[2_000]} KiB at 2,000 -> "
            f"{rss[10_000]} KiB at 10,000 ({growth:+.1%})"
        )
        assert growth < 0.10, rss
        statuses = Counter(x["status"] for x in srv.log_lines() if x.get("event") == "request")
        assert 500 not in statuses
        assert sum(statuses.values()) >= TOTAL
    finally:
        if client.conn is not None:
            client.conn.close()
        assert srv.stop() == 0

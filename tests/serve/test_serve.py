"""``nodesmith serve`` end to end: the real server on a free loopback port, driven over HTTP.

Covers every status of the issue's table (plus 405/415), auth, the JSON and Secret outputs,
gzip, the log (one JSON line per request, no secrets), /metrics, /healthz, /openapi.json,
SIGHUP token reload across several workers, TLS, startup errors and graceful stop.
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from proc import is_alive
from serve_helpers import (
    ROOT,
    WORKER_PATH,
    WORKER_YAML,
    ServeProcess,
    as_yaml,
    worker_objects,
)

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServeProcess]:
    srv = ServeProcess(tmp_path_factory.mktemp("serve")).start()
    yield srv
    assert srv.stop() == 0, srv.log_text()


def _ca_pem() -> bytes:
    ca = next(o for o in worker_objects() if o["kind"] == "Secret")
    return base64.b64decode(ca["data"]["tls.crt"])


# --- 200: the envelope, the Secret, gzip, both body types --------------------------------


def _check_envelope(body: dict, *, gzipped: bool = False) -> bytes:
    assert body["format"] == "cloud-config"
    raw = base64.b64decode(body["value"]) if gzipped else body["value"].encode()
    assert body["encoding"] == ("gzip+base64" if gzipped else "plain")
    assert body["sha256"] == hashlib.sha256(raw).hexdigest()
    assert body["size"] == len(raw)
    assert isinstance(body["warnings"], list)
    userdata = gzip.decompress(raw) if gzipped else raw
    assert userdata.startswith(b"#cloud-config")
    assert b"kubeadm-join-config.yaml" in userdata  # a worker join, from the same render path
    return userdata


def test_yaml_bundle_renders_worker_join(server: ServeProcess) -> None:
    reply = server.post(WORKER_YAML)
    assert reply.status == 200, reply.body
    assert reply.headers["content-type"] == "application/json"
    body = reply.json()
    userdata = _check_envelope(body)
    # No token in the config, so one was generated and its Secret travels with the answer.
    token = body["bootstrapTokenSecret"]
    assert token["kind"] == "Secret" and token["type"] == "bootstrap.kubernetes.io/token"
    assert token["metadata"]["namespace"] == "kube-system"
    token_id = base64.b64decode(token["data"]["token-id"]).decode()
    assert token["metadata"]["name"] == f"bootstrap-token-{token_id}"
    assert token_id.encode() in userdata


def test_json_bundle_list_and_items(server: ServeProcess) -> None:
    objects = worker_objects()
    for body in (json.dumps(objects), json.dumps({"items": objects})):
        reply = server.post(body.encode(), content_type="application/json; charset=utf-8")
        assert reply.status == 200, reply.body
        _check_envelope(reply.json())


def test_same_render_as_cli(server: ServeProcess, tmp_path: Path) -> None:
    """A bundle with a fixed token renders byte-identically through the CLI and the service."""
    objects = worker_objects()
    config = next(o for o in objects if o["kind"] == "KubeadmConfig")
    config["spec"]["joinConfiguration"]["discovery"] = {
        "bootstrapToken": {
            "token": "abcdef.0123456789abcdef",
            "apiServerEndpoint": "192.0.2.10:6443",
        }
    }
    bundle = tmp_path / "bundle.yaml"
    bundle.write_bytes(as_yaml(objects))
    cli = subprocess.run(
        [
            sys.executable,
            "-m",
            "bootstrap.cli",
            "render",
            "-f",
            str(bundle),
            "--machine",
            "default/worker-0",
            "--output",
            "json",
        ],
        cwd=ROOT,
        capture_output=True,
        timeout=60,
    )
    assert cli.returncode == 0, cli.stderr
    reply = server.post(bundle.read_bytes())
    assert reply.status == 200, reply.body
    served = reply.json()
    assert "bootstrapTokenSecret" not in served  # the token came from the config
    assert served["sha256"] == json.loads(cli.stdout)["sha256"]


INIT_BUNDLE = (
    (ROOT / "examples" / "cluster.yaml").read_bytes()
    + b"\n---\n"
    + (ROOT / "examples" / "control-plane.yaml").read_bytes()
)
INIT_PATH = "/v1/machines/default/demo-cp-0/userdata"
CA_NAMES = ["demo-ca", "demo-etcd", "demo-proxy", "demo-sa"]


@pytest.mark.parametrize("output", ["json", "secret"])
def test_an_init_that_generates_cas_returns_them(server: ServeProcess, output: str) -> None:
    cas = []
    for _ in range(2):
        reply = server.post(INIT_BUNDLE, path=f"{INIT_PATH}?output={output}")
        assert reply.status == 200, reply.body
        body = reply.json()
        secrets = body["clusterCASecrets"]
        assert sorted(x["metadata"]["name"] for x in secrets) == CA_NAMES
        ca = next(x for x in secrets if x["metadata"]["name"] == "demo-ca")
        cert = base64.b64decode(ca["data"]["tls.crt"]).decode()
        assert "BEGIN CERTIFICATE" in cert and base64.b64decode(ca["data"]["tls.key"])
        value = body["value"] if output == "json" else base64.b64decode(body["data"]["value"])
        userdata = yaml.safe_load(value)
        written = {f["path"]: f["content"] for f in userdata["write_files"]}
        assert written["/etc/kubernetes/pki/ca.crt"] == cert  # the CA the node gets
        if output == "json":
            assert any("apply clusterCASecrets" in w for w in body["warnings"])
        cas.append(cert)
    assert cas[0] != cas[1]  # nothing stored between requests: each one's own CA comes back


def test_secret_output(server: ServeProcess) -> None:
    reply = server.post(WORKER_YAML, path=WORKER_PATH + "?output=secret")
    assert reply.status == 200, reply.body
    secret = reply.json()
    assert secret["apiVersion"] == "v1" and secret["kind"] == "Secret"
    assert secret["type"] == "cluster.x-k8s.io/secret"
    assert secret["metadata"]["name"] == "worker-0"
    assert secret["metadata"]["namespace"] == "default"
    assert secret["metadata"]["labels"]["cluster.x-k8s.io/cluster-name"] == "demo"
    owner = secret["metadata"]["ownerReferences"][0]
    assert owner["kind"] == "KubeadmConfig" and owner["uid"].startswith("7d1c6f2e")
    assert base64.b64decode(secret["data"]["format"]) == b"cloud-config"
    assert base64.b64decode(secret["data"]["value"]).startswith(b"#cloud-config")
    assert secret["bootstrapTokenSecret"]["type"] == "bootstrap.kubernetes.io/token"


def test_gzip(server: ServeProcess) -> None:
    reply = server.post(WORKER_YAML, path=WORKER_PATH + "?gzip=true")
    assert reply.status == 200, reply.body
    _check_envelope(reply.json(), gzipped=True)
    reply = server.post(WORKER_YAML, path=WORKER_PATH + "?output=secret&gzip=true")
    assert reply.status == 200, reply.body
    value = base64.b64decode(reply.json()["data"]["value"])
    assert gzip.decompress(value).startswith(b"#cloud-config")
    plain = server.post(WORKER_YAML, path=WORKER_PATH + "?gzip=false").json()
    assert plain["encoding"] == "plain"


# --- 401 ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "authorization",
    [
        None,
        "",
        "Bearer",
        "Bearer wrong",
        "Basic {token}",
        "Bearer {token}x",
        "Bearer {short}",
        "Bearer  ",
        "{token}",
    ],
)
def test_unauthorized(server: ServeProcess, authorization: str | None) -> None:
    headers = {"Content-Type": "application/yaml"}
    if authorization is not None:
        headers["Authorization"] = authorization.format(token=server.token, short=server.token[:-1])
    reply = server.request("POST", WORKER_PATH, WORKER_YAML, headers)
    assert reply.status == 401
    assert reply.headers["www-authenticate"].startswith("Bearer")
    assert reply.json()["reason"] == "Unauthorized"


def test_bearer_scheme_is_case_insensitive(server: ServeProcess) -> None:
    headers = {"Authorization": f"bearer {server.token}", "Content-Type": "application/yaml"}
    assert server.request("POST", WORKER_PATH, WORKER_YAML, headers).status == 200


def test_auth_is_checked_before_the_body_is_read(server: ServeProcess) -> None:
    """A wrong token gets 401 even for a body far over the limit, without sending it."""
    head = (
        f"POST {WORKER_PATH} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer nope\r\n"
        "Content-Type: application/yaml\r\nContent-Length: 50000000\r\n\r\n"
    )
    assert server.raw(head.encode()).status == 401


# --- 400 ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "content_type", "reason"),
    [
        (b"kind: [unclosed", "application/yaml", "ParseError"),
        (b"a: b\n c: d: e", "application/yaml", "ParseError"),
        (b"{not json", "application/json", "ParseError"),
        (b"42", "application/json", "ParseError"),
        (b"- just\n- strings\n", "application/yaml", "ParseError"),
        (b"\xff\xfe\x00garbage", "application/yaml", "ParseError"),
        (b"   \n\n", "application/yaml", "EmptyBody"),
        (b"[" * 50000, "application/json", "ParseError"),
    ],
)
def test_unparseable_body(
    server: ServeProcess, body: bytes, content_type: str, reason: str
) -> None:
    reply = server.post(body, content_type=content_type)
    assert reply.status == 400, reply.body
    error = reply.json()
    assert error["reason"] == reason
    assert error["message"]


@pytest.mark.parametrize(
    ("path", "field"),
    [
        ("/v1/machines/Default/worker-0/userdata", "path.namespace"),
        ("/v1/machines/-x/worker-0/userdata", "path.namespace"),
        ("/v1/machines/" + "a" * 64 + "/worker-0/userdata", "path.namespace"),
        ("/v1/machines/a.b/worker-0/userdata", "path.namespace"),
        ("/v1/machines/default/Worker/userdata", "path.name"),
        ("/v1/machines/default/w_0/userdata", "path.name"),
        ("/v1/machines/default/w..0/userdata", "path.name"),
        ("/v1/machines/default/%C3%A9/userdata", "path.name"),
        ("/v1/machines/default/" + "a" * 254 + "/userdata", "path.name"),
    ],
)
def test_invalid_names(server: ServeProcess, path: str, field: str) -> None:
    reply = server.post(WORKER_YAML, path=path)
    assert reply.status == 400, reply.body
    assert reply.json()["reason"] == "InvalidName"
    assert reply.json()["field"] == field


@pytest.mark.parametrize("query", ["output=xml", "gzip=yes", "gzip=1", "output=json&output=secret"])
def test_invalid_query(server: ServeProcess, query: str) -> None:
    reply = server.post(WORKER_YAML, path=f"{WORKER_PATH}?{query}")
    assert reply.status == 400
    assert reply.json()["reason"] == "InvalidQuery"


def test_long_dotted_name_is_valid(server: ServeProcess) -> None:
    """A 253-character DNS subdomain passes the name check (and is then just not found)."""
    name = ".".join(["a" * 63] * 3 + ["b" * 61])
    assert len(name) == 253
    reply = server.post(WORKER_YAML, path=f"/v1/machines/default/{name}/userdata")
    assert reply.status == 404


# --- 404, 405, 415 -----------------------------------------------------------------------


def test_machine_not_in_bundle(server: ServeProcess) -> None:
    reply = server.post(WORKER_YAML, path="/v1/machines/default/worker-9/userdata")
    assert reply.status == 404
    error = reply.json()
    assert error["reason"] == "MachineNotFound"
    assert "worker-9" in error["message"]
    # Same name, other namespace: resolution is namespaced.
    assert server.post(WORKER_YAML, path="/v1/machines/other/worker-0/userdata").status == 404


@pytest.mark.parametrize(
    ("path", "status", "reason"),
    [
        ("/", 404, "NotFound"),
        ("/v1", 404, "NotFound"),
        ("/v1/machines/default/worker-0", 404, "NotFound"),
        ("/v1/machines/default/worker-0/userdata/x", 404, "NotFound"),
        ("/v1/machines/default/worker-0/secret", 404, "NotFound"),
        ("/v1/machines/default/a%2Fb/userdata", 404, "NotFound"),
        ("/v1/machines/../../etc/passwd", 404, "NotFound"),
    ],
)
def test_unknown_paths(server: ServeProcess, path: str, status: int, reason: str) -> None:
    reply = server.post(WORKER_YAML, path=path)
    assert (reply.status, reply.json()["reason"]) == (status, reason), path


def test_wrong_methods(server: ServeProcess) -> None:
    reply = server.request("GET", WORKER_PATH)
    assert reply.status == 405 and reply.headers["allow"] == "POST"
    reply = server.request("DELETE", "/healthz")
    assert reply.status == 405 and "GET" in reply.headers["allow"]


@pytest.mark.parametrize(
    "content_type", ["text/plain", "", "application/xml", "multipart/form-data"]
)
def test_unsupported_media_type(server: ServeProcess, content_type: str) -> None:
    reply = server.post(WORKER_YAML, content_type=content_type)
    assert reply.status == 415
    assert reply.json()["field"] == "header.content-type"


# --- 413 ---------------------------------------------------------------------------------

LIMIT = 1024 * 1024


def test_declared_body_over_limit_refused_before_reading(server: ServeProcess) -> None:
    started = time.monotonic()
    reply = server.oversized_declared(LIMIT + 1)  # headers only: the body is never sent
    assert reply.status == 413
    assert reply.json()["reason"] == "BodyTooLarge"
    assert time.monotonic() - started < 5
    # Far over the limit, the server closes instead of draining.
    huge = server.oversized_declared(100 * LIMIT)
    assert huge.status == 413 and huge.headers["connection"] == "close"


def test_chunked_body_over_limit_refused_while_streaming(server: ServeProcess) -> None:
    reply, sent = server.oversized_chunked(64 * LIMIT)
    assert reply.status == 413
    # Refused once the limit was passed, long before the 64 MiB were sent (what was sent
    # beyond the limit sat in loopback socket buffers, several MiB of them).
    assert sent < 24 * LIMIT


def test_body_exactly_at_limit_is_accepted(server: ServeProcess) -> None:
    body = json.dumps(worker_objects()).encode()
    body += b" " * (LIMIT - len(body))
    assert len(body) == LIMIT
    assert server.post(body, content_type="application/json").status == 200
    # One byte more, sent in full by a client that does not wait: it still reads its 413, and
    # the connection stays usable (the server discarded the body without buffering it).
    conn = server.connection()
    try:
        reply = server.post(body + b" ", content_type="application/json", conn=conn)
        assert reply.status == 413 and "connection" not in reply.headers
        assert server.post(WORKER_YAML, conn=conn).status == 200
    finally:
        conn.close()


# --- 422 / 503 ---------------------------------------------------------------------------


def test_terminal_error_names_object_and_field(server: ServeProcess) -> None:
    objects = worker_objects()
    objects[1]["spec"]["version"] = "v1.14.0"
    reply = server.post(as_yaml(objects))
    assert reply.status == 422
    error = reply.json()
    assert error["terminal"] is True
    assert error["object"] == "Machine default/worker-0"
    assert error["field"] == "spec.version"
    assert "v1.14.0" in error["message"]
    assert error["reason"]


def test_terminal_error_unknown_field(server: ServeProcess) -> None:
    objects = worker_objects()
    objects[2]["spec"]["joinConfiguration"]["bogus"] = True
    reply = server.post(as_yaml(objects))
    assert reply.status == 422
    assert "bogus" in (reply.json()["field"] or "")


def test_transient_error_has_retry_after(server: ServeProcess) -> None:
    objects = worker_objects()
    del objects[0]["spec"]["controlPlaneEndpoint"]
    reply = server.post(as_yaml(objects))
    assert reply.status == 503
    assert int(reply.headers["retry-after"]) >= 1
    error = reply.json()
    assert error["terminal"] is False
    assert error["field"] == "spec.controlPlaneEndpoint"


# --- health, metrics, openapi, logs ------------------------------------------------------


def test_healthz_and_openapi(server: ServeProcess) -> None:
    reply = server.request("GET", "/healthz")
    assert reply.status == 200 and reply.json() == {"status": "ok"}
    doc = server.request("GET", "/openapi.json").json()
    assert doc["openapi"].startswith("3.")
    post = doc["paths"]["/v1/machines/{namespace}/{name}/userdata"]["post"]
    assert {"200", "400", "401", "404", "413", "422", "503"} <= set(post["responses"])


def _metric(text: str, route: str, status: int) -> float:
    key = f'nodesmith_http_requests_total{{route="{route}",status="{status}"}} '
    for line in text.splitlines():
        if line.startswith(key):
            return float(line[len(key) :])
    return 0.0


def test_metrics_count_requests_by_route_and_status(server: ServeProcess) -> None:
    before = server.request("GET", "/metrics").body.decode()
    for _ in range(3):
        server.post(WORKER_YAML, token="wrong")
    server.post(b"{", content_type="application/json")
    reply = server.request("GET", "/metrics")
    assert reply.status == 200
    assert reply.headers["content-type"].startswith("text/plain")
    after = reply.body.decode()
    assert _metric(after, "userdata", 401) - _metric(before, "userdata", 401) == 3
    assert _metric(after, "userdata", 400) - _metric(before, "userdata", 400) == 1
    assert "nodesmith_http_request_duration_seconds_bucket" in after
    assert 'le="+Inf",route="userdata"' in after


def test_log_one_json_line_per_request_and_no_secrets(server: ServeProcess) -> None:
    marker = "/v1/machines/default/log-probe-7/userdata"
    before = len(server.log_lines())
    reply = server.post(WORKER_YAML)
    token_secret = reply.json()["bootstrapTokenSecret"]
    server.post(WORKER_YAML, path=marker)
    server.post(WORKER_YAML, token=server.token + "-wrong")
    # A line is written just after its response is sent: poll for the last one.
    deadline = time.monotonic() + 5
    while True:
        lines = server.log_lines()[before:]
        requests = [x for x in lines if x.get("event") == "request" and x["method"] == "POST"]
        if len(requests) >= 3 or time.monotonic() > deadline:
            break
        time.sleep(0.02)
    assert len(requests) == 3, lines
    assert requests[0]["status"] == 200 and requests[0]["route"] == "userdata"
    assert requests[1]["status"] == 404 and requests[1]["name"] == "log-probe-7"
    assert requests[2]["status"] == 401
    text = server.log_text()
    secret_bits = [
        server.token,
        base64.b64decode(token_secret["data"]["token-secret"]).decode(),
        token_secret["data"]["token-secret"],
        next(o for o in worker_objects() if o["kind"] == "Secret")["data"]["tls.crt"][:40],
        _ca_pem().decode().splitlines()[1],
        "#cloud-config",
        "joining demo",  # a user command from the bundle
    ]
    for bit in secret_bits:
        assert bit not in text, f"log leaks {bit[:12]}..."


def test_no_500_so_far(server: ServeProcess) -> None:
    text = server.request("GET", "/metrics").body.decode()
    assert 'status="500"' not in text
    assert not [line for line in server.log_lines() if line.get("status") == 500]


# --- several workers, SIGHUP, TLS, startup errors ----------------------------------------


def _wait_for(srv: ServeProcess, event: str, count: int, since: int, timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        seen = [line for line in srv.log_lines()[since:] if line.get("event") == event]
        if len(seen) >= count:
            return
        time.sleep(0.05)
    raise AssertionError(f"{event} x{count} not logged: {srv.log_text()[-2000:]}")


def test_sighup_reloads_token_in_every_worker(tmp_path: Path) -> None:
    srv = ServeProcess(tmp_path, workers=2).start()
    try:
        assert len(srv.worker_pids()) == 2
        old, new = srv.token, "rotated-" + srv.token[::-1]
        assert srv.post(WORKER_YAML).status == 200
        srv.token_file.write_text(f"# rotated\n{new}\n")
        since = len(srv.log_lines())
        srv.signal(signal.SIGHUP)
        _wait_for(srv, "token-reload", 3, since)  # the master and both workers
        # Fresh connections land on both workers; every one must know only the new token.
        pids = set()
        for _ in range(24):
            assert srv.post(WORKER_YAML, token=old).status == 401
            assert srv.post(WORKER_YAML, token=new).status == 200
        for line in srv.log_lines()[since:]:
            if line.get("event") == "request":
                pids.add(line["pid"])
        assert pids == set(srv.worker_pids()), "both workers should have served"
        # An unusable file on reload keeps the tokens already loaded.
        srv.token_file.write_text("\n# nothing here\n")
        since = len(srv.log_lines())
        srv.signal(signal.SIGHUP)
        _wait_for(srv, "token-reload", 3, since)
        reloads = [x for x in srv.log_lines()[since:] if x.get("event") == "token-reload"]
        assert sorted(str(r["worker"]) for r in reloads) == ["0", "1", "master"]
        assert all(r["ok"] is False for r in reloads)
        assert srv.post(WORKER_YAML, token=new).status == 200
        assert new not in srv.log_text() and old not in srv.log_text()
    finally:
        assert srv.stop() == 0


def test_a_worker_restarted_while_the_token_file_is_empty_keeps_the_last_good_tokens(
    tmp_path: Path,
) -> None:
    srv = ServeProcess(tmp_path, workers=2).start()
    try:
        srv.token_file.write_text("")
        since = len(srv.log_lines())
        srv.signal(signal.SIGHUP)
        _wait_for(srv, "token-reload", 3, since)
        victim = srv.worker_pids()[0]
        os.kill(victim, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            pids = srv.worker_pids()
            if len(pids) == 2 and victim not in pids:
                break
            time.sleep(0.1)
        time.sleep(2)  # a crash-looping replacement would have died (and been replaced) by now
        assert len(srv.worker_pids()) == 2 and victim not in srv.worker_pids()
        served = set()
        for _ in range(12):
            reply = srv.post(WORKER_YAML)  # the token the file held before it was emptied
            assert reply.status == 200, reply.body
        for line in srv.log_lines()[since:]:
            if line.get("event") == "request":
                served.add(line["pid"])
        assert served == set(srv.worker_pids()), "both workers, the new one too, should serve"
        exits = [x for x in srv.log_lines()[since:] if x.get("event") == "worker-exited"]
        assert len(exits) == 1, exits  # only the one killed
    finally:
        assert srv.stop() == 0


def test_workers_die_with_their_master(tmp_path: Path) -> None:
    srv = ServeProcess(tmp_path, workers=2).start()
    workers = srv.worker_pids()
    assert srv.proc is not None
    srv.proc.kill()  # SIGKILL: the master cannot tell anyone
    srv.proc.wait()
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and any(is_alive(pid) for pid in workers):
        time.sleep(0.05)
    orphans = [pid for pid in workers if is_alive(pid)]
    for pid in orphans:  # do not leave them serving after a failure
        os.kill(pid, signal.SIGKILL)
    assert orphans == [], "workers outlived their master"


def test_token_file_checks_at_start_and_on_reload(tmp_path: Path) -> None:
    short = tmp_path / "short"
    short.write_text("# one token\nabc\n")
    short.chmod(0o600)
    refused = _serve_cli("--token-file", str(short))
    assert refused.returncode == 2
    assert refused.stderr.strip().endswith(
        f"{short}: line 2: a token needs at least 16 characters (got 3)"
    )
    srv = ServeProcess(tmp_path / "srv", workers=2).start()
    try:
        assert not [x for x in srv.log_lines() if x.get("event") == "token-file-readable"]
        srv.token_file.chmod(0o644)
        since = len(srv.log_lines())
        srv.signal(signal.SIGHUP)
        _wait_for(srv, "token-file-readable", 3, since)  # master and both workers say it
        srv.token_file.write_text("x\n")  # too short: the reload keeps the tokens it had
        since = len(srv.log_lines())
        srv.signal(signal.SIGHUP)
        _wait_for(srv, "token-reload", 3, since)
        reloads = [x for x in srv.log_lines()[since:] if x.get("event") == "token-reload"]
        assert all("a token needs at least 16 characters (got 1)" in r["detail"] for r in reloads)
        assert srv.post(WORKER_YAML).status == 200
    finally:
        assert srv.stop() == 0


def test_metrics_sum_over_workers(tmp_path: Path) -> None:
    srv = ServeProcess(tmp_path, workers=2).start()
    try:
        for _ in range(20):
            srv.post(b"{", content_type="application/json")
        served = {x["pid"] for x in srv.log_lines() if x.get("status") == 400}
        assert len(served) == 2
        for _ in range(4):  # whichever worker answers the scrape reports the total
            assert _metric(srv.request("GET", "/metrics").body.decode(), "userdata", 400) == 20
    finally:
        srv.stop()


def test_worker_is_restarted_after_a_crash(tmp_path: Path) -> None:
    srv = ServeProcess(tmp_path, workers=2).start()
    try:
        victim = srv.worker_pids()[0]
        os.kill(victim, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            pids = srv.worker_pids()
            if len(pids) == 2 and victim not in pids:
                break
            time.sleep(0.1)
        assert len(srv.worker_pids()) == 2 and victim not in srv.worker_pids()
        srv.wait_ready()
        assert srv.post(WORKER_YAML).status == 200
    finally:
        assert srv.stop() == 0


def _self_signed(tmp_path: Path, rsa_key: bool = False) -> tuple[Path, Path]:
    import datetime
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec, rsa
    from cryptography.x509.oid import NameOID

    key: rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey
    if rsa_key:
        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    else:
        key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = tmp_path / "tls.crt", tmp_path / "tls.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    key_path.chmod(0o600)
    return cert_path, key_path


def test_tls(tmp_path: Path) -> None:
    cert, key = _self_signed(tmp_path)
    srv = ServeProcess(
        tmp_path / "srv", extra=["--tls-cert", str(cert), "--tls-key", str(key)], tls_ca=str(cert)
    )
    srv.start()
    try:
        assert srv.post(WORKER_YAML).status == 200
        assert srv.post(WORKER_YAML, token="nope").status == 401
        assert any(x.get("url", "").startswith("https://") for x in srv.log_lines())
        key_body = key.read_text().splitlines()[1]
        assert key_body not in srv.log_text()
    finally:
        assert srv.stop() == 0


# (TLS version, client cipher list, accepted) against a server with an RSA certificate, where
# RSA key exchange and CBC suites could be negotiated if the server allowed them.
TLS_OFFERS = [
    ("TLSv1_2", "AES128-SHA:AES256-SHA:AES128-GCM-SHA256", False),  # RSA key exchange
    ("TLSv1_2", "ECDHE-RSA-AES128-SHA:ECDHE-RSA-AES256-SHA", False),  # CBC with SHA-1
    ("TLSv1_2", "ECDHE-RSA-AES128-SHA256", False),  # CBC
    ("TLSv1_2", "ECDHE-RSA-AES128-GCM-SHA256", True),
    ("TLSv1_2", "ECDHE-RSA-CHACHA20-POLY1305", True),
    ("TLSv1_3", "DEFAULT", True),
    ("TLSv1_1", "DEFAULT:@SECLEVEL=0", False),
]


@pytest.mark.filterwarnings("ignore:ssl.TLSVersion.TLSv1_1 is deprecated:DeprecationWarning")
def test_tls_offers_only_ecdhe_with_aead(tmp_path: Path) -> None:
    import ssl

    cert, key = _self_signed(tmp_path, rsa_key=True)
    srv = ServeProcess(
        tmp_path / "srv", extra=["--tls-cert", str(cert), "--tls-key", str(key)], tls_ca=str(cert)
    ).start()
    try:
        outcomes = []
        for version, ciphers, _ in TLS_OFFERS:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
            context.load_verify_locations(str(cert))
            context.minimum_version = context.maximum_version = ssl.TLSVersion[version]
            context.set_ciphers(ciphers + ("" if "SECLEVEL" in ciphers else ":@SECLEVEL=0"))
            try:
                with (
                    socket.create_connection(("127.0.0.1", srv.port), timeout=10) as raw,
                    context.wrap_socket(raw, server_hostname="127.0.0.1"),
                ):
                    outcomes.append(True)
            except ssl.SSLError:
                outcomes.append(False)
        assert outcomes == [accepted for _, _, accepted in TLS_OFFERS]
    finally:
        assert srv.stop() == 0


def _serve_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "bootstrap.cli", "serve", "--listen", "127.0.0.1:0", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=30,
    )


def test_startup_errors_are_usage_errors(tmp_path: Path) -> None:
    missing = _serve_cli("--token-file", str(tmp_path / "absent"))
    assert missing.returncode == 2 and "token file" in missing.stderr
    empty = tmp_path / "empty"
    empty.write_text("# no tokens\n")
    assert _serve_cli("--token-file", str(empty)).returncode == 2
    token = tmp_path / "token"
    token.write_text("a-token-long-enough-to-pass\n")
    half = _serve_cli("--token-file", str(token), "--tls-cert", str(token))
    assert half.returncode == 2 and "together" in half.stderr
    bad = _serve_cli("--token-file", str(token), "--tls-cert", str(token), "--tls-key", str(token))
    assert bad.returncode == 2 and "TLS" in bad.stderr
    listen = subprocess.run(
        [
            sys.executable,
            "-m",
            "bootstrap.cli",
            "serve",
            "--listen",
            "nonsense",
            "--token-file",
            str(token),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert listen.returncode == 2 and "HOST:PORT" in listen.stderr
    for result in (missing, half, bad, listen):
        assert "Traceback" not in result.stderr


def test_bad_http_framing_is_refused_and_logged_as_json(server: ServeProcess) -> None:
    """Garbage on the socket gets uvicorn's 400, and its log record is a JSON line too."""
    before = len(server.log_lines())
    reply = server.raw(b"NOT HTTP AT ALL\x00\r\n\r\n")
    assert reply.status == 400
    time.sleep(0.2)
    new = server.log_lines()[before:]
    assert new and all("unparsed" not in line for line in new), new
    assert server.request("GET", "/healthz").status == 200


def _alias_bomb_with_escape() -> bytes:
    """600 bytes of YAML that expand to 9**8 list elements, plus one \\u escape in a string."""
    rows = []
    for i in range(8):
        items = [f"*l{i - 1}"] * 9 if i else ["x"] * 9
        rows.append(f"  l{i}: &l{i} [{', '.join(items)}]")
    return (
        WORKER_YAML.decode()
        + "---\napiVersion: v1\nkind: Secret\nmetadata: {name: junk, namespace: default, "
        + 'annotations: {note: "\\u0041"}}\nstringData:\n'
        + "\n".join(rows)
        + "\n"
    ).encode()


def test_alias_bomb_is_refused_before_anything_walks_it(tmp_path: Path) -> None:
    """600 bytes that expand to 9**8 values are refused while parsing (the CPU budget, unit
    tested in test_serve_units, is the second line): 400 naming the expansion, within
    seconds, and the worker serves the next request."""
    srv = ServeProcess(tmp_path, extra=["--cpu-budget", "1"]).start()
    try:
        started = time.monotonic()
        reply = srv.post(_alias_bomb_with_escape())
        assert time.monotonic() - started < 10
        assert reply.status == 400, reply.body
        body = reply.json()
        assert (body["reason"], body["terminal"]) == ("ParseError", True)
        assert "expands to more than 1000000 values" in body["message"]
        assert srv.request("GET", "/healthz").status == 200
        assert srv.post(WORKER_YAML).status == 200
    finally:
        assert srv.stop() == 0


def test_render_policy_flags_apply_to_every_request(tmp_path: Path) -> None:
    """``serve --image-manifest`` refuses a Machine its image cannot run, as ``render`` does;
    ``--allow-runtime-install`` turns that into an install step instead."""
    manifest = tmp_path / "manifest.json"
    manifest.write_text(
        json.dumps(
            {
                "schemaVersion": 1,
                "name": "debian-12",
                "runtime": {"name": "containerd", "version": "1.6.20"},
                "kubernetes": {"kubelet": "v1.30.6", "kubeadm": "v1.30.6"},
            }
        )
    )
    strict = ServeProcess(tmp_path / "strict", extra=["--image-manifest", str(manifest)])
    strict.start()
    try:
        reply = strict.post(WORKER_YAML)
        assert reply.status == 422, reply.body
        err = reply.json()
        assert err["reason"] == "KubeletMismatch" and err["field"] == "spec.version", err
        assert "v1.31.4" in err["message"] and "v1.30.6" in err["message"]
    finally:
        assert strict.stop() == 0
    lenient = ServeProcess(
        tmp_path / "lenient", extra=["--image-manifest", str(manifest), "--allow-runtime-install"]
    )
    lenient.start()
    try:
        reply = lenient.post(WORKER_YAML)
        assert reply.status == 200, reply.body
        assert b"kubelet=1.31.4-*" in _check_envelope(reply.json())
    finally:
        assert lenient.stop() == 0
    broken = tmp_path / "broken.json"
    broken.write_text('{"schemaVersion": 1}')
    bad = _serve_cli("--token-file", str(strict.token_file), "--image-manifest", str(broken))
    assert bad.returncode == 65, bad.stderr  # refused at start-up, naming file and field
    assert "broken.json runtime: Field required" in bad.stderr and "Traceback" not in bad.stderr

"""Unit tests of the serve machinery that need no server: tokens, names, metrics, --listen."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest

from bootstrap.errors import UsageError
from bootstrap.serve.app import HTTPError, check_names, query_flag, route_of
from bootstrap.serve.auth import TokenStore
from bootstrap.serve.metrics import SharedMetrics
from bootstrap.serve.server import bind, parse_listen


def _store(tmp_path: Path, text: str) -> TokenStore:
    path = tmp_path / "token"
    path.write_text(text)
    store = TokenStore(path)
    store.load()
    return store


def test_tokens_one_per_line_with_comments(tmp_path: Path) -> None:
    store = _store(
        tmp_path, "# old and new during a rotation\nold-token-0123456\n\n  new-token-0123456  \n"
    )
    assert store.check(b"Bearer old-token-0123456")
    assert store.check(b"Bearer new-token-0123456")
    assert store.check(b"BEARER new-token-0123456")
    for bad in (None, b"", b"old-token-0123456", b"Bearer", b"Bearer old",
                b"Bearer old-token-01234567", b"Basic old-token-0123456",
                b"Bearer # old and new during a rotation"):  # fmt: skip
        assert not store.check(bad), bad


def test_token_file_errors(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="no token"):
        _store(tmp_path, "# nothing\n\n")
    with pytest.raises(UsageError, match="printable ASCII"):
        _store(tmp_path, "two words\n")
    with pytest.raises(UsageError, match="cannot read"):
        TokenStore(tmp_path / "missing").load()
    with pytest.raises(
        UsageError, match=r"line 2: a token needs at least 16 characters \(got 15\)$"
    ):
        _store(tmp_path, "a-token-long-enough\n0123456789abcde\n")


def test_reload_keeps_old_tokens_on_failure(tmp_path: Path) -> None:
    store = _store(tmp_path, "first-token-0123456\n")
    store.path.write_text("second-token-0123456\n")
    assert store.reload()[0] is True
    assert store.check(b"Bearer second-token-0123456")
    assert not store.check(b"Bearer first-token-0123456")
    store.path.write_text("")
    ok, what = store.reload()
    assert ok is False and "keeping" in what
    assert store.check(b"Bearer second-token-0123456")
    assert "second" not in what


@pytest.mark.parametrize("namespace", ["default", "a", "kube-system", "a" * 63, "0-9"])
def test_valid_namespaces(namespace: str) -> None:
    check_names(namespace, "worker-0")


@pytest.mark.parametrize(
    "namespace", ["", "Default", "-a", "a-", "a.b", "a_b", "a" * 64, "ä", "a b", "a\n"]
)
def test_invalid_namespaces(namespace: str) -> None:
    with pytest.raises(HTTPError, match="namespace must be") as info:
        check_names(namespace, "worker-0")
    assert (info.value.http_status, info.value.reason, info.value.field) == (
        400,
        "InvalidName",
        "path.namespace",
    )


@pytest.mark.parametrize("name", ["w", "worker-0", "a.b.c", "a" * 63 + "." + "b" * 63])
def test_valid_names(name: str) -> None:
    check_names("default", name)


@pytest.mark.parametrize("name", ["", "W", "a..b", ".a", "a.", "a_b", "-a", "a" * 254, "a\n"])
def test_invalid_names(name: str) -> None:
    with pytest.raises(HTTPError, match="name must be") as info:
        check_names("default", name)
    assert (info.value.http_status, info.value.field) == (400, "path.name")


def test_query_flag() -> None:
    assert query_flag({}, "gzip", ("true", "false"), "false") == "false"
    assert query_flag({"gzip": ["true"]}, "gzip", ("true", "false"), "false") == "true"
    for bad in (["yes"], ["true", "true"], [""]):
        with pytest.raises(HTTPError, match="gzip must be one of true, false") as info:
            query_flag({"gzip": bad}, "gzip", ("true", "false"), "false")
        assert (info.value.http_status, info.value.field) == (400, "query.gzip")


def test_route_names_are_a_fixed_set() -> None:
    assert route_of("/v1/machines/a/b/userdata") == "userdata"
    assert route_of("/healthz") == "healthz"
    assert route_of("/anything/else") == "other"


def _sample(text: str, name: str, labels: str) -> float:
    match = re.search(rf"^{re.escape(name)}\{{{re.escape(labels)}\}} (\S+)$", text, re.M)
    assert match, (name, labels, text)
    return float(match.group(1))


def test_metrics_sum_slots_and_bucket_cumulatively() -> None:
    metrics = SharedMetrics(slots=2)
    metrics.use_slot(0)
    metrics.observe("userdata", 200, 0.0004)
    metrics.observe("userdata", 200, 0.003)
    metrics.use_slot(1)
    metrics.observe("userdata", 200, 0.2)
    metrics.observe("userdata", 422, 0.001)
    metrics.observe("healthz", 299, 0.001)  # an unexpected status lands in "other"
    text = metrics.exposition().decode()
    counter = "nodesmith_http_requests_total"
    assert _sample(text, counter, 'route="userdata",status="200"') == 3
    assert _sample(text, counter, 'route="userdata",status="422"') == 1
    assert _sample(text, counter, 'route="healthz",status="other"') == 1
    hist = "nodesmith_http_request_duration_seconds"
    assert _sample(text, hist + "_bucket", 'le="0.0005",route="userdata"') == 1
    assert _sample(text, hist + "_bucket", 'le="0.005",route="userdata"') == 3
    assert _sample(text, hist + "_bucket", 'le="+Inf",route="userdata"') == 4
    assert _sample(text, hist + "_count", 'route="userdata"') == 4
    assert _sample(text, hist + "_sum", 'route="userdata"') == pytest.approx(0.2044)
    assert metrics.count("userdata", 200) == 3
    with pytest.raises(ValueError):
        metrics.use_slot(2)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("127.0.0.1:8080", ("127.0.0.1", 8080)),
        ("[::1]:0", ("::1", 0)),
        ("localhost:1", ("localhost", 1)),
    ],
)
def test_parse_listen(value: str, expected: tuple[str, int]) -> None:
    assert parse_listen(value) == expected


@pytest.mark.parametrize(
    "value", ["8080", ":8080", "host:", "host:http", "h:70000", "h:\u00b2", "h:" + "9" * 5000]
)
def test_parse_listen_rejects(value: str) -> None:
    with pytest.raises(UsageError, match="--listen"):
        parse_listen(value)


def test_bind_gives_each_worker_a_socket_on_one_port() -> None:
    sockets = bind("127.0.0.1", 0, 3)
    try:
        ports = {s.getsockname()[1] for s in sockets}
        assert len(sockets) == 3 and len(ports) == 1 and 0 not in ports
    finally:
        for s in sockets:
            s.close()


def test_cpu_budget_interrupts_runaway_python_and_only_inside() -> None:
    from bootstrap.serve.budget import BudgetExceeded, cpu_budget, install

    assert install()
    started = time.process_time()
    with pytest.raises(BudgetExceeded), cpu_budget(0.2):
        while True:
            pass
    assert 0.15 < time.process_time() - started < 2
    with cpu_budget(0.2):  # a block that finishes in time is untouched
        sum(range(1000))
    deadline = time.process_time() + 0.4
    while time.process_time() < deadline:  # the timer was disarmed: nothing fires later
        pass


def test_read_limited_refuses_declared_lengths_without_reading() -> None:
    import asyncio

    from bootstrap.serve.app import HTTPError, read_limited

    reads = []

    async def receive() -> dict[str, object]:
        reads.append(1)
        return {"type": "http.request", "body": b"abc", "more_body": False}

    for declared, close in ((b"9" * 5000, True), (b"101", False), (b"1601", True)):
        with pytest.raises(HTTPError) as info:
            asyncio.run(read_limited(receive, declared, 100))
        assert info.value.http_status == 413
        assert ("connection" in info.value.headers) is close
    with pytest.raises(HTTPError, match="not a number"):
        asyncio.run(read_limited(receive, b"-1", 100))
    assert reads == []
    assert asyncio.run(read_limited(receive, b"3", 100)) == b"abc"

"""The server's parsed-document cache: same answers as parsing, and nothing downstream may
change what it hands out (the objects are shared between requests)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from test_yamlio import TRICKY, corpus, same

from bootstrap.render import RenderOptions, yamlio
from bootstrap.render.batch import render_all
from bootstrap.render.doccache import DocumentCache
from bootstrap.render.loader import parse_text
from bootstrap.render.resolve import Bundle

ROOT = Path(__file__).resolve().parents[2]


def outcome(load: Any, text: str) -> tuple[str, Any]:
    try:
        return "ok", load(text)
    except (yaml.YAMLError, ValueError, RecursionError) as exc:
        return "error", (type(exc).__name__, str(exc))


def assert_like_uncached(cache: DocumentCache, text: str) -> None:
    want = outcome(yamlio.load_all_counted, text)
    for _ in range(2):  # the second time from the cache
        got = outcome(cache.load_all_counted, text)
        assert want[0] == got[0], (text, want, got)
        if want[0] == "ok":
            assert same(want[1][0], got[1][0]) and want[1][1] == got[1][1], (text, want, got)
        else:
            assert want[1] == got[1], text  # the same error, at the same line and column


MULTI = [
    "a: 1\n---\nb: 2\n",
    "---\na: 1\n--- \nb: [1, 2]\n---\n",
    "%YAML 1.1\n---\na: 1\n---\nb: 2\n",  # the directive belongs to the next document
    "a: |\n  text\n---\nb: 2\n",
    "a: |\n  text\n--- x\n",
    "a: &x 1\n---\nb: *x\n",  # anchors do not cross documents: an error either way
    "a: 1\n...\nb: 2\n",
    "a: 1\n---\nb: [\n---\nc: 3\n",  # an error in the middle: line numbers of the whole text
    'a: "multi\n---\nline"\n',
    "---a: 1\n----\n--- # comment\nx: y\n",
    "a: 1\r\n---\r\nb: 2\r\n",
]


@pytest.mark.parametrize("text", [*MULTI, *TRICKY])
def test_pieces_parse_like_the_whole(text: str) -> None:
    assert_like_uncached(DocumentCache(), text)


@pytest.mark.parametrize("path", corpus(), ids=lambda p: p.name)
def test_repo_bundles_parse_like_the_whole(path: Path) -> None:
    assert_like_uncached(DocumentCache(), path.read_text(encoding="utf-8"))


pieces = st.lists(
    st.one_of(
        st.dictionaries(st.text(max_size=6), st.one_of(st.text(max_size=10), st.integers()),
                        max_size=3).map(lambda d: yaml.safe_dump(d)),
        st.text(alphabet=st.sampled_from(list("ab:-[]{}&*'\"#|\n .")), max_size=20),
    ),
    max_size=5,
)  # fmt: skip


@settings(max_examples=300, deadline=None)
@given(parts=pieces, separator=st.sampled_from(["---\n", "--- \n", "\n---\n", "...\n---\n"]))
def test_generated_streams_parse_like_the_whole(parts: list[str], separator: str) -> None:
    assert_like_uncached(DocumentCache(), separator.join(parts))


def test_shared_documents_are_parsed_once_and_bounded() -> None:
    cache = DocumentCache(max_chars=100, max_entry=40)
    cluster = "kind: Cluster\nmetadata: {name: c}\n"
    cache.load_all_counted(f"{cluster}---\nkind: Machine\nmetadata: {{name: m1}}\n")
    cache.load_all_counted(f"{cluster}---\nkind: Machine\nmetadata: {{name: m2}}\n")
    assert cache.hits == 1 and cache.misses == 3  # the Cluster document once
    cache.load_all_counted("x: " + "y" * 50 + "\n")  # over max_entry: parsed, not kept
    assert cache.load_all_counted("x: " + "y" * 50 + "\n")[1] == 3 and cache.hits == 1
    for i in range(10):
        cache.load_all_counted(f"k: {i}\n")
    assert cache._chars <= 100
    few = DocumentCache(max_entries=3)
    for i in range(10):
        few.load_all_counted(f"k: {i}\n")
    assert len(few._entries) == 3 and few.load_all_counted("k: 9\n")[0] == [{"k": 9}]
    assert few.hits == 1


def bundles() -> list[Path]:
    found = sorted((ROOT / "tests/data/render").glob("*/bundle.yaml"))
    assert len(found) == 9  # 3 CAPI generations x 3 kubeadm APIs
    return found


@pytest.mark.parametrize("path", bundles(), ids=lambda p: p.parent.name)
def test_rendering_never_modifies_the_shared_objects(path: Path) -> None:
    """Every Machine of every golden bundle, rendered from cached objects, twice."""
    cache = DocumentCache()
    text = (
        path.read_text(encoding="utf-8")
        + "---\n"
        + (ROOT / "tests/data/render/ca-secrets.yaml").read_text(encoding="utf-8")
    )
    objects = parse_text(text, "bundle", cache)
    pristine = copy.deepcopy(objects)
    machines = Bundle(objects).machines
    assert len(machines) == 3
    for _ in range(2):
        again = parse_text(text, "bundle", cache)
        assert all(a is b for a, b in zip(again, objects, strict=True))  # really shared
        names = [f"{namespace}/{name}" for namespace, name in machines]
        batch = render_all(Bundle(again), names, RenderOptions())  # init, then its joins
        assert not batch.failures and all(r.userdata for r in batch.results)
        assert again == pristine

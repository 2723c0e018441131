"""Bootstrap tokens have kubeadm's format and their Secret has the shape the API server reads."""

from __future__ import annotations

import base64
from datetime import UTC, datetime, timedelta, timezone

import pytest
from render_helpers import FIXED_NOW, base_docs, find

from bootstrap.render import RenderOptions, render_one, tokens

NOW = datetime(2026, 12, 2, 18, 30, 15, 123456, tzinfo=UTC)


def _data(secret: dict[str, object]) -> dict[str, str]:
    data = secret["data"]
    assert isinstance(data, dict)
    return {k: base64.b64decode(v, validate=True).decode() for k, v in data.items()}


def test_generated_tokens_are_valid_and_distinct() -> None:
    generated = [tokens.generate_token() for _ in range(500)]
    assert all(tokens.TOKEN_RE.match(t) for t in generated)
    assert all(tokens.is_valid_token(t) for t in generated)
    assert len(set(generated)) == 500
    # every character of the alphabet shows up: the generator is not stuck on a subset
    assert set("".join(generated).replace(".", "")) == set("abcdefghijklmnopqrstuvwxyz0123456789")


@pytest.mark.parametrize(
    "bad",
    [
        "",
        "abcdef.0123456789abcdef\n",
        "ABCDEF.0123456789abcdef",
        "abcde.0123456789abcdef",
        "abcdef.0123456789abcde",
        "abcdef0123456789abcdef",
        "abcdef:0123456789abcdef",
        "abcdef.0123456789abcdeg0",
        " abcdef.0123456789abcdef",
        None,
        12,
    ],
)
def test_invalid_tokens(bad: object) -> None:
    assert not tokens.is_valid_token(bad)


def test_valid_token() -> None:
    assert tokens.is_valid_token("abcdef.0123456789abcdef")
    assert tokens.token_id("abcdef.0123456789abcdef") == "abcdef"


def test_token_secret_shape() -> None:
    secret = tokens.token_secret("abcdef.0123456789abcdef", timedelta(minutes=15), NOW)
    assert secret["apiVersion"] == "v1"
    assert secret["kind"] == "Secret"
    assert secret["metadata"] == {"name": "bootstrap-token-abcdef", "namespace": "kube-system"}
    assert secret["type"] == "bootstrap.kubernetes.io/token"
    assert _data(secret) == {
        "token-id": "abcdef",
        "token-secret": "0123456789abcdef",
        "expiration": "2026-12-02T18:45:15Z",
        "usage-bootstrap-authentication": "true",
        "usage-bootstrap-signing": "true",
        "auth-extra-groups": "system:bootstrappers:kubeadm:default-node-token",
        "description": tokens.DEFAULT_DESCRIPTION,
    }


def test_expiration_is_utc_whatever_the_input_zone() -> None:
    local = NOW.astimezone(timezone(timedelta(hours=-5)))
    secret = tokens.token_secret("abcdef.0123456789abcdef", timedelta(hours=2), local, "d")
    data = _data(secret)
    assert data["expiration"] == "2026-12-02T20:30:15Z"
    assert data["description"] == "d"
    parsed = datetime.strptime(data["expiration"], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
    assert parsed == (NOW + timedelta(hours=2)).replace(microsecond=0)


def test_naive_now_is_taken_as_utc() -> None:
    naive = NOW.replace(tzinfo=None)
    data = _data(tokens.token_secret("abcdef.0123456789abcdef", timedelta(minutes=1), naive))
    assert data["expiration"] == "2026-12-02T18:31:15Z"


def test_default_ttl_is_cabpks() -> None:
    assert timedelta(minutes=15) == tokens.DEFAULT_TTL


def test_malformed_token_is_refused_without_echoing_it() -> None:
    bad = "ABCDEF.SECRETSECRETSECRE"
    with pytest.raises(ValueError) as info:
        tokens.token_secret(bad, timedelta(minutes=15), NOW)
    assert "SECRET" not in str(info.value)


@pytest.mark.parametrize("ttl", [timedelta(0), timedelta(seconds=-1)])
def test_non_positive_ttl_is_refused(ttl: timedelta) -> None:
    with pytest.raises(ValueError, match="TTL"):
        tokens.token_secret("abcdef.0123456789abcdef", ttl, NOW)


def test_generated_token_makes_a_secret() -> None:
    token = tokens.generate_token()
    data = _data(tokens.token_secret(token, tokens.DEFAULT_TTL, NOW))
    assert f"{data['token-id']}.{data['token-secret']}" == token


def test_fixed_clock_is_honoured() -> None:
    """``RenderOptions.now`` is the clock the token Secret's expiration counts from."""
    docs = base_docs()
    del find(docs, "KubeadmConfig", "md-0")["spec"]["joinConfiguration"]["discovery"]
    result = render_one(docs, "prod/md-0", RenderOptions(now=FIXED_NOW))
    assert result.bootstrap_token_secret is not None
    exp = base64.b64decode(result.bootstrap_token_secret["data"]["expiration"]).decode()
    assert exp == "2026-12-02T12:15:00Z"

"""Node -> management: phase reports over HTTP, recorded on the KubeadmConfig; bad ones refused."""

from __future__ import annotations

import base64
import json
import ssl
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import yaml
from controller_harness import ControllerProcess, Testbed, wait_for

from bootstrap.hostutil import free_port
from bootstrap.kubernetes.apiserver import loopback_certificates

SCRIPT_CONFIG = "/run/kubeadm/nodesmith-bootstrap.json"


def _post(url: str, credential: str | None, body: Any, ca: str | None = None) -> int:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    headers = {"Content-Type": "application/json"}
    if credential is not None:
        headers["Authorization"] = f"Bearer {credential}"
    request = urllib.request.Request(url, data=data, method="POST", headers=headers)
    tls = ssl.create_default_context(cadata=ca) if ca else None
    try:
        with urllib.request.urlopen(request, timeout=10, context=tls) as response:
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)


def _script_config(testbed: Testbed, ns: str, name: str) -> dict[str, Any]:
    files = yaml.safe_load(testbed.userdata(ns, name))["write_files"]
    return dict(json.loads(next(f for f in files if f["path"] == SCRIPT_CONFIG)["content"]))


def _reporting(
    testbed: Testbed, ns: str, *extra: str, scheme: str = "http"
) -> tuple[ControllerProcess, str]:
    port = free_port()
    base = f"{scheme}://127.0.0.1:{port}"
    process = testbed.controller(
        f"--report-bind=127.0.0.1:{port}", f"--report-url={base}", *extra, name=f"{ns}-c"
    )
    return process, base


RUNNING = {"phase": "Running", "reason": "RunningJoin", "terminal": False, "attempts": 1}


def test_reports_are_recorded_and_bad_ones_change_nothing(testbed: Testbed, ns: str) -> None:
    testbed.cluster(ns, "rep", initialized=True)
    testbed.node(ns, "rep-w0", "rep")
    testbed.node(ns, "rep-w1", "rep")
    controller, base = _reporting(testbed, ns)
    try:
        for name in ("rep-w0", "rep-w1"):
            wait_for(f"{name}'s data", lambda n=name: testbed.status(ns, n).get("ready"))
        cfg0, cfg1 = (_script_config(testbed, ns, n) for n in ("rep-w0", "rep-w1"))
        url0, cred0 = cfg0["reportUrl"], cfg0["reportCredential"]
        assert url0 == f"{base}/v1/reports/{ns}/rep-w0"
        assert cred0 in cfg0["redact"]  # the node keeps it out of its logs
        assert cred0 != cfg1["reportCredential"]
        token = next(s for s in cfg0["redact"] if s != cred0)
        assert token not in cred0  # never the bootstrap token

        before = testbed.status(ns, "rep-w0")
        refused = [
            ("no credential", url0, None, RUNNING, 401),
            ("a forged signature", url0, cred0[:-4] + "AAAA", RUNNING, 401),
            ("not a credential", url0, "hunter2", RUNNING, 401),
            ("another Machine's credential", url0, cfg1["reportCredential"], RUNNING, 403),
            ("not JSON", url0, cred0, b"{phase", 400),
            ("an unknown phase", url0, cred0, {**RUNNING, "phase": "Exploded"}, 422),
            ("a reason with spaces", url0, cred0, {**RUNNING, "reason": "rm -rf"}, 422),
            ("attempts as text", url0, cred0, {**RUNNING, "attempts": "1"}, 422),
            (
                "terminal missing",
                url0,
                cred0,
                {k: v for k, v in RUNNING.items() if k != "terminal"},
                422,
            ),
            ("an extra field", url0, cred0, {**RUNNING, "node": "x"}, 422),
            ("a body over 4 KiB", url0, cred0, b" " * 5000, 413),
            ("no such path", f"{base}/v1/reports/{ns}", cred0, RUNNING, 404),
        ]
        got = [(what, _post(url, cred, body)) for what, url, cred, body, _ in refused]
        assert got == [(row[0], row[4]) for row in refused]
        assert testbed.status(ns, "rep-w0") == before  # nothing changed

        assert _post(url0, cred0, RUNNING) == 202
        cond = testbed.condition(ns, "rep-w0", "BootstrapSucceeded")
        assert cond is not None
        assert (cond["status"], cond["reason"], cond["severity"]) == (
            "False",
            "RunningJoin",
            "Info",
        )
        assert "failureReason" not in testbed.status(ns, "rep-w0")

        failed = {"phase": "Failed", "reason": "PreflightFailed", "terminal": True, "attempts": 1}
        assert _post(url0, cred0, failed) == 202
        st = testbed.status(ns, "rep-w0")
        assert st["failureReason"] == "PreflightFailed"
        assert "terminal" in st["failureMessage"]
        cond = testbed.condition(ns, "rep-w0", "BootstrapSucceeded")
        assert cond is not None and (cond["status"], cond["severity"]) == ("False", "Error")

        done = {"phase": "Succeeded", "reason": "Bootstrapped", "terminal": False, "attempts": 2}
        assert _post(cfg1["reportUrl"], cfg1["reportCredential"], done) == 202
        cond = testbed.condition(ns, "rep-w1", "BootstrapSucceeded")
        assert cond is not None and (cond["status"], cond["reason"]) == ("True", "Bootstrapped")
        # the outcome is final: a credential read off the joined node cannot mark it failed
        after = testbed.status(ns, "rep-w1")
        assert _post(cfg1["reportUrl"], cfg1["reportCredential"], failed) == 409
        assert _post(url0, cred0, done) == 409  # nor undo a recorded terminal failure
        assert testbed.status(ns, "rep-w1") == after
        log = controller.log.read_text()
        assert cred0 not in log and token not in log
        assert controller.alive()
    finally:
        assert controller.stop() == 0


def test_an_expired_credential_is_refused(testbed: Testbed, ns: str) -> None:
    testbed.cluster(ns, "exp", initialized=True)
    testbed.node(ns, "exp-w0", "exp")
    controller, _ = _reporting(testbed, ns, "--report-credential-ttl=1s")
    try:
        wait_for("the data", lambda: testbed.status(ns, "exp-w0").get("ready"))
        cfg = _script_config(testbed, ns, "exp-w0")
        # wait out the credential's own expiry (its signed "exp" claim), not a guessed time
        body = cfg["reportCredential"].split(".")[1]
        expires = json.loads(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))["exp"]
        time.sleep(max(0.0, expires + 1 - time.time()))
        before = testbed.status(ns, "exp-w0")
        assert _post(cfg["reportUrl"], cfg["reportCredential"], RUNNING) == 401
        assert testbed.status(ns, "exp-w0") == before
    finally:
        assert controller.stop() == 0


def test_over_tls_the_node_trusts_the_ca_it_was_given(
    testbed: Testbed, ns: str, tmp_path: Path
) -> None:
    loopback_certificates(tmp_path)  # ca.crt signed apiserver.crt (127.0.0.1)
    testbed.cluster(ns, "tls", initialized=True)
    testbed.node(ns, "tls-w0", "tls")
    controller, base = _reporting(
        testbed,
        ns,
        f"--report-tls-cert={tmp_path / 'apiserver.crt'}",
        f"--report-tls-key={tmp_path / 'apiserver.key'}",
        f"--report-ca={tmp_path / 'ca.crt'}",
        scheme="https",
    )
    try:
        wait_for("the data", lambda: testbed.status(ns, "tls-w0").get("ready"))
        cfg = _script_config(testbed, ns, "tls-w0")
        assert cfg["reportCA"] == (tmp_path / "ca.crt").read_text()
        assert cfg["reportUrl"].startswith(f"{base}/")
        assert _post(cfg["reportUrl"], cfg["reportCredential"], RUNNING, cfg["reportCA"]) == 202
        cond = testbed.condition(ns, "tls-w0", "BootstrapSucceeded")
        assert cond is not None and cond["reason"] == "RunningJoin"
        with pytest.raises(urllib.error.URLError, match="CERTIFICATE_VERIFY_FAILED"):
            _post(cfg["reportUrl"], cfg["reportCredential"], RUNNING)  # the system store alone
    finally:
        assert controller.stop() == 0

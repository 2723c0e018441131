"""cloud-init finished, and no module failed (resizefs and locale failed on the first images)."""

from __future__ import annotations

import json
import re
from typing import Any

# "Running module resizefs (<module 'cloudinit.config.cc_resizefs' ...>) failed"
_FAILED_MODULE = re.compile(r"Running module (\S+) \(.*\) failed")


# cloud-init's module that runs runcmd, and so the bootstrap script. When the bootstrap
# reports Failed the script exits 1 (as CABPK's runcmd does): that failure is judged by
# test_bootstrap_status, and is the only one forgiven here.
BOOTSTRAP_MODULE = "scripts-user"


def _errors(status: dict[str, Any], bootstrap_failed: bool) -> dict[str, list[str]]:
    errors = {
        stage: [e for e in v["errors"] if not (bootstrap_failed and BOOTSTRAP_MODULE in str(e))]
        for stage, v in status.items()
        if isinstance(v, dict) and v.get("errors")
    }
    return {stage: errs for stage, errs in errors.items() if errs}


def test_cloud_init_status_done(
    host: Any, cloud_init_finished: str, bootstrap_failed: bool
) -> None:
    status = json.loads(host.file("/run/cloud-init/status.json").content_string)["v1"]
    assert status["stage"] is None, f"cloud-init still in stage {status['stage']}"
    finished = "status: done" in cloud_init_finished
    if bootstrap_failed and not finished:
        finished = "status: error" in cloud_init_finished and not _errors(status, True)
    assert finished, cloud_init_finished.strip()


def test_cloud_init_no_module_failures(host: Any, bootstrap_failed: bool) -> None:
    status = json.loads(host.file("/run/cloud-init/status.json").content_string)["v1"]
    errors = _errors(status, bootstrap_failed)
    log = host.file("/var/log/cloud-init.log").content_string
    failed = sorted(
        set(_FAILED_MODULE.findall(log)) - ({BOOTSTRAP_MODULE} if bootstrap_failed else set())
    )
    assert not failed, f"cloud-init modules failed: {', '.join(failed)}"
    assert not errors, f"cloud-init reported errors: {errors}"

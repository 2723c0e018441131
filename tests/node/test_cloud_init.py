"""cloud-init finished on a datasource the image names, and no module failed (resizefs and
locale failed on the first images)."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
import yaml

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


# "DataSourceNoCloud [seed=/dev/sr0][dsmode=net]", "DataSourceEc2Local", "DataSourceNoCloudNet
# [seed=...]": cloud-init's class, whose Local/Net variants are the same datasource name.
_DATASOURCE = re.compile(r"DataSource(\w+?)(?:Local|Net)?\b")


def test_cloud_init_booted_on_a_datasource_the_image_names(host: Any) -> None:
    """The datasource cloud-init used is the first ds-identify chose at boot, and one the
    image's datasource_list names (an image built for one target names only its own)."""
    files = ("/run/cloud-init/cloud.cfg", "/etc/cloud/cloud.cfg.d/90_dpkg.cfg")
    missing = [f for f in files if not host.file(f).exists]
    if missing:
        pytest.skip(f"not a nodesmith image with ds-identify's choice: no {', '.join(missing)}")
    status = json.loads(host.file("/run/cloud-init/status.json").content_string)["v1"]
    found = _DATASOURCE.match(str(status["datasource"]))
    assert found, f"cloud-init booted on no datasource: {status['datasource']!r}"
    used = found.group(1).lower()
    chosen = yaml.safe_load(host.file(files[0]).content_string)["datasource_list"]
    image = yaml.safe_load(host.file(files[1]).content_string)["datasource_list"]
    assert str(chosen[0]).lower() == used, (chosen, status["datasource"])
    assert used in [str(n).lower() for n in image], (status["datasource"], image)

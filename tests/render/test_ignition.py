"""``format: ignition``: an Ignition v3 config checked by the real validator (Debian's
``ignition-validate``, Ignition 2.14) and applied by the real Ignition's ``files`` stage into a
scratch root, where the files, users and units must be what the cloud-config gives.

Ignition's files stage relabels for SELinux with ``setfiles``; this host has no SELinux policy,
so a ``setfiles`` STAND-IN (test-only, never shipped) swallows that one call.
"""

from __future__ import annotations

import gzip
import json
import os
import shlex
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from render_helpers import CA_SECRETS, DATA, FIXED_NOW, file_bytes, files_by_path

from bootstrap.cli.main import main as cli
from bootstrap.errors import TerminalError
from bootstrap.render import RenderOptions, RenderResult
from bootstrap.render.batch import render_all
from bootstrap.render.bootstrap_script import SCRIPT_CONFIG_PATH, SCRIPT_PATH
from bootstrap.render.loader import load_paths
from bootstrap.render.outputs import bootstrap_secret
from bootstrap.render.resolve import Bundle
from bootstrap.resources import data_dir

BUNDLE = DATA / "v1beta1-v1beta4" / "bundle.yaml"
VALIDATE = shutil.which("ignition-validate") or "/usr/bin/ignition-validate"
IGNITION = "/usr/lib/dracut/modules.d/30ignition/ignition"  # Debian's package puts it there
MACHINES = ["prod/cp-0", "prod/cp-1", "prod/md-0"]


def objects(as_ignition: bool = True, **spec: Any) -> list[dict[str, Any]]:
    docs = load_paths([str(BUNDLE), str(CA_SECRETS)])
    for doc in docs:
        if doc["kind"] == "KubeadmConfig":
            doc["spec"].pop("diskSetup", None)  # its partition: auto is refused for Ignition
            doc["spec"].pop("mounts", None)  # (both tested on their own below)
            if as_ignition:
                doc["spec"]["format"] = "ignition"
            doc["spec"].update(spec)
    return docs


def run(ignition: bool = True, gzip_: bool = False) -> dict[str, RenderResult]:
    batch = render_all(
        Bundle(objects(ignition)), MACHINES, RenderOptions(now=FIXED_NOW, gzip=gzip_)
    )
    assert not batch.failures, batch.failures
    return {r.machine: r for r in batch.results}


def validate(config: bytes, tmp_path: Path) -> tuple[int, str]:
    if not Path(VALIDATE).exists():
        raise AssertionError("ignition-validate is missing (scripts/setup installs ignition)")
    path = tmp_path / "config.ign"
    path.write_bytes(config)
    proc = subprocess.run([VALIDATE, str(path)], capture_output=True, text=True, timeout=60)
    return proc.returncode, proc.stdout + proc.stderr


@pytest.mark.parametrize("machine", MACHINES)
def test_every_role_passes_the_real_validator(machine: str, tmp_path: Path) -> None:
    result = run()[machine]
    assert result.format == "ignition"
    assert validate(result.userdata, tmp_path) == (0, "")
    config = json.loads(result.userdata)
    assert config["ignition"] == {"version": "3.3.0"}


def test_the_validator_can_fail(tmp_path: Path) -> None:
    config = json.loads(run()["prod/md-0"].userdata)
    config["storage"]["files"][0]["contents"]["source"] = "data:,not encoded"
    code, out = validate(json.dumps(config).encode(), tmp_path)
    assert code != 0 and "invalid data character" in out


# ---------------------------------------------------------------- applied by real Ignition

RUNNER = """set -e
T="$1"
mount --make-rprivate /
mount -t tmpfs tmpfs /run
IGNITION_CONFIG_FILE=$T/config.ign {ignition} -platform file -stage fetch -log-to-stdout \\
    -config-cache $T/cache.json -state-file $T/state > $T/fetch.log 2>&1
PATH=$T/standin:$PATH {ignition} -platform file -stage files -root $T/root -log-to-stdout \\
    -config-cache $T/cache.json -state-file $T/state > $T/files.log 2>&1
"""
BASE_ROOT = {
    "etc/passwd": "root:x:0:0:root:/root:/bin/bash\n",
    "etc/group": "root:x:0:\nadm:x:4:\nsudo:x:27:\nusers:x:100:\n",
    "etc/shadow": "root:*:19000:0:99999:7:::\n",
    "etc/gshadow": "root:*::\nadm:*::\nsudo:*::\nusers:*::\n",
    "etc/selinux/config": "SELINUX=disabled\nSELINUXTYPE=targeted\n",
}


@pytest.fixture
def scratch() -> Iterator[Path]:
    """A world-traversable work dir: Ignition writes a user's SSH keys as that user, who
    cannot pass pytest's 0700 tmp_path."""
    path = Path(tempfile.mkdtemp(prefix="nodesmith-ignition-"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def apply(config: bytes, tmp_path: Path) -> Path:
    """The real Ignition's fetch and files stages, in a private mount namespace."""
    if os.geteuid() != 0 or not shutil.which("unshare") or not Path(IGNITION).exists():
        pytest.skip("needs root, unshare(1) and Debian's ignition package")
    (tmp_path / "config.ign").write_bytes(config)
    for path, text in BASE_ROOT.items():
        (tmp_path / "root" / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "root" / path).write_text(text)
    (tmp_path / "standin").mkdir()
    setfiles = tmp_path / "standin" / "setfiles"
    setfiles.write_text("#!/bin/sh\n# setfiles STAND-IN for the Ignition test; never shipped\n"
                        "cat > /dev/null\n")  # fmt: skip
    setfiles.chmod(0o755)
    (tmp_path / "runner.sh").write_text(RUNNER.format(ignition=IGNITION))
    proc = subprocess.run(["unshare", "-m", "sh", str(tmp_path / "runner.sh"), str(tmp_path)],
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    log = (tmp_path / "files.log").read_text() if (tmp_path / "files.log").exists() else ""
    assert proc.returncode == 0, proc.stderr + log[-2000:]
    assert "Ignition finished successfully" in log
    return tmp_path / "root"


RELOCATED = {  # CABPK's Ignition path, where the providers' pre-commands edit it
    "/run/kubeadm/kubeadm.yaml": "/etc/kubeadm.yml",
    "/run/kubeadm/kubeadm-join-config.yaml": "/etc/kubeadm.yml",
}


@pytest.mark.parametrize(("machine", "gzipped"), [("prod/md-0", False), ("prod/cp-0", False),
                                                  ("prod/cp-1", True)])  # fmt: skip
def test_real_ignition_writes_what_the_cloud_config_writes(
    machine: str, gzipped: bool, scratch: Path
) -> None:
    ign = run(gzip_=gzipped)[machine]
    cc = yaml.safe_load(run(ignition=False)[machine].userdata)
    root = apply(gzip.decompress(ign.value) if gzipped else ign.userdata, scratch)
    for path, entry in files_by_path(cc).items():
        if path in (SCRIPT_PATH, SCRIPT_CONFIG_PATH):
            continue  # the Python script and its JSON: Ignition nodes get the bash twin
        target = root / RELOCATED.get(path, path).lstrip("/")
        data = file_bytes(entry)
        if entry.get("append"):
            assert target.read_bytes().endswith(data), path
        else:
            assert target.read_bytes() == data, path
        mode = int(entry.get("permissions", "0644"), 8)
        assert target.stat().st_mode & 0o7777 == mode, path
    script = root / "opt/bin/nodesmith-bootstrap"
    assert script.read_bytes() == (data_dir("cloudinit") / "nodesmith-bootstrap.sh").read_bytes()
    assert script.stat().st_mode & 0o777 == 0o755
    # The bash config: the same plan as the cloud-config's JSON, kubeadm's file moved.
    env = root / "etc/nodesmith/bootstrap.env"
    assert env.stat().st_mode & 0o777 == 0o600
    plan = json.loads(files_by_path(cc)[SCRIPT_CONFIG_PATH]["content"])
    shown = subprocess.run(
        ["bash", "-c", f'. {shlex.quote(str(env))}; printf "%s\\0" "$ROLE" "${{PRE[@]}}" -- '
                       '"${COMMAND[@]}" -- "${POST[@]}"'],
        capture_output=True, text=True, check=True,
    ).stdout.split("\0")[:-1]  # fmt: skip
    command = [RELOCATED.get(part, part) for part in plan["command"]]
    assert shown == [plan["role"], *plan["pre"], "--", *command, "--", *plan["post"]]
    # Users, their keys and sudo; the units enabled.
    passwd = (root / "etc/passwd").read_text()
    assert "\nops:" in passwd and "\nsvc:" in passwd
    keys = (root / "home/ops/.ssh/authorized_keys.d/ignition").read_text()
    assert keys.strip() == cc["users"][0]["ssh_authorized_keys"][0]
    assert "svc:$6$rounds=4096$salt$hashedpasswordvalue:" in (root / "etc/shadow").read_text()
    assert (root / "etc/sudoers.d/90-nodesmith-ops").read_text() == "ops ALL=(ALL) NOPASSWD:ALL\n"
    assert (root / "etc/sudoers.d/90-nodesmith-ops").stat().st_mode & 0o777 == 0o440
    preset = (root / "etc/systemd/system-preset/20-ignition.preset").read_text().split("\n")
    assert {"enable kubeadm.service", "enable nodesmith-bootcmd.service"} <= set(preset)
    unit = (root / "etc/systemd/system/kubeadm.service").read_text()  # CABPK's unit and script
    assert "ExecStart=/etc/kubeadm.sh" in unit
    kubeadm_sh = root / "etc/kubeadm.sh"
    assert kubeadm_sh.stat().st_mode & 0o777 == 0o700
    assert kubeadm_sh.read_text().splitlines() == [
        "#!/bin/bash",
        "# nodesmith: runs, with retries and a status in /run/cluster-api:",
        "#   " + " ".join(command),  # CAPV's kube-vip script greps it for "kubeadm init"
        "exec /opt/bin/nodesmith-bootstrap /etc/nodesmith/bootstrap.env",
    ]
    assert "Environment=PATH=/opt/bin:" in unit  # where Flatcar keeps kubeadm
    assert (root / "etc/nodesmith/bootcmd.sh").read_text() == "\n".join(cc["bootcmd"]) + "\n"
    ntp = (root / "etc/systemd/timesyncd.conf.d/nodesmith.conf").read_text()
    assert ntp == "[Time]\nNTP=" + " ".join(cc["ntp"]["servers"]) + "\n"


def test_the_script_is_compressed_only_when_the_budget_needs_it() -> None:
    results = run()
    scripts = {}
    for machine, result in results.items():
        files = {f["path"]: f for f in json.loads(result.userdata)["storage"]["files"]}
        scripts[machine] = files["/opt/bin/nodesmith-bootstrap"]["contents"]
    # the worker fits 16 KiB only with the script gzipped; so do the control planes
    assert all(s.get("compression") == "gzip" for s in scripts.values())
    gz = run(gzip_=True)["prod/md-0"]  # the whole config gzipped: the script stays readable
    files = {f["path"]: f for f in json.loads(gz.userdata)["storage"]["files"]}
    assert "compression" not in files["/opt/bin/nodesmith-bootstrap"]["contents"]
    assert files["/opt/bin/nodesmith-bootstrap"]["contents"]["source"].startswith(
        "data:,%23!/bin/bash%0A%23%20nodesmith-bootstrap"
    )


def test_the_data_secret_says_ignition() -> None:
    secret = bootstrap_secret(run()["prod/md-0"])
    assert secret["data"]["format"] == "aWduaXRpb24="  # base64 of "ignition"


CLC = "spec.ignition.containerLinuxConfig.additionalConfig"


def _clc(text: str) -> dict[str, Any]:
    return {"ignition": {"containerLinuxConfig": {"additionalConfig": text}}}


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        ({"diskSetup": {"partitions": [{"device": "/dev/vdb", "layout": True,
                                        "tableType": "mbr"}]}},
         "spec.diskSetup.partitions[0].tableType"),
        ({"diskSetup": {"filesystems": [{"device": "/dev/vdb", "filesystem": "ext4",
                                         "partition": "auto"}]}},
         "spec.diskSetup.filesystems[0].partition"),
        ({"diskSetup": {"filesystems": [{"device": "/dev/vdb", "filesystem": "ext4",
                                         "replaceFS": "ntfs"}]}},
         "spec.diskSetup.filesystems[0].replaceFS"),
        ({"preKubeadmCommands": ["echo {{ ds.meta_data.local_hostname }}"]}, "spec"),
        (_clc("etcd:\n  version: 3.5.0\n"), f"{CLC}.etcd"),
        (_clc("storage:\n  raid: []\n"), f"{CLC}.storage.raid"),
        (_clc("storage:\n  files:\n  - path: /x\n    filesystem: oem\n"),
         f"{CLC}.storage.files[0].filesystem"),
        (_clc("storage:\n  files:\n  - path: /etc/kubeadm.sh\n"), f"{CLC}.storage.files[0].path"),
        (_clc("systemd:\n  units:\n  - name: kubeadm.service\n    contents: x\n"),
         f"{CLC}.systemd.units[0]"),
    ],
)  # fmt: skip
def test_what_ignition_cannot_carry_is_refused_by_name(spec: dict[str, Any], field: str) -> None:
    batch = render_all(Bundle(objects(**spec)), ["prod/cp-0"], RenderOptions(now=FIXED_NOW))
    (error,) = batch.failures
    assert isinstance(error, TerminalError), error
    assert (error.field, error.reason, error.exit_code) == (field, "FormatNotSupported", 65)


def test_out_dir_names_ignition_files_ign(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bundle = tmp_path / "bundle.yaml"
    bundle.write_text(yaml.safe_dump_all(objects()))
    out = tmp_path / "out"
    assert cli(["render", "--all", "-f", str(bundle), "--out-dir", str(out)]) == 0
    assert sorted(p.name for p in out.iterdir()) == [
        "prod_cp-0.ign", "prod_cp-1.ign", "prod_md-0.ign"]  # fmt: skip


# ---------------------------------------------------------------- the providers' Flatcar inputs

# What CAPA's and CAPV's Flatcar templates carry (trimmed): a drop-in on CABPK's kubeadm.service
# with the metadata their envsubst pre-command expands, units, a file, a networkd unit, a user.
FLATCAR_CLC = """\
systemd:
  units:
  - name: kubeadm.service
    enabled: true
    dropins:
    - name: 10-flatcar.conf
      contents: |
        [Unit]
        Requires=containerd.service coreos-metadata.service
        After=containerd.service coreos-metadata.service
        [Service]
        EnvironmentFile=/run/metadata/flatcar
  - name: set-hostname.service
    enabled: true
    contents: |
      [Unit]
      Description=Set the hostname
      [Service]
      Type=oneshot
      ExecStart=/usr/bin/true
      [Install]
      WantedBy=multi-user.target
storage:
  files:
  - path: /etc/flatcar/update.conf
    filesystem: root
    mode: 0644
    contents:
      inline: |
        REBOOT_STRATEGY=off
  directories:
  - path: /var/lib/extra
    mode: 0750
networkd:
  units:
  - name: 00-eth0.network
    contents: |
      [Match]
      Name=eth0
      [Network]
      DHCP=yes
passwd:
  users:
  - name: core
    ssh_authorized_keys:
    - ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl core
"""
FLATCAR_PRE = ["envsubst < /etc/kubeadm.yml > /etc/kubeadm.yml.tmp",
               "mv /etc/kubeadm.yml.tmp /etc/kubeadm.yml"]  # fmt: skip
# CAPZ's Flatcar control plane: an etcd data disk, made and mounted before kubeadm runs.
CAPZ_DISKS = {
    "diskSetup": {
        "partitions": [{"device": "/dev/disk/azure/scsi1/lun0", "layout": True,
                        "overwrite": False, "tableType": "gpt"}],
        "filesystems": [{"device": "/dev/disk/azure/scsi1/lun0", "filesystem": "ext4",
                         "label": "etcd_disk", "overwrite": False,
                         "extraOpts": ["-E", "lazy_itable_init=1,lazy_journal_init=1"]}],
    },
    "mounts": [["etcd_disk", "/var/lib/etcddisk"]],
}  # fmt: skip


def _flatcar(machine: str, **spec: Any) -> RenderResult:
    batch = render_all(Bundle(objects(**spec)), MACHINES, RenderOptions(now=FIXED_NOW))
    assert not batch.failures, batch.failures
    return next(r for r in batch.results if r.machine == machine)


def test_a_flatcar_templates_config_is_merged_validated_and_written(scratch: Path) -> None:
    result = _flatcar("prod/md-0", preKubeadmCommands=FLATCAR_PRE, **_clc(FLATCAR_CLC))
    assert validate(result.userdata, scratch) == (0, "")
    config = json.loads(result.userdata)
    (unit,) = [u for u in config["systemd"]["units"] if u["name"] == "kubeadm.service"]
    assert unit["dropins"][0]["name"] == "10-flatcar.conf"  # on nodesmith's own unit
    assert "ExecStart=/etc/kubeadm.sh" in unit["contents"]
    root = apply(result.userdata, scratch)
    dropin = root / "etc/systemd/system/kubeadm.service.d/10-flatcar.conf"
    assert "EnvironmentFile=/run/metadata/flatcar" in dropin.read_text()
    assert (root / "etc/systemd/system/set-hostname.service").is_file()
    update = root / "etc/flatcar/update.conf"
    assert update.read_text() == "REBOOT_STRATEGY=off\n" and update.stat().st_mode & 0o777 == 0o644
    assert (root / "var/lib/extra").stat().st_mode & 0o777 == 0o750
    assert "DHCP=yes" in (root / "etc/systemd/network/00-eth0.network").read_text()
    assert "\ncore:" in (root / "etc/passwd").read_text()
    # the providers' pre-commands edit the file kubeadm reads, where they expect it
    env = (root / "etc/nodesmith/bootstrap.env").read_text()
    assert "envsubst < /etc/kubeadm.yml" in env and "/etc/kubeadm.yml" in env
    assert (root / "etc/kubeadm.yml").stat().st_mode & 0o777 == 0o600


def test_diskSetup_and_mounts_become_disks_filesystems_and_a_mount_kubeadm_waits_for(
    scratch: Path,
) -> None:
    result = _flatcar("prod/cp-0", **CAPZ_DISKS)
    assert validate(result.userdata, scratch) == (0, "")
    config = json.loads(result.userdata)
    assert config["storage"]["disks"] == [
        {"device": "/dev/disk/azure/scsi1/lun0", "wipeTable": False, "partitions": [{"number": 1}]}
    ]
    assert config["storage"]["filesystems"] == [
        {
            "device": "/dev/disk/azure/scsi1/lun0",
            "format": "ext4",
            "label": "etcd_disk",
            "wipeFilesystem": False,
            "options": ["-E", "lazy_itable_init=1,lazy_journal_init=1"],
        }
    ]
    units = {u["name"]: u for u in config["systemd"]["units"]}
    mount = units["var-lib-etcddisk.mount"]
    assert mount["enabled"] is True
    assert "What=/dev/disk/by-label/etcd_disk\nWhere=/var/lib/etcddisk\n" in mount["contents"]
    assert "RequiresMountsFor=/var/lib/etcddisk" in units["kubeadm.service"]["contents"]
    assert subprocess.run(["systemd-escape", "--path", "--suffix=mount", "/var/lib/etcddisk"],
                          capture_output=True, text=True).stdout.strip() in units  # fmt: skip

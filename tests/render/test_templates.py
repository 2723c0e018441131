"""What the templates write, through a whole render: YAML that Go reads back as written."""

from __future__ import annotations

import yaml
from render_helpers import base_docs, files_by_path, find

from bootstrap.render import render_one


def test_values_go_reads_as_numbers_reach_kubeadm_quoted() -> None:
    docs = base_docs()
    join = find(docs, "KubeadmConfig", "md-0")["spec"]["joinConfiguration"]
    join.setdefault("nodeRegistration", {})["name"] = "1e3"
    join["nodeRegistration"]["kubeletExtraArgs"] = {"v": "1e1"}
    files = files_by_path(yaml.safe_load(render_one(docs, "prod/md-0").userdata))
    kubeadm = files["/run/kubeadm/kubeadm-join-config.yaml"]["content"]
    assert "  name: '1e3'\n" in kubeadm and "    value: '1e1'\n" in kubeadm, kubeadm

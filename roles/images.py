"""images role: preload container images into containerd's ``k8s.io`` namespace.

Host data ``preload_dir`` (a directory on the controller with image archives and a
SHA256SUMS; checked again here before any operation is added). The archives are copied
into the target, imported with ``ctr`` (into the running containerd over SSH, or into a
private containerd started just for the import inside a chroot), unpacked for the default
snapshotter so the first pod starts without unpacking, then deleted: containerd's content
store holds them now. ``/var/lib/nodesmith/preloaded-images.json`` records every imported
reference with the digest containerd gave it; the image manifest copies that record.
Without ``preload_dir`` this role does nothing.
"""

from pathlib import Path

from pyinfra import host
from pyinfra.operations import files, server

from bootstrap.image.preload import RECORD, check_dir

PRELOAD = str(host.data.get("preload_dir", "") or "")
STAGE = "/var/lib/nodesmith/preload"

IMPORT = r"""set -eu
stage={stage}; record=/{record}
if ctr --address /run/containerd/containerd.sock version >/dev/null 2>&1; then
  addr=/run/containerd/containerd.sock; pid=""
else
  # Inside a chroot nothing runs: a private containerd, CRI off, the image's own root.
  run=/run/nodesmith-preload; mkdir -p "$run"
  printf 'version = 2\ndisabled_plugins = ["io.containerd.grpc.v1.cri"]\n' > "$run/config.toml"
  addr="$run/containerd.sock"
  containerd --config "$run/config.toml" --address "$addr" --state "$run/state" \
    --root /var/lib/containerd > "$run/containerd.log" 2>&1 &
  pid=$!
  i=0
  until ctr --address "$addr" version >/dev/null 2>&1; do
    i=$((i+1)); [ "$i" -lt 150 ] || {{ cat "$run/containerd.log"; exit 1; }}; sleep 0.2
  done
fi
python3 - "$addr" "$stage" "$record" <<'PY'
import json, os, re, subprocess, sys
addr, stage, record = sys.argv[1:]
found = []
for name in sorted(os.listdir(stage)):
    out = subprocess.run(["ctr", "--address", addr, "-n", "k8s.io", "images", "import", "--",
                          os.path.join(stage, name)], check=True, capture_output=True,
                         universal_newlines=True).stdout
    refs = re.findall(r"unpacking (\S+) \((sha256:[0-9a-f]{{64}})\)", out)
    if not refs:
        sys.exit("ctr imported nothing from %s: %s" % (name, out))
    found += [dict(ref=ref, digest=digest, archive=name) for ref, digest in refs]
os.makedirs(os.path.dirname(record), exist_ok=True)
with open(record, "w") as f:
    json.dump(found, f, indent=2)
print("preloaded %d images" % len(found))
PY
rm -rf "$stage"
if [ -n "$pid" ]; then kill "$pid"; wait "$pid" || true; rm -rf /run/nodesmith-preload; fi
"""

if PRELOAD:
    archives = check_dir(Path(PRELOAD))  # a wrong hash stops here, before any operation
    files.directory(name="preload staging", path=STAGE, mode="0700", user="root", group="root")
    for name in archives:
        files.put(
            name=f"image archive {name}",
            src=str(Path(PRELOAD) / name),
            dest=f"{STAGE}/{name}",
            mode="0600",
            user="root",
            group="root",
        )
    server.shell(
        name="import images into containerd (k8s.io)",
        commands=[IMPORT.format(stage=STAGE, record=RECORD)],
    )

#!/usr/bin/env bash
# Image build benchmark: a cold build (empty package cache) then a warm build (cache filled),
# per-stage times from each manifest.json, plus artifact sizes.
# Targets (2 cores, no KVM): cold <= 6 min, warm <= 3 min, compressed qcow2 <= 450 MB.
# Usage: sudo bench/image.sh [DEFINITION] [FORMATS]     (run as root; heavy: one at a time)
#        BUILDER=packer-qemu bench/image.sh images/debian-12.yaml qcow2,raw   (Packer, TCG)
set -euo pipefail
cd "$(dirname "$0")/.."
DEF=${1:-images/debian-12.yaml}
FORMATS=${2:-qcow2,raw,box}
NODESMITH=${NODESMITH:-.venv/bin/nodesmith}
PY=${PY:-.venv/bin/python}
WORK=$(mktemp -d /var/tmp/nodesmith-bench-XXXXXX)
trap 'rm -rf "$WORK"' EXIT
export NODESMITH_CACHE="$WORK/cache"   # a private, empty cache makes the first run cold

report() {  # $1 = label, $2 = output dir, $3 = wall seconds
  "$PY" - "$1" "$2" "$3" <<'PYEOF'
import json, sys
label, out, wall = sys.argv[1], sys.argv[2], float(sys.argv[3])
m = json.load(open(f"{out}/manifest.json"))
stages = " ".join(f"{k}={v:.1f}s" for k, v in m["timings"].items())
print(f"{label}: wall {wall:.1f}s | {stages}")
for fmt, a in sorted(m["artifacts"].items()):
    print(f"  {fmt:6} {a['size'] / 1e6:8.1f} MB  {a['path']}")
PYEOF
}

for run in cold warm; do
  start=$(date +%s.%N)
  "$NODESMITH" image build "$DEF" --format "$FORMATS" --builder "${BUILDER:-chroot}" \
    --output "$WORK/$run" 2>"$WORK/$run.err" \
    || { cat "$WORK/$run.err" >&2; exit 1; }
  end=$(date +%s.%N)
  report "$run" "$WORK/$run" "$(echo "$end - $start" | bc)"
done
echo "raw allocated: $(du -h "$WORK/warm/image.raw" | cut -f1) (sparse, 4 GiB virtual)"
echo "date: $(date -u +%Y-%m-%dT%H:%MZ)  host: $(nproc) cores, builder: ${BUILDER:-chroot}"

#!/usr/bin/env bash
# make_fidelity.sh: regenerate experiments/calibrate/FIDELITY.md from the data/perf files.
#
# Runs every `kvlab calibrate` the document needs into a temporary directory (the main
# calibration, one per kvlab version, one per peer, the holdout splits), then writes the
# document with `python3 -m analysis.fidelity_report`, which reads only those output files.
# Run from anywhere; paths are relative to the repository root.
#
#   KVLAB=build/experiments/kvlab experiments/calibrate/make_fidelity.sh [OUT.md]
#
# Environment: KVLAB (default build/experiments/kvlab), SWEEP (default
# data/perf/h100_perf_sweep.h5), PEERS (default data/perf/h100_perf_peers.h5; empty: no peers),
# PYTHON (default python3).
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root"
KVLAB=${KVLAB:-build/experiments/kvlab}
SWEEP=${SWEEP:-data/perf/h100_perf_sweep.h5}
PEERS=${PEERS-data/perf/h100_perf_peers.h5}
PYTHON=${PYTHON:-python3}
out_md=${1:-experiments/calibrate/FIDELITY.md}

[[ -x "$KVLAB" ]] || { echo "make_fidelity.sh: KVLAB=$KVLAB is not an executable kvlab (build it: ninja -C build kvlab)" >&2; exit 2; }
[[ -f "$SWEEP" ]] || { echo "make_fidelity.sh: SWEEP=$SWEEP: no such file" >&2; exit 2; }
[[ -z "$PEERS" || -f "$PEERS" ]] || { echo "make_fidelity.sh: PEERS=$PEERS: no such file" >&2; exit 2; }

tmp=$(mktemp -d "${TMPDIR:-/tmp}/kvlab_fidelity.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

# The timed decode_attention versions of a result file (kvlab versions, or peers), one per line.
versions() {  # FILE peer|kvlab
  "$PYTHON" -c '
import sys
from analysis.load import load
d = load(sys.argv[1]).ok("decode_attention")
peer = sys.argv[2] == "peer"
print("\n".join(sorted(v for v in set(d["version"]) if v.startswith("peer:") == peer)))' "$1" "$2"
}

cal() {  # OUT.h5 ARGS...
  local out=$1; shift
  "$KVLAB" calibrate "$@" --no-rows --out "$tmp/$out" >"$tmp/$out.log" 2>&1
}

files=()
cal main.h5 "$SWEEP" || { cat "$tmp/main.h5.log" >&2; exit 1; }
files+=("$tmp/main.h5")

i=0
while IFS= read -r v; do
  [[ -n "$v" ]] || continue
  i=$((i + 1))
  cal "version$i.h5" "$SWEEP" --version "$v" || { cat "$tmp/version$i.h5.log" >&2; exit 1; }
  files+=("$tmp/version$i.h5")
done < <(versions "$SWEEP" kvlab)

skipped=()
if [[ -n "$PEERS" ]]; then
  i=0
  while IFS= read -r v; do
    [[ -n "$v" ]] || continue
    i=$((i + 1))
    if cal "peer$i.h5" "$PEERS" --version "$v"; then
      files+=("$tmp/peer$i.h5")
    else
      # A peer with too few measurements (e.g. one shape): named in the document with kvlab's reason.
      why=$(grep -m1 'error:' "$tmp/peer$i.h5.log" | sed 's/^.*error: //')
      [[ -n "$why" ]] || { cat "$tmp/peer$i.h5.log" >&2; exit 1; }
      echo "make_fidelity.sh: $v not calibrated: $why" >&2
      skipped+=(--skipped "\`$v\`: $why")
    fi
  done < <(versions "$PEERS" peer)
fi

holdouts=(
  "context >= 32768"
  "batch >= 64"
  "lengths == 'mixed' || block_size != 16 || gqa_group != 4"
  "graph == 'on'"
  "kv_format == 'nvfp4'"
)
i=0
for h in "${holdouts[@]}"; do
  i=$((i + 1))
  cal "holdout$i.h5" "$SWEEP" --holdout "$h" || { cat "$tmp/holdout$i.h5.log" >&2; exit 1; }
  files+=("$tmp/holdout$i.h5")
done

"$PYTHON" -m analysis.fidelity_report "${files[@]}" "${skipped[@]}" --markdown "$out_md"

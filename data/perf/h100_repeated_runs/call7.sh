#!/usr/bin/env bash
# Session 17 call 7: the TMA loads' L2 policy, A/B. main's kvlab (evict-first, 9f2e7ab) and a
# scratch kvlab with l2_evict_normal.patch (evict-normal), alternated three times over
# data/perf/h100_repeated_runs/l2_policy/l2_policy.ini in one call.
set -u
B=$PWD/.device-carry/b; mkdir -p $B
[[ -x $B/bin/kvlab ]] || python3 -c "import tarfile; tarfile.open('.device-carry/bin.tar.xz').extractall('$B')"
python3 -c "import tarfile; tarfile.open('.device-carry/l2n.tar.xz').extractall('$B')"
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
R=$OUT/run; mkdir -p $R
nvidia-smi --query-gpu=name,driver_version,uuid --format=csv,noheader | tee $R/device.txt
CFG=data/perf/h100_repeated_runs/l2_policy/l2_policy.ini
for i in 1 2 3; do
  for side in first normal; do
    BIN=$B/bin/kvlab; [[ $side == normal ]] && BIN=$B/l2n/kvlab
    timeout -k 10 120 $BIN sweep $CFG --out $R/${side}_$i.h5 --progress none > $R/${side}_$i.log 2>&1
    echo "$side $i rc=$? $(grep -E '^done:' $R/${side}_$i.log | cut -c1-80)"
  done
done
python3 - "$R" <<'PY'
import sys, glob, os
sys.path.insert(0, ".")
from analysis.load import load
rows = {}
for f in sorted(glob.glob(os.path.join(sys.argv[1], "*.h5"))):
    side = os.path.basename(f).split("_")[0]
    d = load(f).index
    d = d[(d.kind == "decode_attention") & (d.status == "ok")]
    for _, r in d.iterrows():
        rows.setdefault((r.kv_format, int(r.batch), int(r.context)), {}).setdefault(side, []).append(r.median_us)
for k, v in sorted(rows.items()):
    print(k, " ".join(f"{s}: " + " ".join(f"{x:.2f}" for x in v[s]) for s in ("first", "normal") if s in v))
PY
cd $OUT && tar cJf call.tar.xz run && rm -rf run && ls -la $OUT

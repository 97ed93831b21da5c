#!/usr/bin/env bash
# gpu_stage.sh: the tests-with-teeth GPU stage (run on the GPU machine, from the repository
# root):
#
#   bash tests/gpu_stage.sh BIN        # BIN: gpu_tests, kvlab, gpu_mutants.tar.xz (stripped)
#
# BIN/gpu_mutants.tar.xz is made on the build machine from the same tree as the binaries:
#   bash tests/mutation/pack_gpu_mutants.sh build BIN
#
# Steps (logs and data under $OUT/teeth/; at most BUDGET_S = 300 s of device time in all, the
# steps' limits cut to what is left; expected about 180 s on an H100: gpu_tests ~60 s, the
# tolerance measurement ~90 s, the mutants ~30 s):
#   1. gpu_tests on the fixed checks and on every test a GPU mutant is judged by (the 40k-token
#      result asserted, all six decode-step cases required, bench kinds that may skip only
#      where the registry declines, the llama3-8b step against the CPU reference, the decode
#      versions on the curated and small cases, append, quantize, step kernels, DSV4, device
#      tables, the serving executor against the shallow bf16 step row), with
#      KVLAB_TOLERANCE_LOG: every passing table check is logged and folded into gpu_checks.csv
#      (the decode, LSE, vs-original, compressor and step rows measured on the GPU).
#      These runs are also the mutants' baseline;
#   2. kvlab validate experiments/configs/tolerance.ini -> h100_tolerance.h5: the decode-step
#      logits vs the CPU reference at the depths of the shallow (1-4) and deep (5-32) rows;
#      every decode-step point, failed ones included (figures from the failure reason), also
#      goes to h100_step_logits.csv in the columns of data/tolerance/ (the rows' data file);
#   3. the GPU mutants: each packed mutant binary against its tests -> gpu_mutants.json;
#   4. a summary table (last lines of the output).
# Exit code: 0 when every step passed (each step's own status is in the table).
set -uo pipefail

BIN="${1:?usage: bash tests/gpu_stage.sh BIN (folder with gpu_tests, kvlab, gpu_mutants.tar.xz)}"
BIN="$(cd "$BIN" && pwd)"
OUT="${OUT:-/tmp/kvlab-out}"
S="$OUT/teeth"
mkdir -p "$S"
cd "$(dirname "$0")/.."
export LD_LIBRARY_PATH="/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
PY="${PY:-python3}"

# The whole stage stays within BUDGET_S seconds (default 300): each step's own limit is cut
# to what is left, and a step with less than 10 s left is not started.
BUDGET_S="${BUDGET_S:-300}"
declare -A status seconds
step() {  # step NAME TIMEOUT_S COMMAND...
  local name=$1 limit=$2
  shift 2
  local left=$((BUDGET_S - SECONDS))
  if [ "$left" -lt 10 ]; then
    echo "[teeth] $name: not started (${left} s of the ${BUDGET_S} s budget left)"
    status[$name]="NOT-STARTED"
    seconds[$name]=0
    return
  fi
  [ "$limit" -le "$left" ] || limit=$left
  local t0=$SECONDS
  echo "[teeth] $name: $*"
  timeout "$limit" "$@" > "$S/$name.log" 2>&1
  local rc=$?
  seconds[$name]=$((SECONDS - t0))
  status[$name]=$([ $rc -eq 0 ] && echo ok || echo "FAIL($rc)")
  tail -3 "$S/$name.log"
}

# 1. The fixed checks and the mutants' tests, table checks logged.
FILTER="DecodeEdge.*:StepEngine.*:BenchKinds.*:Small/DecodeSmall.*:Curated/DecodeCurated.*"
FILTER+=":Dsv4Gpu.Compressor*:Dsv4Gpu.AppendSwaMatchesTheReferenceBytes"
FILTER+=":Dsv4Gpu.AllocatorReplaysTheHostAllocatorsDecisions"
FILTER+=":Dsv4Gpu.DeviceManagerLifecycleMirrorsTheHostManager"
FILTER+=":All/AppendExact.*:All/AppendFp4HeadDim.*:All/AppendBoundary.*:All/AppendPoolScale.*"
FILTER+=":QuantExact.*"
FILTER+=":StepKernels.*:DeviceTables.*:PrefillPaged.*:DecodeV6.*:ServingExecutor.*"
FILTER+=":DecodeV12/*.LastBlockMerge*:DecodeV12/*.ClusterMergeAtForced*"
FILTER+=":DecodeV13/*.EveryGeometry*:DecodeV14/*.EveryGeometry*:DecodeV14/*.KvHeadCounts*"
FILTER+=":DecodeV15/*.StreamKRanges*:DecodeV16/*.SharedTiles*"
rm -f "$S/gpu_tolerance_log.csv"
export KVLAB_TOLERANCE_LOG="$S/gpu_tolerance_log.csv"
step gpu_tests 150 "$BIN/gpu_tests" --gtest_filter="$FILTER"
unset KVLAB_TOLERANCE_LOG
if [ -s "$S/gpu_tolerance_log.csv" ]; then
  $PY tests/tolerance/summarize_log.py "$S/gpu_tolerance_log.csv" --out "$S/gpu_checks.csv" \
    --dataset "every check of gpu_tests on this device" > /dev/null
fi

# 2. The tolerance measurement (validation only).
rm -f "$S/h100_tolerance.h5"
# (150 s: its 22 points took 124 s on the H100, and the summary runs after them)
step tolerance 150 "$BIN/kvlab" validate experiments/configs/tolerance.ini \
  --out "$S/h100_tolerance.h5" --progress plain

# 3. GPU mutants.
if [ -f "$BIN/gpu_mutants.tar.xz" ]; then
  M="$(mktemp -d /tmp/kvlab-gpu-mutants-XXXX)"
  tar -C "$M" -xJf "$BIN/gpu_mutants.tar.xz"
  mut_args=(--no-baseline --jobs 4)
  [ "${status[gpu_tests]}" = ok ] || mut_args=(--jobs 4)  # a failing test would "kill" every mutant
  step mutants 70 $PY tests/mutation/run_mutants.py --run-packed "$M/gpu_mutants" --bin "$BIN" \
    --logs "$S/mutants" --json "$S/gpu_mutants.json" "${mut_args[@]}"
  rm -rf "$M"
else
  status[mutants]="MISSING: $BIN/gpu_mutants.tar.xz"
  seconds[mutants]=0
fi

# 4. Summary.
{
  echo
  echo "== teeth GPU stage summary ($(date -u +%FT%TZ), $(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1))"
  printf '%-10s %-14s %6s  %s\n' step status seconds detail
  printf '%-10s %-14s %6s  %s\n' gpu_tests "${status[gpu_tests]}" "${seconds[gpu_tests]}" \
    "$(grep -E '^\[  (PASSED|FAILED|SKIPPED) *\] [0-9]+ test' "$S/gpu_tests.log" | tr '\n' ' ')"
  printf '%-10s %-14s %6s  %s\n' tolerance "${status[tolerance]}" "${seconds[tolerance]}" \
    "$S/h100_tolerance.h5"
  printf '%-10s %-14s %6s  %s\n' mutants "${status[mutants]}" "${seconds[mutants]:-0}" \
    "$(grep -E '^gpu: ' "$S/mutants.log" 2>/dev/null)"
  $PY - "$S" <<'EOF' || echo "(no tolerance summary: $?)"
import json, os, sys
s = sys.argv[1]
try:
    import h5py, numpy as np
    with h5py.File(os.path.join(s, "h100_tolerance.h5"), "r") as f:
        ix = f["index"]  # one dataset per column (experiments/results/result_file.h)
        def col(n):
            if n not in ix:
                return [None] * len(ix["kind"])
            return [x.decode() if isinstance(x, bytes) else x for x in ix[n][()]]
        kind, status = col("kind"), col("status")
        print("decode_step vs the CPU reference (max |dlogit| / worst NMSE per step):")
        rows = {}  # (preset, layers, format) -> (max_abs, nmse, points, failed points)
        import re
        for i in range(len(kind)):
            if kind[i] != "decode_step":
                continue
            depth = {"tiny": 2, "small": 3, "llama3-8b": 32}
            preset = col("preset")[i]
            layers = int(col("layers")[i]) or depth.get(preset, 0)  # 0: the preset's depth
            key = (preset, layers, col("kv_format")[i])
            why = col("reason")[i] or ""
            if status[i] == "ok":
                a, n = float(col("ref_max_abs")[i]), float(col("ref_nmse")[i])
            else:
                # a failed comparison still measured: its figures are in the reason
                ma, mn = re.search(r"max_abs=([0-9.e+-]+)", why), re.search(r"nmse=([0-9.e+-]+)", why)
                print(f"  {key}: {status[i]} {why[:120]}")
                if not (ma and mn):
                    continue
                a, n = float(ma.group(1)), float(mn.group(1))
            old = rows.get(key, (0.0, 0.0, 0, 0))
            rows[key] = (max(old[0], a), max(old[1], n), old[2] + 1, old[3] + (status[i] != "ok"))
        for (p, l, fmt), (a, n, _, nf) in sorted(rows.items()):
            print(f"  {p:<10} layers {l:>2} {fmt:<12} {a:9.4f} {n:10.3e}{'  FAILED its row' if nf else ''}")
        # The same in the columns of data/tolerance/*.csv (rtol 0: needed atol = max |d|), so
        # the change that stores it can append it to data/tolerance/h100_step_logits.csv.
        attrs = {}
        with h5py.File(os.path.join(s, "h100_tolerance.h5"), "r") as g:
            for k in ("git_commit", "created_utc"):
                v = g.attrs.get(k, b"")
                attrs[k] = v.decode() if isinstance(v, bytes) else str(v)
        run = f"h100 GPU stage {attrs['created_utc'][:10]} main {attrs['git_commit'][:7]}"
        with open(os.path.join(s, "h100_step_logits.csv"), "w") as out:
            out.write("# GPU decode step vs the CPU reference (tests/gpu_stage.sh, "
                      "experiments/configs/tolerance.ini)\n")
            out.write("op,format,dtype,layers,subject,dataset,cases,elements,rtol,max_abs,"
                      "needed_atol,worst_nmse,nmse_unit\n")
            for (p, l, fmt), (a, n, pts, nf) in sorted(rows.items()):
                tag = "; failed the row" if nf else ""
                out.write(f"decode_step_logits,{fmt},f32,{l},GPU vs CPU reference {p},"
                          f"{run} (experiments/configs/tolerance.ini; context 16){tag},"
                          f"{pts},0,0,{a:.6g},{a:.6g},{n:.6g},step\n")
        dec = [i for i in range(len(kind)) if kind[i] == "decode_attention"]
        ok = [i for i in dec if status[i] == "ok"]
        if ok:
            print(f"decode_attention: {len(ok)}/{len(dec)} ok, worst max_abs_err "
                  f"{max(float(col('max_abs_err')[i]) for i in ok):.3e}, worst nmse "
                  f"{max(float(col('nmse')[i]) for i in ok):.3e}, worst lse "
                  f"{max(float(col('lse_max_abs_err')[i]) for i in ok):.3e}")
except Exception as e:  # the summary must not hide the table above
    print(f"(tolerance file not summarized: {e})")
p = os.path.join(s, "gpu_mutants.json")
if os.path.exists(p):
    res = json.load(open(p))
    for r in res:
        print(f"  mutant {r['id']:<36} {r['result']:<9} {r.get('killed_by') or r.get('detail', '')}"[:150])
EOF
} | tee "$S/summary.txt"

for k in gpu_tests tolerance mutants; do
  [ "${status[$k]:-}" = ok ] || exit 1
done
exit 0

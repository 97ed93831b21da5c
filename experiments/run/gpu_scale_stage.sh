#!/usr/bin/env bash
# gpu_scale_stage.sh: the multi-GPU stage of the sweep runner (2-GPU H100 machine): does
# `kvlab sweep --gpus all` (one worker per GPU, points handed out dynamically, a case's
# versions kept on one worker, reference threads = cores / workers) scale?
#   bash experiments/run/gpu_scale_stage.sh BIN        (from the repository root; $OUT set)
# BIN holds the stripped kvlab binary (nothing else). Two sweeps, each run on GPU 0 alone
# (CUDA_VISIBLE_DEVICES=0, one process) and with --gpus all:
#   validation  validate.ini's decode_small study on three formats (every version x layout x
#               head_dim x GQA, mixed lengths up to 3001): the CPU reference per case dominates,
#               timing is 3 warm reps (the sweep the 1.16x on 2 GPUs was measured on);
#   timing      three tensor-core versions on 64 large shapes (batch 16/64, context 4k/16k,
#               BF16 / FP8, two layouts, GQA 4/8), cold L2, up to 0.25 s of samples per point:
#               GPU time dominates.
# Writes $OUT/integrity/: the four result files, their logs, compare.txt (per sweep: the same
# point set, validation metrics bit-identical, timing medians of the 2-GPU run over the 1-GPU
# run), summary.md (printed last): points, seconds on 1 GPU and on all GPUs, the speed-up.
# Budget: 4 runs of at most 70 s each plus the comparison: under 5 minutes hard, about 3
# expected. Exit 0 when every run finished and matched, 1 otherwise; with fewer than 2 GPUs the
# --gpus all runs are skipped and said so (no speed-up can be shown).
set -uo pipefail
BIN="${1:?usage: gpu_scale_stage.sh BIN}"
OUT="${OUT:?OUT must be set}"
dir="$OUT/integrity"
mkdir -p "$dir"
export LD_LIBRARY_PATH="/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
[ -x "$BIN/kvlab" ] || { echo "gpu_scale_stage: $BIN/kvlab missing or not executable"; exit 2; }
start=$(date +%s)
note() { echo "[$(( $(date +%s) - start )) s] $*" | tee -a "$dir/stage.log"; }
nvidia-smi --query-gpu=index,name,driver_version,clocks.sm,temperature.gpu --format=csv > "$dir/nvidia_smi.csv" 2>&1
ngpu=$(nvidia-smi -L 2>/dev/null | grep -c "^GPU ")
note "GPUs: $ngpu; $(nproc) CPU cores"

cat > "$dir/validation.ini" <<'INI'
name = scale_validation
description = validation-heavy decode sweep: the CPU reference per case dominates
seed = 20240601
[timing]
warmup = 1
min_reps = 3
max_reps = 3
max_seconds = 0
cold_l2 = false
[decode_small]
kind = decode_attention
version = all
kv_format = bf16, fp8_e4m3_pt, nvfp4
layout = all
head_dim = 64, 128
gqa_group = 1, 4
batch = 5
context = 3001
lengths = mixed
INI
cat > "$dir/timing.ini" <<'INI'
name = scale_timing
description = timing-dominated decode sweep: cold-L2 samples on large shapes
seed = 20240602
[timing]
warmup = 3
min_reps = 10
max_reps = 400
target_rel_iqr = 0.005
max_seconds = 0.25
cold_l2 = true
[decode_large]
kind = decode_attention
version = v4_mma_decode, v5_mma_decode_2stage, v6_stream_k_decode
kv_format = bf16, fp8_e4m3_pt
layout = nhd, hnd
gqa_group = 4, 8
batch = 16, 64
context = 4096, 16384
INI

declare -A secs rcs
run() {  # run NAME MODE
  local name=$1 mode=$2 out="$dir/$1_$2.h5" t0 t1 rc
  rm -rf "$out" "$out.shards"
  t0=$(date +%s.%N)
  if [ "$mode" = 1gpu ]; then
    CUDA_VISIBLE_DEVICES=0 timeout 70 "$BIN/kvlab" sweep "$dir/$name.ini" --out "$out" --progress plain \
      > "$dir/${name}_$mode.log" 2>&1
  else
    timeout 70 "$BIN/kvlab" sweep "$dir/$name.ini" --out "$out" --gpus all --progress plain \
      > "$dir/${name}_$mode.log" 2>&1
  fi
  rc=$?
  t1=$(date +%s.%N)
  secs[$name,$mode]=$(python3 -c "print(f'{$t1 - $t0:.1f}')")
  rcs[$name,$mode]=$rc
  note "$name on $mode: exit $rc, ${secs[$name,$mode]} s"
  [ $rc -eq 0 ] || tail -5 "$dir/${name}_$mode.log"
}
for name in validation timing; do
  run "$name" 1gpu
  if [ "$ngpu" -ge 2 ]; then run "$name" allgpu; else note "$name: one GPU only, --gpus all not run"; fi
done

python3 - "$dir" "$ngpu" > "$dir/compare.txt" 2>&1 <<'PY'
import os, sys
import h5py, numpy as np
d, ngpu = sys.argv[1], int(sys.argv[2])
VAL = ["max_abs_err", "rel_l2", "nmse", "max_ulp", "violations", "lse_max_abs_err", "validated_seqs"]
def table(p):
    with h5py.File(p, "r") as f:
        ix = f["index"]
        keys = list(ix["key"].asstr()[()])
        cols = {c: ix[c][()] for c in VAL + ["median_us"] if c in ix}
        status = list(ix["status"].asstr()[()])
    return {k: ({c: v[i] for c, v in cols.items()}, status[i]) for i, k in enumerate(keys)}
for name in ("validation", "timing"):
    a, b = f"{d}/{name}_1gpu.h5", f"{d}/{name}_allgpu.h5"
    if not (os.path.exists(a) and os.path.exists(b)):
        print(f"{name}: not compared (a run is missing)")
        continue
    ta, tb = table(a), table(b)
    same_keys = set(ta) == set(tb)
    bad = [k for k in ta if k in tb and any(
        not (np.isnan(ta[k][0][c]) and np.isnan(tb[k][0][c])) and ta[k][0][c] != tb[k][0][c]
        for c in VAL if c in ta[k][0])]
    st = {s for _, s in ta.values()}
    ratios = np.array([tb[k][0]["median_us"] / ta[k][0]["median_us"] for k in ta
                       if k in tb and ta[k][1] == "ok" and tb[k][1] == "ok" and ta[k][0].get("median_us", 0) > 0])
    print(f"{name}: {len(ta)} / {len(tb)} points, same point set: {same_keys}, "
          f"validation metrics identical: {not bad} ({len(bad)} differ), statuses {sorted(st)}")
    if len(ratios):
        print(f"{name}: median_us all-GPU / 1-GPU per point: median {np.median(ratios):.3f}, "
              f"[{ratios.min():.3f}, {ratios.max():.3f}] over {len(ratios)} points")
    print(f"MATCH {name} {int(same_keys and not bad)}")
PY
cat "$dir/compare.txt" | grep -v "^MATCH" | tee -a "$dir/stage.log"

rc=0
{
  echo "| sweep | points | 1 GPU (s) | --gpus all, $ngpu GPUs (s) | speed-up | same points, identical validation |"
  echo "|---|---|---|---|---|---|"
  for name in validation timing; do
    pts=$(python3 -c "import h5py; print(h5py.File('$dir/${name}_1gpu.h5','r')['index/key'].shape[0])" 2>/dev/null || echo "?")
    one=${secs[$name,1gpu]:-} all=${secs[$name,allgpu]:-}
    [ "${rcs[$name,1gpu]:-1}" = 0 ] || { one="exit ${rcs[$name,1gpu]:-?}"; rc=1; }
    if [ "$ngpu" -ge 2 ]; then
      [ "${rcs[$name,allgpu]:-1}" = 0 ] || { all="exit ${rcs[$name,allgpu]:-?}"; rc=1; }
      sp=$(python3 -c "print(f'{float(\"$one\") / float(\"$all\"):.2f}x')" 2>/dev/null || echo "-")
      match=$(grep "^MATCH $name " "$dir/compare.txt" | awk '{print $3 == 1 ? "yes" : "NO"}')
      [ "$match" = yes ] || rc=1
    else
      all="not run (1 GPU)"; sp="-"; match="-"
    fi
    echo "| $name | $pts | $one | $all | $sp | ${match:-NO} |"
  done
} > "$dir/summary.md"
note "done"
cat "$dir/summary.md"
exit $rc

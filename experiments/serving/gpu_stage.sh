#!/usr/bin/env bash
# gpu_stage.sh: the serving GPU stage (H100): the paged-prefill kernel and the serving path
# validated, the prefill kernel timed, the serving step model calibrated, eight real serving
# runs and their predictions, the fidelity table printed last.
#   bash experiments/serving/gpu_stage.sh BIN        (from the repository root; $OUT set)
# BIN holds the stripped binaries kvlab and gpu_tests (nothing else is needed: the configs,
# data/workloads and analysis/ travel in the tree). Budget: 295 s hard (the sum of the timeouts
# below), about 3.5 minutes expected. Writes $OUT/serving/:
#   gpu_tests.log      PrefillRegistry.*, PrefillPaged.* (the prefill kernel vs the reference:
#                      awkward chunks and prefixes, NaN in unused slots, guard regions) and
#                      ServingExecutor.* (GPU serving runs of a tiny decoder, every sampled
#                      token's logits vs the CPU reference decoder teacher-forced on the same
#                      tokens: chunked prefill, preemption, CUDA graphs, prefix-cache hits)
#   prefill.h5         experiments/configs/prefill.ini: the prefill kernel validated and timed
#   calibration.h5     experiments/configs/serving_calibration.ini: 98 synthetic steps through
#                      the serving executor, timed whole and part by part (the model's input)
#   serving.h5         experiments/configs/serving.ini: 8 serving runs (4 workloads x 2 loads),
#                      measured on the GPU and predicted by the model fitted to calibration.h5
#   figures/           serving_fidelity.{png,pdf}, serving_step_residuals.{png,pdf}
#   *.log, summary.md  every step's output; the summary (printed last)
# The stage needs no other stage. Exit code: 0 when every step ran, 1 otherwise (the
# summary says which step failed).
set -uo pipefail
BIN="${1:?usage: gpu_stage.sh BIN}"
OUT="${OUT:?OUT must be set}"
dir="$OUT/serving"
mkdir -p "$dir/figures"
export LD_LIBRARY_PATH="/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
start=$(date +%s)
rc=0
note() { echo "[$(( $(date +%s) - start )) s] $*" | tee -a "$dir/stage.log"; }
for b in kvlab gpu_tests; do
  [ -x "$BIN/$b" ] || { echo "gpu_stage: $BIN/$b missing or not executable"; exit 2; }
done
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,clocks.mem,temperature.gpu,power.draw \
  --format=csv > "$dir/nvidia_smi.csv" 2>&1
note "device: $(tail -1 "$dir/nvidia_smi.csv")"

# 1. Validation first (fail fast, but keep going: the runs below are still informative).
note "gpu_tests (prefill kernel, serving executor vs the CPU reference)"
timeout 35 "$BIN/gpu_tests" --gtest_filter='PrefillRegistry.*:PrefillPaged.*:ServingExecutor.*' \
  > "$dir/gpu_tests.log" 2>&1
tests_rc=$?
[ $tests_rc -eq 0 ] || { rc=1; note "gpu_tests FAILED (rc $tests_rc): see gpu_tests.log"; \
  grep -B2 -A8 "Failure" "$dir/gpu_tests.log" | cut -c1-300 | head -40; }

# 2. The prefill kernel, validated and timed like every kernel.
note "prefill kernel sweep"
timeout 33 "$BIN/kvlab" sweep experiments/configs/prefill.ini --out "$dir/prefill.h5" \
  --progress plain > "$dir/prefill.log" 2>&1
prefill_rc=$?
[ $prefill_rc -eq 0 ] || { rc=1; note "prefill sweep rc $prefill_rc: see prefill.log"; tail -5 "$dir/prefill.log"; }

# 3. The serving step model's calibration (never the runs it predicts).
note "serving step calibration sweep"
timeout 67 "$BIN/kvlab" sweep experiments/configs/serving_calibration.ini --out "$dir/calibration.h5" \
  --progress plain > "$dir/calibration.log" 2>&1
cal_rc=$?
[ $cal_rc -eq 0 ] || { rc=1; note "calibration sweep rc $cal_rc: see calibration.log"; tail -5 "$dir/calibration.log"; }

# 4. Eight serving runs on the GPU and their predictions.
note "serving runs"
timeout 125 "$BIN/kvlab" sweep experiments/configs/serving.ini --out "$dir/serving.h5" \
  --axis "calibration=$dir/calibration.h5" --progress plain > "$dir/serving.log" 2>&1
serve_rc=$?
[ $serve_rc -eq 0 ] || { rc=1; note "serving sweep rc $serve_rc: see serving.log"; tail -5 "$dir/serving.log"; }

# 5. Tables and figures.
note "tables and figures"
{
  echo "# serving stage summary"
  echo
  echo "gpu_tests rc=$tests_rc, prefill rc=$prefill_rc, calibration rc=$cal_rc, serving rc=$serve_rc, $(( $(date +%s) - start )) s"
  grep -E "^\[  (PASSED|FAILED)|tests ran|\[serving\]" "$dir/gpu_tests.log" | tail -12
  echo
  timeout 8 python3 - "$dir/prefill.h5" "$dir/calibration.h5" <<'PY'
import sys
from analysis.load import load
try:
    p = load(sys.argv[1]).index
    p = p[p["kind"] == "prefill_attention"]
    print("## prefill kernel (prefill_paged_v0_flash_mma)\n")
    print("| batch | chunk | prefix | layout | format | head_dim | status | median us | TFLOP/s | max abs err |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for _, x in p.iterrows():
        print(f"| {x['batch']:.0f} | {x['chunk']:.0f} | {x['prefix']:.0f} | {x['layout']} | {x['kv_format']} | "
              f"{x['head_dim']:.0f} | {x['status']} | {x.get('median_us', float('nan')):.1f} | "
              f"{x.get('tflops', float('nan')):.1f} | {x.get('max_abs_err', float('nan')):.2e} |")
except Exception as e:  # the file may be missing when a step failed
    print(f"prefill table: {e}")
try:
    c = load(sys.argv[2]).index
    c = c[c["kind"] == "serving_step"]
    ok = c[c["status"] == "ok"]
    print(f"\n## calibration: {len(ok)} of {len(c)} serving_step points ok")
    for _, x in c[c["status"] != "ok"].head(5).iterrows():
        print(f"  {x['status']}: {x['key']}: {x['reason']}")
except Exception as e:
    print(f"calibration table: {e}")
PY
  timeout 6 python3 - "$dir/serving.h5" <<'PY'
import sys
from analysis.load import load
try:
    s = load(sys.argv[1]).index
    s = s[s["kind"] == "serving"]
    for _, x in s[s["status"] != "ok"].iterrows():
        print(f"serving point {x['key']}: {x['status']}: {x['reason']}")
    for _, x in s[s["status"] == "ok"].iterrows():
        print(f"- {x['workload']} / {x['load']}: model: {x.get('model', '')}")
        print(f"  decisions: {x.get('decisions', '')}")
        break
except Exception as e:
    print(f"serving points: {e}")
PY
  timeout 12 python3 -m analysis.serving_figures "$dir/serving.h5" --out "$dir/figures" > "$dir/figures.log" 2>&1
  echo
  timeout 9 python3 -m analysis.serving_figures "$dir/serving.h5" --markdown 2>&1
} > "$dir/summary.md" 2>&1
note "done"
cat "$dir/summary.md"
exit $rc

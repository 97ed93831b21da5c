#!/usr/bin/env bash
# gpu_stage.sh: the serving GPU stage (H100): the paged-prefill kernel and the serving path
# validated, the serving step model calibrated, real serving runs and their predictions, the
# fidelity table printed last.
#   bash experiments/serving/gpu_stage.sh BIN             (from the repository root; $OUT set)
#   SERVING_STAGE=full bash experiments/serving/gpu_stage.sh BIN
# BIN holds the stripped binaries kvlab and gpu_tests (nothing else is needed: the configs,
# data/workloads and analysis/ travel in the tree). Two sizes:
#   short (default)  under 2 minutes (117 s hard: the sum of the timeouts below): the GPU tests,
#                    the whole calibration, three high-load serving runs (chat_poisson,
#                    shared_prefix, offline_batch at their small KV pools, where preemption and
#                    queueing happen: ~1000 steps of ~10 ms each; the calibration took 23 s
#                    on the H100), tables and figures; no
#                    prefill sweep (its kernel is still validated by gpu_tests)
#   full             under 5 minutes (295 s hard): also the prefill kernel sweep and all eight
#                    serving runs (4 workloads x 2 loads)
# A step cut off by its timeout stops after its current point (SIGTERM: the result file keeps
# every finished point) and the later steps use what it wrote.
# Writes $OUT/serving/:
#   gpu_tests.log      PrefillRegistry.*, PrefillPaged.* (the prefill kernel vs the reference:
#                      awkward chunks and prefixes, NaN in unused slots, guard regions) and
#                      ServingExecutor.* (GPU serving runs of a tiny decoder, every sampled
#                      token's logits vs the CPU reference decoder teacher-forced on the same
#                      tokens: chunked prefill, preemption, CUDA graphs, prefix-cache hits)
#   prefill.h5         (full) experiments/configs/prefill.ini: the prefill kernel validated, timed
#   calibration.h5     experiments/configs/serving_calibration.ini: 98 synthetic steps through
#                      the serving executor, validated, timed whole and part by part (the
#                      model's input)
#   serving.h5         experiments/configs/serving.ini: serving runs measured on the GPU and
#                      predicted by the model fitted to calibration.h5
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
mode="${SERVING_STAGE:-short}"
case "$mode" in
  short) t_tests=12; t_cal=35; t_serve=55; t_py=15
         serve_sel=(--only chat_poisson,shared_prefix,offline_batch --shard 1/2) ;;
  full) t_tests=30; t_prefill=25; t_cal=75; t_serve=140; t_py=25; serve_sel=() ;;
  *) echo "gpu_stage: SERVING_STAGE must be short or full, got '$mode'"; exit 2 ;;
esac
start=$(date +%s)
rc=0
prefill_rc=skipped
note() { echo "[$(( $(date +%s) - start )) s] $*" | tee -a "$dir/stage.log"; }
for b in kvlab gpu_tests; do
  [ -x "$BIN/$b" ] || { echo "gpu_stage: $BIN/$b missing or not executable"; exit 2; }
done
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,clocks.mem,temperature.gpu,power.draw \
  --format=csv > "$dir/nvidia_smi.csv" 2>&1
note "device: $(tail -1 "$dir/nvidia_smi.csv"), stage size $mode"

# 1. Validation first (fail fast, but keep going: the runs below are still informative).
note "gpu_tests (prefill kernel, serving executor vs the CPU reference)"
timeout -k 3 $t_tests "$BIN/gpu_tests" --gtest_filter='PrefillRegistry.*:PrefillPaged.*:ServingExecutor.*' \
  > "$dir/gpu_tests.log" 2>&1
tests_rc=$?
[ $tests_rc -eq 0 ] || { rc=1; note "gpu_tests FAILED (rc $tests_rc): see gpu_tests.log"; \
  grep -B2 -A8 "Failure" "$dir/gpu_tests.log" | cut -c1-300 | head -40; }

# 2. The prefill kernel, validated and timed like every kernel (full size only).
if [ "$mode" = full ]; then
  note "prefill kernel sweep"
  timeout -k 3 $t_prefill "$BIN/kvlab" sweep experiments/configs/prefill.ini --out "$dir/prefill.h5" \
    --progress plain > "$dir/prefill.log" 2>&1
  prefill_rc=$?
  [ $prefill_rc -eq 0 ] || { rc=1; note "prefill sweep rc $prefill_rc: see prefill.log"; tail -5 "$dir/prefill.log"; }
fi

# 3. The serving step model's calibration (never the runs it predicts).
note "serving step calibration sweep"
timeout -k 5 $t_cal "$BIN/kvlab" sweep experiments/configs/serving_calibration.ini --out "$dir/calibration.h5" \
  --progress plain > "$dir/calibration.log" 2>&1
cal_rc=$?
[ $cal_rc -eq 0 ] || { rc=1; note "calibration sweep rc $cal_rc: see calibration.log"; tail -5 "$dir/calibration.log"; }

# 4. Serving runs on the GPU and their predictions.
note "serving runs ${serve_sel[*]:-(all)}"
timeout -k 5 $t_serve "$BIN/kvlab" sweep experiments/configs/serving.ini --out "$dir/serving.h5" \
  --axis "calibration=$dir/calibration.h5" "${serve_sel[@]}" --progress plain > "$dir/serving.log" 2>&1
serve_rc=$?
[ $serve_rc -eq 0 ] || { rc=1; note "serving sweep rc $serve_rc: see serving.log"; tail -5 "$dir/serving.log"; }

# 5. Tables and figures.
note "tables and figures"
{
  echo "# serving stage summary"
  echo
  echo "stage $mode: gpu_tests rc=$tests_rc, prefill rc=$prefill_rc, calibration rc=$cal_rc, serving rc=$serve_rc, $(( $(date +%s) - start )) s"
  grep -E "^\[  (PASSED|FAILED)|tests ran|\[serving\]" "$dir/gpu_tests.log" | tail -12
  echo
  timeout -k 2 $t_py python3 - "$dir" <<'PY'
import os, sys
from analysis.load import load
d = sys.argv[1]
if os.path.exists(f"{d}/prefill.h5"):
    try:
        p = load(f"{d}/prefill.h5").index
        p = p[p["kind"] == "prefill_attention"]
        print("## prefill kernel (prefill_paged_v0_flash_mma)\n")
        print("| batch | chunk | prefix | layout | format | head_dim | status | median us | TFLOP/s | max abs err |")
        print("|---|---|---|---|---|---|---|---|---|---|")
        for _, x in p.iterrows():
            print(f"| {x['batch']:.0f} | {x['chunk']:.0f} | {x['prefix']:.0f} | {x['layout']} | {x['kv_format']} | "
                  f"{x['head_dim']:.0f} | {x['status']} | {x.get('median_us', float('nan')):.1f} | "
                  f"{x.get('tflops', float('nan')):.1f} | {x.get('max_abs_err', float('nan')):.2e} |")
    except Exception as e:  # the file may be broken when the step failed
        print(f"prefill table: {e}")
try:
    c = load(f"{d}/calibration.h5").index
    c = c[c["kind"] == "serving_step"]
    ok = c[c["status"] == "ok"]
    print(f"\n## calibration: {len(ok)} of {len(c)} serving_step points ok")
    for _, x in c[c["status"] != "ok"].head(5).iterrows():
        print(f"  {x['status']}: {x['key']}: {x['reason']}")
    if len(ok):
        print(f"  graph steps: step_us {ok[ok.graph_step == 1].step_us.min():.0f}..{ok[ok.graph_step == 1].step_us.max():.0f}"
              f", eager steps: step_us {ok[ok.graph_step == 0].step_us.min():.0f}..{ok[ok.graph_step == 0].step_us.max():.0f}"
              f", validation max |dlogit| {ok.check_max_abs.max():.3g}")
except Exception as e:
    print(f"calibration table: {e}")
try:
    s = load(f"{d}/serving.h5").index
    s = s[s["kind"] == "serving"]
    for _, x in s[s["status"] != "ok"].iterrows():
        print(f"serving point {x['key']}: {x['status']}: {x['reason']}")
    for _, x in s[s["status"] == "ok"].iterrows():
        print(f"- {x['workload']} / {x['load']}: model: {x.get('model', '')}")
        break
except Exception as e:
    print(f"serving points: {e}")
    sys.exit(0)
print()
from analysis import serving_figures
serving_figures.main([f"{d}/serving.h5", "--out", f"{d}/figures", "--markdown"])
PY
} > "$dir/summary.md" 2>&1
note "done"
cat "$dir/summary.md"
exit $rc

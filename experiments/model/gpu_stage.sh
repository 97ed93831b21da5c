#!/usr/bin/env bash
# gpu_stage.sh: the real-model GPU stage (H100). Budget: about 3 minutes.
#   bash experiments/model/gpu_stage.sh BIN       (from the repository root; $OUT set)
# BIN holds the stripped binaries kvlab and gpu_tests. Needs build/model/gpu/ from
# experiments/model/gpu_stage_prepare.sh (carried: ~8 MB). Writes $OUT/real_model/:
#   gpu_tests.log        RealKv.* (append byte-exact and every decode version within tolerance on
#                        the real K/V/queries of SmolLM2 layers 0 and 29, every KV format) and the
#                        executor tests: StepEngine.* (synthetic) and RealModelExecutor.* (uploaded
#                        weights bit-equal to generated ones; the slice on the GPU vs the CPU
#                        reference, 64 teacher-forced positions per KV format)
#   model_gpu.h5         experiments/configs/real_model_gpu.ini: model_quality of the 2-layer slice
#                        for BF16 / FP8 (per tensor, per token) / NVFP4 KV, engine gpu and cpu
#   sweep.log, summary.txt
# Proves: the GPU executor runs real (uploaded) weights and its paged KV formats give the same
# dPPL / KL / top-1 table as the CPU reference on the same model and text; the kernels are exact
# (append) and within tolerance (decode) on real activations. It does not measure the full
# 30-layer model on the GPU (it does not fit the carry); the CPU rows of the main job do.
set -uo pipefail
BIN="${1:?usage: gpu_stage.sh BIN}"
OUT="${OUT:?OUT must be set}"
dir="$OUT/real_model"
mkdir -p "$dir"
export LD_LIBRARY_PATH="/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
start=$(date +%s)
for f in build/model/gpu/smollm2-slice.h5 build/model/gpu/kv_dump.h5; do
  [ -f "$f" ] || { echo "gpu_stage: $f missing (run experiments/model/gpu_stage_prepare.sh and carry build/model/gpu)"; exit 2; }
done
KVLAB_REAL_KV=build/model/gpu/kv_dump.h5 KVLAB_REAL_MODEL=build/model/gpu/smollm2-slice.h5 timeout 120 "$BIN/gpu_tests" \
  --gtest_filter='RealKv.*:RealModelExecutor.*:StepEngine.*' > "$dir/gpu_tests.log" 2>&1
tests_rc=$?
timeout 150 "$BIN/kvlab" sweep experiments/configs/real_model_gpu.ini --out "$dir/model_gpu.h5" \
  --progress none > "$dir/sweep.log" 2>&1
sweep_rc=$?
python3 - "$dir/model_gpu.h5" > "$dir/summary.txt" 2>&1 <<'PY'
import sys, h5py
f = h5py.File(sys.argv[1], "r"); ix = f["index"]
col = lambda c: [x.decode() if isinstance(x, bytes) else x for x in ix[c][()]]
rows = zip(col("text"), col("engine"), col("k_format"), col("status"), col("bytes_per_token"),
           col("ppl"), col("dppl_rel"), col("kld_mean"), col("top1_agree"), col("run_seconds"))
print("2-layer slice of SmolLM2-135M (its perplexity is not a language model's: compare engines)")
print(f"{'text':8} {'engine':6} {'K=V format':20} {'status':7} {'B/token':>7} {'ppl':>11} {'dPPL %':>7} {'KLD':>9} {'top1':>6} {'s':>5}")
for x, e, k, s, b, p, d, kl, t, sec in rows:
    print(f"{x:8} {e:6} {k:20} {s:7} {b:7.0f} {p:11.5g} {d:7.3f} {kl:9.2e} {t:6.3f} {sec:5.1f}")
PY
grep -E "^\[  (PASSED|FAILED|  SKIPPED)|tests ran" "$dir/gpu_tests.log" | tail -5
echo "gpu_tests rc=$tests_rc  sweep rc=$sweep_rc  $(( $(date +%s) - start )) s"
cat "$dir/summary.txt"

#!/usr/bin/env bash
# gpu_stage.sh: the Python package on a GPU machine (about 1-2 minutes on an H100).
#
#   bash experiments/python/gpu_stage.sh BIN [KVLAB_WHEELS]
#
# BIN: a folder with the stripped `kvlab` binary. KVLAB_WHEELS (default: BIN, then .whl/ of the
# checkout): the kvlab wheel built for that machine's Python (kvlab-*-cp312-abi3-*.whl, from
# `pip wheel . -w .whl` with Python 3.12) and, where pytest is not installed, its wheels
# (pytest, pluggy, iniconfig, packaging, pygments). Runs from the repository root; writes every log
# under $OUT/python/ (default OUT=./gpu-out); prints a summary table last. Steps:
#   1. pip install the wheel (no network: --no-index --no-deps) into a temporary folder;
#   2. the GPU test suite tests/python/test_kvlab_gpu.py (kvlab.ops vs kvlab.ref and vs
#      PyTorch's attention, append / quantize byte-exact, streams and CUDA graphs);
#   3. a one-line `python -c "import kvlab; ..."`: decode on torch tensors vs kvlab.ref;
#   4. the README's example with FlashInfer, when its wheels are in $WHEELS;
#   5. the two-timer cross-check (experiments/python/scripts/timing_crosscheck.py): C++
#      harness vs the Python peer timer on the same kernel (version auto, the same pick on
#      both sides) and shapes, with its figure.
# Every Python step imports the installed wheel (its folder first on PYTHONPATH; the
# scripts live in experiments/python/scripts/, a folder without the package sources, so
# `python path/script.py` cannot pick up the source tree's kvlab). Budget: at most 3 minutes
# (the step timeouts 60 + 25 + 45 + 55 s, plus the install).
set -uo pipefail
BIN="${1:?usage: gpu_stage.sh BIN [KVLAB_WHEELS]}"
BIN="$(cd "$BIN" && pwd)"
KVLAB_WHEELS="${2:-}"
OUT="${OUT:-$PWD/gpu-out}"
dir="$OUT/python"
mkdir -p "$dir"
export LD_LIBRARY_PATH="/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
py=python3
declare -a names results
step() {  # step NAME LOGFILE CMD...: run, record PASS/FAIL with the wall time
  local name="$1" log="$2"; shift 2
  local t0=$(date +%s)
  "$@" > "$log" 2>&1
  local rc=$?
  names+=("$name")
  results+=("$([ $rc = 0 ] && echo PASS || echo "FAIL (rc $rc)") $(( $(date +%s) - t0 )) s  $(tail -1 "$log" | cut -c1-90)")
  return $rc
}

# 1. the wheel
wheel=""
for d in "$KVLAB_WHEELS" "$BIN" "$PWD/.whl"; do
  [ -n "$d" ] || continue
  w=$(ls "$d"/kvlab-*.whl 2>/dev/null | head -1)
  if [ -n "$w" ]; then wheel="$w"; wheeldir="$d"; break; fi
done
# The installed packages live outside $OUT (tens of MB): only logs and results come back.
work="$(mktemp -d)"
site="$work/site"
install_wheel() {
  [ -n "$wheel" ] || { echo "no kvlab-*.whl in ${KVLAB_WHEELS:-} $BIN $PWD/.whl"; return 2; }
  echo "wheel: $wheel"
  local extra=()
  $py -c "import pytest" 2>/dev/null || extra=($(ls "$wheeldir"/{pytest,pluggy,iniconfig,packaging,pygments}-*.whl 2>/dev/null))
  $py -m pip install --no-index --no-deps --target "$site" "$wheel" "${extra[@]}" ||
    $py -m pip install --no-index --no-deps --break-system-packages --target "$site" "$wheel" "${extra[@]}"
  PYTHONPATH="$site" $py -c "import kvlab, kvlab._native as n; m = n.native(); print('installed', kvlab.__file__, 'cuda', m.has_cuda)"
}
step "pip install wheel" "$dir/install.log" install_wheel
export PYTHONPATH="$site:$PWD"

# 2. the GPU test suite
step "pytest GPU suite" "$dir/pytest.log" timeout 60 $py -m pytest -q -p no:cacheprovider -rs tests/python/test_kvlab_gpu.py

# 3. decode on torch tensors, compared with kvlab.ref (one command, as a user types it)
step "python -c decode" "$dir/oneliner.log" timeout 25 $py -c '
import numpy as np, torch, kvlab
from kvlab import formats
g = torch.Generator(device="cuda").manual_seed(7)
nb, bs, h, d, b = 64, 16, 8, 128, 4
k = torch.randn(nb, bs, h, d, generator=g, device="cuda").bfloat16(); v = torch.randn_like(k.float()).bfloat16()
table = torch.randperm(nb, generator=g, device="cuda").int().view(b, nb // b)
lens = torch.tensor([1, 100, 200, 256], dtype=torch.int32, device="cuda")
q = torch.randn(b, 4 * h, d, generator=g, device="cuda").bfloat16()
ws = torch.empty(kvlab.ops.decode_workspace_bytes(q, k, v, table, lens) + 1, dtype=torch.uint8, device="cuda")
out = kvlab.ops.decode_attention(q, k, v, table, lens, workspace=ws)
bits = lambda t: t.view(torch.int16).cpu().numpy()
ref = kvlab.ref.decode_attention(bits(q), bits(k), bits(v), table.cpu().numpy(), lens.cpu().numpy(), kv_format="bf16", q_dtype="bf16")
got = out.float().cpu().numpy(); want = formats.decode(ref, "bf16")
ok, why = kvlab.ref.check_close(got, want, "decode_attention", "bf16", "bf16")
ch = kvlab.ops.choose_decode(q, k, v, table, lens); dev = torch.cuda.get_device_name(0); verdict = "pass" if ok else why
print(f"auto: {ch.name} splits {ch.num_splits} ({ch.basis})")
print(f"kvlab.ops.decode_attention (auto: {ch.name}) on {dev}: max |gpu - ref| = {np.abs(got - want).max():.3g}, "
      f"bitwise equal {np.mean(got == want) * 100:.2f} % of outputs, kvlab tolerance table: {verdict}")
assert ok'

# 4. the README's example (kvlab and FlashInfer on one paged cache), when FlashInfer's wheels
#    are here ($WHEELS as the coordinator's machine provides them; its JIT takes ~20 s)
if [ -n "${WHEELS:-}" ] && ls "$WHEELS"/flashinfer*.whl > /dev/null 2>&1; then
  step "README example" "$dir/example.log" timeout 45 bash -c \
    "$py -m pip install --no-index --no-deps --target '$work/fi' $WHEELS/*.whl > '$dir/fi_install.log' 2>&1 ||
     $py -m pip install --no-index --no-deps --break-system-packages --target '$work/fi' $WHEELS/*.whl >> '$dir/fi_install.log' 2>&1;
     PYTHONPATH='$site:$work/fi:$PWD' $py experiments/python/scripts/example_flashinfer.py"
fi

# 5. two timers, one kernel
step "timing cross-check" "$dir/crosscheck.log" timeout 55 $py experiments/python/scripts/timing_crosscheck.py \
  --kvlab "$BIN/kvlab" --out "$dir/crosscheck"

echo
echo "== python stage summary (logs in $dir) =="
printf '| %-20s | %s |\n' "step" "result, wall time, last line of its log"
printf '|%s|%s|\n' "----------------------" "------------------------------------------"
for i in "${!names[@]}"; do printf '| %-20s | %s |\n' "${names[$i]}" "${results[$i]}"; done
[ -f "$dir/oneliner.log" ] && grep -E "^auto: " "$dir/oneliner.log"
[ -f "$dir/example.log" ] && grep -E "^(kvlab|flashinfer) " "$dir/example.log"
[ -f "$dir/crosscheck.log" ] && sed -n '/two timers/,$p' "$dir/crosscheck.log"
grep -E "passed|failed" "$dir/pytest.log" | tail -1

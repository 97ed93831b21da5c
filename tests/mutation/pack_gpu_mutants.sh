#!/usr/bin/env bash
# pack_gpu_mutants.sh BUILD BIN: builds every GPU mutant of tests/mutation/mutants.py on top of
# the configured build directory BUILD (recompiling only the patched translation units with
# nvcc, relinking gpu_tests), strips the binaries and packs them into BIN/gpu_mutants.tar.xz
# for tests/gpu_stage.sh. xz with a 256 MiB dictionary stores the near-identical binaries
# about as compactly as one. Build BUILD first (cmake --build BUILD); run from anywhere.
set -euo pipefail
build="${1:?usage: pack_gpu_mutants.sh BUILD BIN}"
bin="${2:?usage: pack_gpu_mutants.sh BUILD BIN}"
root="$(cd "$(dirname "$0")/../.." && pwd)"
build="$(cd "$build" && pwd)"
mkdir -p "$bin"
bin="$(cd "$bin" && pwd)"
stage="$(mktemp -d /tmp/kvlab-gpu-mutants-XXXX)"
trap 'rm -rf "$stage"' EXIT
python3 "$root/tests/mutation/run_mutants.py" --build "$build" --kind gpu \
  --pack "$stage/gpu_mutants" --jobs "${JOBS:-2}"
tar -C "$stage" -cf - gpu_mutants | xz -T1 --lzma2=preset=6,dict=256MiB > "$bin/gpu_mutants.tar.xz.tmp"
mv "$bin/gpu_mutants.tar.xz.tmp" "$bin/gpu_mutants.tar.xz"
echo "packed $(ls "$stage/gpu_mutants/mutants" | wc -l) mutants: $bin/gpu_mutants.tar.xz" \
  "($(du -h "$bin/gpu_mutants.tar.xz" | cut -f1))"

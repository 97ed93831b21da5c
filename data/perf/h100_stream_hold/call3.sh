#!/usr/bin/env bash
# Session 16 call 3: the stream a call is timed on (legacy default, a current non-blocking torch
# stream, the peer timer's own stream, gpu/bench's) for kvlab's decode and its peers.
set -u
START=$(date +%s)
B=$PWD/.device-carry/b; mkdir -p $B
python3 -c "import tarfile; tarfile.open('.device-carry/bin.tar.xz').extractall('$B')"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $OUT/device.txt
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export FLASHINFER_CUDA_ARCH_LIST=9.0a FLASHINFER_WORKSPACE_BASE=/tmp/kvlab_flashinfer
SITE=/tmp/s16site; rm -rf $SITE
python3 -m pip install -q --no-index --no-deps --no-compile --target $SITE $B/bin/kvlab-*.whl .device-carry/wheels/*.whl
export PYTHONPATH=$SITE:$PWD
MAX_JOBS=14 timeout 200 python3 experiments/peers/decode_peers.py prewarm > $OUT/prewarm.log 2>&1; echo "prewarm rc=$? at $(($(date +%s)-START)) s"
timeout 300 python3 .device-carry/stream_kinds.py > $OUT/stream_kinds.log 2>&1; echo "stream_kinds rc=$? at $(($(date +%s)-START)) s"
grep -E "^\[streams\]|device|Error|error" $OUT/stream_kinds.log | cut -c1-330

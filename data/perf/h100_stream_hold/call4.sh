#!/usr/bin/env bash
# Session 16 call 4: the spread of cuDNN SDPA's timings (allocation, timing, host time).
set -u
START=$(date +%s)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $OUT/device.txt
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
timeout 400 python3 .device-carry/sdpa_var.py > $OUT/sdpa_var.log 2>&1; echo "sdpa_var rc=$? at $(($(date +%s)-START)) s"
grep -E "^\[sdpa_var\]|device|Error" $OUT/sdpa_var.log | cut -c1-330

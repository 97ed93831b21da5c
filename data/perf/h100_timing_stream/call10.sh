#!/usr/bin/env bash
# Session 15 call 10: the C++ harness inside the torch + CuPy process next to the Python timer,
# and alone in a plain Python process (inproc_probe.py, libharness_probe.so from harness_so.cu).
set -u
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $OUT/device.txt
timeout 120 python3 data/perf/h100_timing_stream/inproc_probe.py torch LIBHARNESS_PROBE.so > $OUT/inproc_torch.log 2>&1; echo "torch rc=$?"
timeout 60 python3 data/perf/h100_timing_stream/inproc_probe.py plain LIBHARNESS_PROBE.so > $OUT/inproc_plain.log 2>&1; echo "plain rc=$?"
cat $OUT/inproc_torch.log $OUT/inproc_plain.log | tail -20

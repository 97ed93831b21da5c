#!/usr/bin/env bash
# Session 16 calls 1 and 6: the fair run with the cross-check timed in one process (kvlab wheel in BIN);
# call 1 with the binaries of fca9962's timers (unheld), call 6 with a3cd968's (the stream held).
# and cuDNN SDPA's kernels recorded per shape (decode_peers.py --kernels sdpa_cudnn, the default).
set -u
B=$PWD/.device-carry/b; mkdir -p $B
python3 -c "import tarfile; tarfile.open('.device-carry/bin.tar.xz').extractall('$B')"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $OUT/device.txt
R=$OUT/run; mkdir -p $R
OUT=$R STAGE_S=530 WHEELS=$PWD/.device-carry/wheels experiments/peers/h100_perf_run.sh $B/bin > $R/stage_stdout.log 2>&1
echo "stage rc=$?"
grep -E "^\[stage|crosscheck\]|WARNING|PASSED|FAILED|kernels recorded" $R/stage_stdout.log $R/fair_timing/flush_test.log $R/fair_timing/crosscheck.log $R/fair_timing/peers.log | cut -c1-400 | head -60
cd $OUT && tar cJf call.tar.xz run && rm -rf run && ls -la $OUT

#!/usr/bin/env bash
# Session 15 call 3: the fair run of main 99b20a9+ (the timing harness on one stream per process;
# version auto's table from four calibration runs, picks unchanged).
set -u
B=$PWD/.device-carry/b; mkdir -p $B
python3 -c "import tarfile; tarfile.open('.device-carry/bin.tar.xz').extractall('$B')"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $OUT/device.txt
R=$OUT/run; mkdir -p $R
OUT=$R STAGE_S=525 WHEELS=$PWD/.device-carry/wheels experiments/peers/h100_perf_run.sh $B/bin > $R/stage_stdout.log 2>&1
echo "stage rc=$?"
grep -E "^\[stage|crosscheck\]|\[repeat\]|PASSED|FAILED" $R/stage_stdout.log $R/fair_timing/flush_test.log | cut -c1-300 | head -40
cd $OUT && tar cJf call.tar.xz run && rm -rf run && ls -la $OUT

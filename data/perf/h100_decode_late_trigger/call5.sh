#!/usr/bin/env bash
# Session 14 call 5: the fair run of main 9910ab5 (v4 / v5 / v7 / v14 trigger the merge late; auto on session 14 call 4's calibration; v16 in the registry).
set -u
B=$PWD/.device-carry/b; mkdir -p $B
python3 -c "import tarfile; tarfile.open('.device-carry/bin.tar.xz').extractall('$B')"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $OUT/device.txt
R=$OUT/run; mkdir -p $R
OUT=$R STAGE_S=450 WHEELS=$PWD/.device-carry/wheels experiments/peers/h100_perf_run.sh $B/bin > $R/stage_stdout.log 2>&1
echo "stage rc=$?"
tail -60 $R/stage_stdout.log
cd $OUT && tar cJf call.tar.xz run && rm -rf run && ls -la $OUT

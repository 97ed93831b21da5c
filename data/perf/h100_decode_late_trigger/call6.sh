#!/usr/bin/env bash
# Session 14 call 6: the decode-step sweep of the fair run of main 9910ab5 (call 5), cut by the
# stage's budget at 150 of 182 points, resumed with the same binaries.
set -u
START=$(date +%s)
B=$PWD/.device-carry/b; mkdir -p $B
python3 -c "import tarfile; tarfile.open('.device-carry/bin.tar.xz').extractall('$B')"
K=$B/bin/kvlab
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $OUT/device.txt
W=$OUT/w; mkdir -p $W
cp .device-carry/resume/step_sweep.h5 $W/step_sweep.h5
timeout 300 $K sweep experiments/configs/decode_step.ini --resume --out $W/step_sweep.h5 --progress none > $W/step_sweep_resume.log 2>&1
echo "step_resume rc=$? at $(($(date +%s)-START)) s"; tail -4 $W/step_sweep_resume.log
cd $OUT && tar cJf call.tar.xz w && rm -rf w && ls -la $OUT

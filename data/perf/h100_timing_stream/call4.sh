#!/usr/bin/env bash
# Session 15 call 4: call 3's decode-step sweep (cut by the stage budget at 162 of 182 points)
# resumed with the same binaries (main 8c9989a).
set -u
START=$(date +%s)
B=$PWD/.device-carry/b; mkdir -p $B
python3 -c "import tarfile; tarfile.open('.device-carry/bin.tar.xz').extractall('$B')"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $OUT/device.txt
cp .final/step_sweep.h5 $OUT/step_sweep.h5
timeout 400 $B/bin/kvlab sweep experiments/configs/decode_step.ini --resume --out $OUT/step_sweep.h5 --progress plain > $OUT/step_sweep_resume.log 2>&1
echo "resume rc=$? at $(($(date +%s)-START)) s"; tail -12 $OUT/step_sweep_resume.log | cut -c1-200

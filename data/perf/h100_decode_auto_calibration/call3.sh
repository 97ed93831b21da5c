#!/usr/bin/env bash
# Session 12 call 3: the side-by-side calibration of version auto's table (auto, recording its
# pick, against v14 at its plan; experiments/configs/decode_auto_calibration.ini) twice, then
# v14's two remaining planted bugs.
set -u
START=$(date +%s)
B=$PWD/.device-carry/b; mkdir -p $B
python3 -c "import tarfile; tarfile.open('.device-carry/bin.tar.xz').extractall('$B')"
python3 -c "import tarfile; tarfile.open('.device-carry/mut.tar.xz').extractall('$B')"
K=$B/bin/kvlab; T=$B/bin/gpu_tests
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $OUT/device.txt
W=$OUT/w; mkdir -p $W
for r in 1 2; do
  timeout 200 $K sweep experiments/configs/decode_auto_calibration.ini --out $W/cal_$r.h5 --progress none > $W/cal_$r.log 2>&1
  echo "calibration $r rc=$? at $(($(date +%s)-START)) s"; tail -4 $W/cal_$r.log
done
timeout 120 python3 tests/mutation/run_mutants.py --run-packed $B/mut --bin $B/bin --logs $W/mut --json $W/mut/result.json > $W/mut.log 2>&1; echo "mutants rc=$? at $(($(date +%s)-START)) s"; tail -6 $W/mut.log
cd $OUT && tar cJf call.tar.xz w && rm -rf w; ls -la $OUT

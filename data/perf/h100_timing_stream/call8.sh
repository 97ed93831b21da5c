#!/usr/bin/env bash
# Session 15 call 8: the flush buffer's place relative to the timed buffer (flush_place_probe.cu).
set -u
B=$PWD/.device-carry/b; mkdir -p $B
python3 -c "import tarfile; tarfile.open('.device-carry/bin.tar.xz').extractall('$B')"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $OUT/device.txt
timeout 200 $B/bin/flush_place_probe > $OUT/flush_place_probe.log 2>&1; echo "rc=$?"
cat $OUT/flush_place_probe.log

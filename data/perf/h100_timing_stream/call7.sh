#!/usr/bin/env bash
# Session 15 call 7: the launch path of the cold 1 MiB read in one C++ process (launch_probe.cu):
# the runtime's <<<>>>, cuLaunchKernel of an nvcc cubin, cuLaunchKernel of an NVRTC cubin.
set -u
B=$PWD/.device-carry/b; mkdir -p $B
python3 -c "import tarfile; tarfile.open('.device-carry/bin.tar.xz').extractall('$B')"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $OUT/device.txt
timeout 120 $B/bin/launch_probe FLUSH_NVCC.cubin FLUSH_NVRTC.cubin > $OUT/launch_probe.log 2>&1; echo "rc=$?"
cat $OUT/launch_probe.log

#!/usr/bin/env bash
# Session 18 call 5: data/perf/h100_repeated_runs/kernel_gap.py --shapes at the K1 points that the read
# bound puts on kvlab's kernel: kernel by kernel inside the timed loop, kvlab auto against cuDNN SDPA. Binaries
# and wheel of main 9f2e7ab, as in calls 1-4.
set -u
B=$PWD/.device-carry/b; mkdir -p $B
[[ -x $B/bin/kvlab ]] || python3 -c "import tarfile; tarfile.open('.device-carry/bin.tar.xz').extractall('$B')"
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
R=$OUT/run; mkdir -p $R
nvidia-smi --query-gpu=name,driver_version,uuid --format=csv,noheader | tee $R/device.txt
rm -rf /tmp/kvlab_pkg_site
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/kvlab_pkg_site $B/bin/kvlab-*-abi3-*.whl > $R/pip.log 2>&1 || cat $R/pip.log
PYTHONPATH=/tmp/kvlab_pkg_site timeout -k 10 300 python3 data/perf/h100_repeated_runs/kernel_gap.py $R --shapes 1x131072,4x32768,256x512,64x2048,16x2048,8x8192 > $R/kernel_gap.log 2>&1
echo "kernel_gap rc=$?"
cat $R/kernel_gap.log | cut -c1-600 | tail -60
cd $OUT && tar cJf call.tar.xz run && rm -rf run && ls -la $OUT

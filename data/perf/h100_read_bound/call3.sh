#!/usr/bin/env bash
# Session 18 call 3: k4k5_cluster.ini three times (v11's cluster merge against v10's merge kernel
# at FP8 / NVFP4 16 x 8k, with version auto and BF16 auto), the binaries of calls 1-2.
set -u
B=$PWD/.device-carry/b; mkdir -p $B
[[ -x $B/bin/kvlab ]] || python3 -c "import tarfile; tarfile.open('.device-carry/bin.tar.xz').extractall('$B')"
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
R=$OUT/run; mkdir -p $R
nvidia-smi --query-gpu=name,driver_version,uuid --format=csv,noheader | tee $R/device.txt
for k in 1 2 3; do
  T0=$(date +%s)
  timeout -k 10 150 $B/bin/kvlab sweep data/perf/h100_read_bound/k4k5_cluster.ini --out $R/k4k5_cluster_$k.h5 \
    --progress plain > $R/k4k5_cluster_$k.log 2>&1
  echo "sweep $k rc=$? $(( $(date +%s) - T0 )) s"
done
grep -h "FAILED\|failed\|error" $R/*.log | head -5
cd $OUT && tar cJf call.tar.xz run && rm -rf run && ls -la $OUT

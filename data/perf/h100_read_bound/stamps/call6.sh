#!/usr/bin/env bash
# Session 18 call 6: stamps.ini through main's kvlab (timed medians) and through a scratch build of
# main 3490344 with stamps_main.patch (per-block stamps), alternated twice; then
# gpu/attention/stamps_table.py of each stamps file.
set -u
B=$PWD/.device-carry/b; mkdir -p $B
[[ -x $B/bin/kvlab ]] || python3 -c "import tarfile; tarfile.open('.device-carry/bin.tar.xz').extractall('$B')"
xz -dc .device-carry/stamps_kvlab.xz > /tmp/kvlab_stamps && chmod +x /tmp/kvlab_stamps
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
R=$OUT/run; mkdir -p $R
nvidia-smi --query-gpu=name,driver_version,uuid --format=csv,noheader | tee $R/device.txt
CFG=data/perf/h100_read_bound/stamps/stamps.ini
for k in 1 2; do
  timeout -k 10 100 $B/bin/kvlab sweep $CFG --out $R/timed_main_$k.h5 --progress none > $R/timed_main_$k.log 2>&1
  echo "main $k rc=$?"
  KVLAB_SCRATCH_STAMPS=$R/stamps_$k.csv timeout -k 10 100 /tmp/kvlab_stamps sweep $CFG --out $R/stamped_$k.h5 \
    --progress none > $R/stamped_$k.log 2>&1
  echo "stamped $k rc=$?"
done
for k in 1 2; do python3 gpu/attention/stamps_table.py $R/stamps_$k.csv 2>&1 | cut -c1-250; done
xz -9 -T4 $R/stamps_*.csv
cd $OUT && tar cf call.tar run && rm -rf run && ls -la $OUT

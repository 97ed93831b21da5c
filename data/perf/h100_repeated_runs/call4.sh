#!/usr/bin/env bash
# Session 17 call 4: ncu of version auto (NHD, its plan) on shuffled and sequential pages and of
# cuDNN SDPA at the short K1 points where kvlab trails cuDNN on sequential pages too
# (NCU_SET=fixed_cost). Binaries of main 9f2e7ab, as in calls 1-3.
set -u
B=$PWD/.device-carry/b; mkdir -p $B
[[ -x $B/bin/kvlab ]] || python3 -c "import tarfile; tarfile.open('.device-carry/bin.tar.xz').extractall('$B')"
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
R=$OUT/run; mkdir -p $R
NCU_SET=fixed_cost OUT=$R experiments/peers/ncu_compare_stage.sh $B/bin > $R/ncu_stage.log 2>&1
echo "ncu stage rc=$?"
cat $R/ncu_stage.log | cut -c1-200
cd $OUT && tar cJf call.tar.xz run && rm -rf run && ls -la $OUT

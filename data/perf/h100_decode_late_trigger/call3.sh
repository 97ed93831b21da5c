#!/usr/bin/env bash
# Session 14 call 3: main after the split merge's dependent launch moved to the end of each
# block's stream in v4 / v5 / v7 / v14 (TUNING.md step 38) and every split merge's last step made
# one function (mma::merge_unit_outputs). (a) The trigger's A/B: main b27b44a's kvlab (`main`)
# against this build (`late`), alternated twice on decode_late_trigger_ab.ini. (b) v16's planted
# bugs. (c) The whole gpu_tests binary. (d) memcheck on the merges' suites.
set -u
START=$(date +%s)
B=$PWD/.device-carry/b; mkdir -p $B
python3 -c "import tarfile; tarfile.open('.device-carry/all.tar.xz').extractall('$B')"
T=$B/bin/gpu_tests; K=$B/bin/kvlab; KO=$B/old/kvlab
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $OUT/device.txt
W=$OUT/w; mkdir -p $W
t() { echo "$1 rc=$2 at $(($(date +%s)-START)) s"; }
C=experiments/configs/decode_late_trigger_ab.ini
for r in 1 2; do
  timeout 60 $KO sweep $C --out $W/main_$r.h5 --progress none > $W/main_$r.log 2>&1; t main_$r $?
  timeout 60 $K sweep $C --out $W/late_$r.h5 --progress none > $W/late_$r.log 2>&1; t late_$r $?
done
timeout 150 python3 tests/mutation/run_mutants.py --run-packed $B/mut --bin $B/bin --logs $W/mutants --no-baseline > $W/mutants.log 2>&1; t mutants $?; tail -6 $W/mutants.log
timeout 330 $T > $W/gpu_tests_all.log 2>&1; t gpu_tests_all $?
grep -E "^\[  (PASSED|FAILED) |^\[  FAILED  \]|tests ran" $W/gpu_tests_all.log | tail -8; grep -c "^\[  SKIPPED \]" $W/gpu_tests_all.log
LEFT=$((585 - $(date +%s) + START))
if [ $LEFT -gt 30 ]; then
  timeout $LEFT compute-sanitizer --tool memcheck $T --gtest_filter='DecodeV12/*.LastBlock*:DecodeV11/*.ClusterMergeAtForced*:DecodeV6.*:DecodeV10/*.ForcedSplits*' > $W/memcheck.log 2>&1; t memcheck $?
  grep -E "PASSED|FAILED|SUMMARY" $W/memcheck.log | tail -3
fi
xz -9 $W/gpu_tests_all.log
cd $OUT && tar cJf call.tar.xz w && rm -rf w && ls -la $OUT

#!/usr/bin/env bash
# Session 13 call 1: v15 (stream-K over v10's block body): its suites, the every-version decode
# suites (v6's merge moved to stream_k_split_merge.cuh), the A/B against v10 and auto twice,
# v15's blocks per SM, two planted bugs.
set -u
START=$(date +%s)
B=$PWD/.device-carry/b; mkdir -p $B
python3 -c "import tarfile; tarfile.open('.device-carry/bin.tar.xz').extractall('$B')"
[ -f .device-carry/mut.tar.xz ] && python3 -c "import tarfile; tarfile.open('.device-carry/mut.tar.xz').extractall('$B')"
K=$B/bin/kvlab; T=$B/bin/gpu_tests
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $OUT/device.txt
W=$OUT/w; mkdir -p $W
finish() { cd $OUT && tar cJf call.tar.xz w && rm -rf w; ls -la $OUT; }
t() { echo "$1 rc=$2 at $(($(date +%s)-START)) s"; }
timeout 120 $T --gtest_filter='DecodeV15/*:DecodeRegistry.*:DecodeV6.*' > $W/v15_tests.log 2>&1; t v15_tests $?
grep -E "^\[  (PASSED|FAILED) |^\[  FAILED  \]|SKIPPED \] [0-9]" $W/v15_tests.log | tail -15
grep -E "Failure|error:|Expected|Which is" $W/v15_tests.log | head -20
for r in 1 2; do
  timeout 170 $K sweep experiments/configs/decode_stream_k_ab.ini --out $W/ab_$r.h5 --progress none > $W/ab_$r.log 2>&1; t ab_$r $?
done
timeout 90 $K sweep experiments/configs/decode_stream_k_ab.ini --only bf16,fp8 --axis batch=16,64 --axis context=8192 --axis layout=nhd --axis version=v15_mma_decode_stream_k --axis num_splits=1,2,3,4 --out $W/per_sm.h5 --progress none > $W/per_sm.log 2>&1; t per_sm $?
timeout 90 $T --gtest_filter='Small/DecodeSmall.*:Curated/DecodeCurated.*:DecodeEdge.*:DecodeBadInput.*:DecodeV10/*.EveryGeometry*:DecodeV14/*.KvHeadCounts*' > $W/gpu_tests.log 2>&1; t gpu_tests $?
grep -E "^\[  (PASSED|FAILED) |^\[  FAILED  \]" $W/gpu_tests.log | tail -12
if [ -d $B/mut ]; then timeout 100 python3 tests/mutation/run_mutants.py --run-packed $B/mut --bin $B/bin --logs $W/mut --json $W/mut/result.json --no-baseline > $W/mut.log 2>&1; t mutants $?; tail -4 $W/mut.log; fi
finish

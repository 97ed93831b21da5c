#!/usr/bin/env bash
# Session 14 call 1: v16_mma_decode_shared_tiles (v10 whose KV splits share their item's tiles).
# Correctness first (v16's suites, the registry), then the A/B against v10 at the plan and at
# the same forced splits twice (experiments/configs/decode_shared_tiles_ab.ini), then the
# bulk family's suites (their SASS is unchanged: cuobjdump) and compute-sanitizer on v16.
set -u
START=$(date +%s)
B=$PWD/.device-carry/b; mkdir -p $B
python3 -c "import tarfile; tarfile.open('.device-carry/bin.tar.xz').extractall('$B')"
T=$B/bin/gpu_tests; K=$B/bin/kvlab
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $OUT/device.txt
W=$OUT/w; mkdir -p $W
t() { echo "$1 rc=$2 at $(($(date +%s)-START)) s"; }
summ() { grep -E "^\[  (PASSED|FAILED) |^\[  FAILED  \]|SKIPPED \] [0-9]" $1 | tail -8; }
san() { timeout $3 compute-sanitizer --tool $2 $4 $T --gtest_filter="$5" > $W/$1.log 2>&1; t $1 $?; grep -E "PASSED|FAILED|SUMMARY" $W/$1.log | tail -2; }
timeout 150 $T --gtest_filter='DecodeV16/*:DecodeRegistry.*' > $W/v16.log 2>&1; t v16 $?; summ $W/v16.log
for r in 1 2; do
  timeout 130 $K sweep experiments/configs/decode_shared_tiles_ab.ini --out $W/ab_$r.h5 --progress none > $W/ab_$r.log 2>&1; t ab_$r $?
  tail -2 $W/ab_$r.log
done
timeout 120 $T --gtest_filter='Small/*:Curated/*:DecodeEdge*:DecodeBadInput.*' > $W/small.log 2>&1; t small $?; summ $W/small.log
san memcheck_v16 memcheck 60 "" 'DecodeV16/*.SharedTilesWorkspace*'
san racecheck_v16 racecheck 90 "" 'DecodeV16/*.SharedTilesWorkspace*:DecodeV16/*.BadTable*'
cd $OUT && tar cJf call.tar.xz w && rm -rf w && ls -la $OUT

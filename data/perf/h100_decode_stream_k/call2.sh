#!/usr/bin/env bash
# Session 13 call 2: v15's suites after the V4SplitDest refactor (every other kernel's SASS
# unchanged), the sanitizers on v15, its third planted bug; the dependent-launch trigger at the
# end of each block's stream (scratch build `late`, data/perf/h100_decode_stream_k/
# late_trigger.patch) against main's trigger at the block's start, alternated twice.
set -u
START=$(date +%s)
B=$PWD/.device-carry/b; mkdir -p $B
python3 -c "import tarfile; tarfile.open('.device-carry/bin.tar.xz').extractall('$B')"
[ -f .device-carry/mut.tar.xz ] && python3 -c "import tarfile; tarfile.open('.device-carry/mut.tar.xz').extractall('$B')"
K=$B/bin/kvlab; T=$B/bin/gpu_tests; KL=$B/bin/kvlab_late
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $OUT/device.txt
W=$OUT/w; mkdir -p $W/late
finish() { cd $OUT && tar cJf call.tar.xz w && rm -rf w; ls -la $OUT; }
t() { echo "$1 rc=$2 at $(($(date +%s)-START)) s"; }
timeout 100 $T --gtest_filter='DecodeV15/*:DecodeRegistry.*:DecodeV6.*:DecodeBadInput.*:DecodeEdge.*' > $W/v15_tests.log 2>&1; t v15_tests $?
grep -E "^\[  (PASSED|FAILED) |^\[  FAILED  \]" $W/v15_tests.log | tail -8
for r in 1 2; do
  for b in main late; do
    [ $b = main ] && X=$K || X=$KL
    timeout 60 $X sweep experiments/configs/decode_stream_k_ab.ini --only bf16,fp8,nvfp4 --axis layout=hnd --axis batch=1,16,64 --axis context=8192,32768 --axis version=v10_mma_decode_tma_swizzle,v15_mma_decode_stream_k --out $W/late/${b}_$r.h5 --progress none > $W/late/${b}_$r.log 2>&1; t ${b}_$r $?
  done
done
if [ -d $B/mut ]; then timeout 60 python3 tests/mutation/run_mutants.py --run-packed $B/mut --bin $B/bin --logs $W/mut --json $W/mut/result.json --no-baseline > $W/mut.log 2>&1; t mutants $?; tail -3 $W/mut.log; fi
F='DecodeV15/*.StreamKRanges*:DecodeV15/*.BadTable*'
timeout 100 compute-sanitizer --tool memcheck $T --gtest_filter="$F" > $W/memcheck.log 2>&1; t memcheck $?; grep -E "PASSED|FAILED|SUMMARY" $W/memcheck.log | tail -3
timeout 80 compute-sanitizer --tool racecheck $T --gtest_filter='DecodeV15/*.BadTable*:DecodeV15/*.KvHeadCounts*' > $W/racecheck.log 2>&1; t racecheck $?; grep -E "PASSED|FAILED|SUMMARY" $W/racecheck.log | tail -3
timeout 60 compute-sanitizer --tool synccheck --num-cuda-barriers 65536 $T --gtest_filter='DecodeV15/*.BadTable*:DecodeV15/*.KvHeadCounts*' > $W/synccheck.log 2>&1; t synccheck $?; grep -E "PASSED|FAILED|SUMMARY" $W/synccheck.log | tail -3
finish

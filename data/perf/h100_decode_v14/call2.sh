#!/usr/bin/env bash
# Session 12 call 2: v14's planted bugs, synccheck (barriers tracked), v14's suites and the
# registry test after the count fix; then FP8 16 x 8k for v10 / v13 / v14 at block sizes
# 16-128 and on sequential pages, side by side, twice.
set -u
START=$(date +%s)
B=$PWD/.device-carry/b; mkdir -p $B
python3 -c "import tarfile; tarfile.open('.device-carry/bin.tar.xz').extractall('$B')"
python3 -c "import tarfile; tarfile.open('.device-carry/mut.tar.xz').extractall('$B')"
K=$B/bin/kvlab; T=$B/bin/gpu_tests
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $OUT/device.txt
W=$OUT/w; mkdir -p $W
timeout 100 $T --gtest_filter='DecodeV14/*:DecodeRegistry.*' > $W/v14_tests.log 2>&1; echo "v14 tests rc=$? at $(($(date +%s)-START)) s"
grep -E "^\[  (PASSED|FAILED) |^\[  FAILED  \]|SKIPPED \] [0-9]" $W/v14_tests.log | tail -8
timeout 150 python3 tests/mutation/run_mutants.py --run-packed $B/mut --bin $B/bin --logs $W/mut --json $W/mut/result.json > $W/mut.log 2>&1; echo "mutants rc=$? at $(($(date +%s)-START)) s"; tail -6 $W/mut.log
timeout 90 compute-sanitizer --tool synccheck --num-cuda-barriers 65536 $T --gtest_filter='DecodeV14/*.BadTable*:DecodeV14/*.KvHeadCounts*:Small/DecodeSmall.*/fp8_e4m3_nhd' > $W/synccheck.log 2>&1; echo "synccheck rc=$? at $(($(date +%s)-START)) s"; grep -E "PASSED|FAILED|SUMMARY" $W/synccheck.log | tail -3
V=--axis\ version=v10_mma_decode_tma_swizzle,v13_mma_decode_eight_warps,v14_mma_decode_page_heads
for r in 1 2; do
  timeout 60 $K sweep experiments/configs/decode_v10_ab.ini --only fp8 --axis batch=16 --axis context=8192 $V --axis layout=nhd --axis block_size=16,32,64,128 --out $W/pages_$r.h5 --progress none > $W/pages_$r.log 2>&1
  timeout 60 $K sweep experiments/configs/decode_v10_ab.ini --only fp8 --axis batch=16 --axis context=8192 $V --axis layout=nhd --axis page_order=sequential --out $W/seq_$r.h5 --progress none > $W/seq_$r.log 2>&1
  echo "pages $r at $(($(date +%s)-START)) s"
done
cd $OUT && tar cJf call.tar.xz w && rm -rf w; ls -la $OUT

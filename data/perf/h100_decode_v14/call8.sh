#!/usr/bin/env bash
# Session 12 call 8: after v14's plan went through v4_family_plan (heads_per_block, tile_warps):
# v14's suites, the every-version decode suites, and v14 at FP8 16 x 8192 (its plan's time).
set -u
START=$(date +%s)
B=$PWD/.device-carry/b; mkdir -p $B
python3 -c "import tarfile; tarfile.open('.device-carry/bin.tar.xz').extractall('$B')"
T=$B/bin/gpu_tests; K=$B/bin/kvlab
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $OUT/device.txt
W=$OUT/w; mkdir -p $W
timeout 150 $T --gtest_filter='DecodeV14/*:DecodeRegistry.*:Small/DecodeSmall.*:Curated/DecodeCurated.*:DecodeEdge.*:DecodeBadInput.*' > $W/gpu_tests.log 2>&1; echo "gpu_tests rc=$? at $(($(date +%s)-START)) s"
grep -E "^\[  (PASSED|FAILED) |^\[  FAILED  \]|SKIPPED \] [0-9]" $W/gpu_tests.log | tail -8
timeout 40 $K sweep experiments/configs/decode_v10_ab.ini --only fp8 --axis batch=16 --axis context=8192 --axis version=v14_mma_decode_page_heads --out $W/v14_fp8.h5 --progress none > $W/v14_fp8.log 2>&1; echo "sweep rc=$?"
cd $OUT && tar cJf call.tar.xz w && rm -rf w; ls -la $OUT

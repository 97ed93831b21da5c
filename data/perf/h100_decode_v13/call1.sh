#!/usr/bin/env bash
# Session 11 call 1: v13 (8 warps per block) against v10 in the same sweeps (plans and forced
# splits), then v13's GPU suites, the registry-wide decode suites, and the sanitizers.
set -u
START=$(date +%s)
B=$PWD/.device-carry/b; mkdir -p $B
python3 -c "import tarfile; tarfile.open('.device-carry/bin.tar.xz').extractall('$B')"
K=$B/bin/kvlab; T=$B/bin/gpu_tests
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $OUT/device.txt
W=$OUT/w; mkdir -p $W
V=--axis\ version=v10_mma_decode_tma_swizzle,v13_mma_decode_eight_warps
for r in 1 2; do
  $K sweep experiments/configs/decode_v10_ab.ini $V --out $W/ab_bf16fp8_$r.h5 --progress none > $W/ab_bf16fp8_$r.log 2>&1
  $K sweep experiments/configs/decode_nvfp4_v10_ab.ini $V --axis layout=hnd,nhd --out $W/ab_nvfp4_$r.h5 --progress none > $W/ab_nvfp4_$r.log 2>&1
  echo "ab $r at $(($(date +%s)-START)) s"
done
$K sweep experiments/configs/decode_v10_ab.ini --only fp8 --axis batch=16 --axis context=8192 $V --axis num_splits=1,2,3 --out $W/splits_fp8.h5 --progress none > $W/splits_fp8.log 2>&1
$K sweep experiments/configs/decode_nvfp4_v10_ab.ini --axis layout=hnd,nhd --axis batch=16 --axis context=8192 $V --axis num_splits=1,2,3,4 --out $W/splits_nvfp4.h5 --progress none > $W/splits_nvfp4.log 2>&1
$K sweep experiments/configs/decode_v10_ab.ini --only bf16 --axis batch=16 --axis context=8192,32768 $V --axis num_splits=1,2 --out $W/splits_bf16.h5 --progress none > $W/splits_bf16.log 2>&1
echo "splits at $(($(date +%s)-START)) s"
timeout 200 $T --gtest_filter='DecodeV13/*:DecodeV10/*:DecodeRegistry.*:Small/DecodeSmall.*:Curated/DecodeCurated.*:DecodeEdge.*:DecodeBadInput.*:BenchKinds.*' > $W/gpu_tests.log 2>&1; echo "gpu_tests rc=$? at $(($(date +%s)-START)) s"
grep -E "^\[  (PASSED|FAILED) |tests ran|^\[  FAILED  \]" $W/gpu_tests.log | tail -12; grep -c "^\[  SKIPPED \]" $W/gpu_tests.log
F='DecodeV13/*.BadTable*:DecodeV13/*.ForcedSplits*:Small/DecodeSmall.*/bf16_hnd:Small/DecodeSmall.*/fp8_e4m3_hnd:Small/DecodeSmall.*/bf16_nhd:Small/DecodeSmall.*/nvfp4_hnd'
timeout 100 compute-sanitizer --tool memcheck $T --gtest_filter="$F" > $W/memcheck.log 2>&1; echo "memcheck rc=$? at $(($(date +%s)-START)) s"; grep -E "PASSED|FAILED|SUMMARY" $W/memcheck.log | tail -3
timeout 60 compute-sanitizer --tool racecheck $T --gtest_filter='DecodeV13/*.BadTable*:Small/DecodeSmall.*/fp8_e4m3_hnd:Small/DecodeSmall.*/bf16_nhd' > $W/racecheck.log 2>&1; echo "racecheck rc=$? at $(($(date +%s)-START)) s"; grep -E "PASSED|FAILED|SUMMARY" $W/racecheck.log | tail -3
timeout 40 compute-sanitizer --tool synccheck $T --gtest_filter='DecodeV13/*.BadTable*:Small/DecodeSmall.*/fp8_e4m3_hnd' > $W/synccheck.log 2>&1; echo "synccheck rc=$? at $(($(date +%s)-START)) s"; grep -E "PASSED|FAILED|SUMMARY" $W/synccheck.log | tail -3
cd $OUT && tar cJf call.tar.xz w && rm -rf w && ls -la $OUT

#!/usr/bin/env bash
# Session 11 call 3: v6's stage barriers with cp.async.mbarrier.arrive.noinc: v6's suites and
# the every-version small / curated suites, then synccheck, memcheck and racecheck over them.
set -u
START=$(date +%s)
B=$PWD/.device-carry/b; mkdir -p $B
python3 -c "import tarfile; tarfile.open('.device-carry/bin.tar.xz').extractall('$B')"
T=$B/bin/gpu_tests
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $OUT/device.txt
W=$OUT/w; mkdir -p $W
F='DecodeV6.*:Small/DecodeSmall.*:Curated/DecodeCurated.*:DecodeEdge.*'
timeout 150 $T --gtest_filter="$F" > $W/gpu_tests.log 2>&1; echo "gpu_tests rc=$? at $(($(date +%s)-START)) s"; grep -E "^\[  (PASSED|FAILED) |^\[  FAILED  \]" $W/gpu_tests.log | tail -6
timeout 150 compute-sanitizer --tool synccheck $T --gtest_filter='DecodeV6.*:Small/DecodeSmall.*' > $W/synccheck.log 2>&1; echo "synccheck rc=$? at $(($(date +%s)-START)) s"; grep -E "PASSED|FAILED|SUMMARY" $W/synccheck.log | tail -3
timeout 100 compute-sanitizer --tool memcheck $T --gtest_filter='DecodeV6.*:Small/DecodeSmall.*/fp8_e4m3_hnd:Small/DecodeSmall.*/bf16_nhd' > $W/memcheck.log 2>&1; echo "memcheck rc=$? at $(($(date +%s)-START)) s"; grep -E "PASSED|FAILED|SUMMARY" $W/memcheck.log | tail -3
timeout 100 compute-sanitizer --tool racecheck $T --gtest_filter='DecodeV6.SmokeEveryFormat:DecodeV6.FewerTilesThanBlocks:Small/DecodeSmall.*/fp8_e4m3_hnd' > $W/racecheck.log 2>&1; echo "racecheck rc=$? at $(($(date +%s)-START)) s"; grep -E "PASSED|FAILED|SUMMARY" $W/racecheck.log | tail -3
cd $OUT && tar cJf call.tar.xz w && rm -rf w && ls -la $OUT

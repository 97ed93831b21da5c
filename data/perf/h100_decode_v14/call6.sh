#!/usr/bin/env bash
# Session 12 call 6: main's final binaries after v4_combine_and_store (v14's epilogue SASS
# changed by register names): v14's suites, the every-version decode suites, memcheck on v14.
set -u
START=$(date +%s)
B=$PWD/.device-carry/b; mkdir -p $B
python3 -c "import tarfile; tarfile.open('.device-carry/bin.tar.xz').extractall('$B')"
T=$B/bin/gpu_tests
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $OUT/device.txt
W=$OUT/w; mkdir -p $W
timeout 200 $T --gtest_filter='DecodeV14/*:DecodeV10/*.EveryGeometry*:DecodeV12/*.ClusterMergeAtForced*:DecodeRegistry.*:Small/DecodeSmall.*:Curated/DecodeCurated.*:DecodeEdge.*:DecodeBadInput.*:DecodeV4*:DecodeV5*' > $W/gpu_tests.log 2>&1; echo "gpu_tests rc=$? at $(($(date +%s)-START)) s"
grep -E "^\[  (PASSED|FAILED) |^\[  FAILED  \]|SKIPPED \] [0-9]" $W/gpu_tests.log | tail -8
timeout 60 compute-sanitizer --tool memcheck $T --gtest_filter='DecodeV14/*.BadTable*:DecodeV14/*.KvHeadCounts*' > $W/memcheck.log 2>&1; echo "memcheck rc=$? at $(($(date +%s)-START)) s"; grep -E "PASSED|FAILED|SUMMARY" $W/memcheck.log | tail -3
cd $OUT && tar cJf call.tar.xz w && rm -rf w; ls -la $OUT

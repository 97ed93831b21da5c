#!/usr/bin/env bash
# Session 14 call 2: why v16 (shared tiles) is slower than v10 at the split shapes (call 1).
# (a) A scratch build of v16 with every tile static (the splits' tiles interleaved as v16's static
#     ones, no claims: mma_bulk_decode.cuh's k_static = INT_MAX, claims = false) against main's
#     v16 and v10, FP8 and NVFP4 rows of decode_shared_tiles_ab.ini, alternated twice.
# (b) ncu (one launch each, 16 x 8192 NHD): v10 and v16 at FP8 @2 and NVFP4 @4, and the static
#     scratch v16 at FP8 @2.
set -u
START=$(date +%s)
B=$PWD/.device-carry/b; mkdir -p $B
python3 -c "import tarfile; tarfile.open('.device-carry/bin.tar.xz').extractall('$B'); tarfile.open('.device-carry/static.tar.xz').extractall('$B')"
K=$B/bin/kvlab; KS=$B/static/kvlab
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $OUT/device.txt
W=$OUT/w; mkdir -p $W
t() { echo "$1 rc=$2 at $(($(date +%s)-START)) s"; }
C=experiments/configs/decode_shared_tiles_ab.ini
for r in 1 2; do
  timeout 60 $K sweep $C --only fp8,nvfp4 --out $W/main_$r.h5 --progress none > $W/main_$r.log 2>&1; t main_$r $?
  timeout 60 $KS sweep $C --only fp8,nvfp4 --out $W/static_$r.h5 --progress none > $W/static_$r.log 2>&1; t static_$r $?
done
prof() {  # name binary study version splits
  timeout 60 ncu --clock-control none --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats --section SchedulerStats --section Occupancy --section LaunchStats \
    --kernel-name "regex:_decode_kernel" --launch-count 1 \
    $2 validate $C --only $3 --axis version=$4 --axis layout=nhd --axis batch=16 --axis context=8192 --axis num_splits=$5 --progress none > $W/$1.txt 2>&1
  t $1 $?
}
prof fp8_v10_s2 $K fp8 v10_mma_decode_tma_swizzle 2
prof fp8_v16_s2 $K fp8 v16_mma_decode_shared_tiles 2
prof fp8_v16static_s2 $KS fp8 v16_mma_decode_shared_tiles 2
prof nvfp4_v10_s4 $K nvfp4 v10_mma_decode_tma_swizzle 4
prof nvfp4_v16_s4 $K nvfp4 v16_mma_decode_shared_tiles 4
cd $OUT && tar cJf call.tar.xz w && rm -rf w; ls -la $OUT

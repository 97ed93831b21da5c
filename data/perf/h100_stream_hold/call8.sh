#!/usr/bin/env bash
# Session 16 call 8: K2 and K4 at 16 x 8k again (the two rows that held in call 6 on margins inside
# the run-to-run spread): perf.ini's ceiling rows, K2_large and K4_mid (v10 and auto), twice, each
# its own process, timers held; target_table.py on each.
set -u
START=$(date +%s)
B=$PWD/.device-carry/b; mkdir -p $B
python3 -c "import tarfile; tarfile.open('.device-carry/bin.tar.xz').extractall('$B')"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $OUT/device.txt
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
for r in 1 2; do
  timeout 100 $B/bin/kvlab sweep experiments/configs/perf.ini \
    --only ceilings_read,ceilings_bulk_32k,ceilings_bulk_ranges_4,ceilings_memcpy,K2_large,K4_mid \
    --axis K2_large.version=v10_mma_decode_tma_swizzle,auto --axis K4_mid.version=v10_mma_decode_tma_swizzle,auto \
    --out $OUT/k2k4_$r.h5 --progress none > $OUT/k2k4_$r.log 2>&1
  echo "sweep $r rc=$? at $(($(date +%s)-START)) s"
  python3 experiments/peers/target_table.py $OUT/k2k4_$r.h5 --targets-only 2>&1 | grep -E "^device|^K2|16 x 8k FP8 >= 1.85" | cut -c1-200
done

#!/usr/bin/env bash
# Session 15 call 5: where the kvlab process's launch-bound offset comes from. Three rounds of:
# kvlab sweep timer_check.ini with CUDA's default (lazy) module loading and with EAGER; the
# harness's repeat test (gpu_tests, one process each way); the Python timer on the same file.
set -u
START=$(date +%s)
B=$PWD/.device-carry/b; mkdir -p $B
python3 -c "import tarfile; tarfile.open('.device-carry/bin.tar.xz').extractall('$B')"
K=$B/bin/kvlab; T=$B/bin/gpu_tests
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $OUT/device.txt
W=$OUT/w; mkdir -p $W
med() { python3 -c "
import h5py,sys
f=h5py.File('$1','r'); ix=f['index']
op=[x.decode() if isinstance(x,bytes) else x for x in ix['op'][:]]
mib=ix['mib'][:]; m=ix['median_us'][:]
print(' '.join(f'{o}{int(b)}={v:.3f}' for o,b,v in zip(op,mib,m) if v==v))"; }
for r in 1 2 3; do
  for mode in LAZY EAGER; do
    CUDA_MODULE_LOADING=$mode timeout 60 $K sweep experiments/configs/timer_check.ini --out $W/tc_${mode}_$r.h5 --progress none > $W/tc_${mode}_$r.log 2>&1
    echo "round $r kvlab $mode: $(med $W/tc_${mode}_$r.h5)"
    CUDA_MODULE_LOADING=$mode timeout 60 $T --gtest_filter='BenchHarness.RepeatedColdTimingsOnTheTimingStreamAgree' > $W/rep_${mode}_$r.log 2>&1
    echo "round $r gpu_tests $mode: $(grep '\[repeat\]' $W/rep_${mode}_$r.log | cut -c1-160)"
  done
  timeout 60 python3 experiments/peers/decode_peers.py crosscheck --kvlab-h5 $W/tc_LAZY_$r.h5 --out $W/cc_$r.h5 > $W/cc_$r.log 2>&1
  echo "round $r python: $(med $W/cc_$r.h5)"
  echo "at $(($(date +%s)-START)) s"
done
cd $OUT && tar cJf call.tar.xz w && rm -rf w

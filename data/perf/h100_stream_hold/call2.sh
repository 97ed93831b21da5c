#!/usr/bin/env bash
# Session 16 call 2: the Python package's GPU stage (its suite with the in-process C++ timer test;
# the two-timer decode cross-check with the C++ harness in the Python process), the cross-check
# over launch-bound decode shapes, the warm / cold planted-error measurement, and two more
# bandwidth cross-checks (sweep process vs Python timer vs C++ in the Python process).
set -u
START=$(date +%s)
B=$PWD/.device-carry/b; mkdir -p $B
python3 -c "import tarfile; tarfile.open('.device-carry/bin.tar.xz').extractall('$B')"
cp .device-carry/pyw/*.whl $B/bin/
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $OUT/device.txt
W=$OUT/w; mkdir -p $W
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
OUT=$W bash experiments/python/gpu_stage.sh $B/bin > $W/gpu_stage.log 2>&1; echo "gpu_stage rc=$? at $(($(date +%s)-START)) s"
tail -25 $W/gpu_stage.log
SITE=/tmp/s16site; rm -rf $SITE; python3 -m pip install -q --no-index --no-deps --target $SITE $B/bin/kvlab-*.whl
export PYTHONPATH=$SITE:$PWD
timeout 120 python3 experiments/python/scripts/timing_crosscheck.py --kvlab $B/bin/kvlab --out $W/tc_small \
  --shape 1x512 --shape 4x512 --shape 16x512 --shape 1x2048 --shape 64x512 > $W/tc_small.log 2>&1
echo "tc_small rc=$? at $(($(date +%s)-START)) s"; sed -n '/two timers/,$p' $W/tc_small.log
timeout 150 python3 .device-carry/warm_cold.py > $W/warm_cold.log 2>&1; echo "warm_cold rc=$? at $(($(date +%s)-START)) s"
grep warm_cold $W/warm_cold.log
for r in 1 2; do
  $B/bin/kvlab sweep experiments/configs/timer_check.ini --out $W/timer_check_$r.h5 --progress none > $W/timer_check_$r.log 2>&1
  timeout 90 python3 experiments/peers/decode_peers.py crosscheck --in-process on --kvlab-h5 $W/timer_check_$r.h5 \
    --out $W/crosscheck_$r.h5 > $W/crosscheck_$r.log 2>&1; echo "crosscheck $r rc=$? at $(($(date +%s)-START)) s"
  grep "crosscheck\]" $W/crosscheck_$r.log | cut -c1-260
done
cd $OUT && tar cJf call.tar.xz w && rm -rf w && ls -la $OUT

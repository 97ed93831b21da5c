#!/usr/bin/env bash
# Session 16 call 5: the stream hold, checked before the fair run: the harness and flush tests
# (the two new hold tests among them), cuDNN SDPA's spread with the peer timer's hold, the
# decode two-timer cross-check at launch-bound shapes, one bandwidth cross-check.
set -u
START=$(date +%s)
B=$PWD/.device-carry/b; mkdir -p $B
python3 -c "import tarfile; tarfile.open('.device-carry/bin.tar.xz').extractall('$B')"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $OUT/device.txt
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
W=$OUT/w; mkdir -p $W
timeout 120 $B/bin/gpu_tests --gtest_filter='L2Flush.*:BenchHarness.*:LaunchFloor*' > $W/harness_tests.log 2>&1
echo "harness tests rc=$? at $(($(date +%s)-START)) s"
grep -E "^\[hold\]|^\[streams\]|^\[stamps\]|^\[flush\]|PASSED|FAILED|Failure" $W/harness_tests.log | head -40
SITE=/tmp/s16site; rm -rf $SITE; python3 -m pip install -q --no-index --no-deps --target $SITE $B/bin/kvlab-*.whl
export PYTHONPATH=$SITE:$PWD
timeout 100 python3 .device-carry/sdpa_var.py > $W/sdpa_var.log 2>&1; echo "sdpa_var rc=$? at $(($(date +%s)-START)) s"
grep -E "^\[sdpa_var\]" $W/sdpa_var.log | cut -c1-260
timeout 120 python3 experiments/python/scripts/timing_crosscheck.py --kvlab $B/bin/kvlab --out $W/tc_small \
  --shape 1x512 --shape 4x512 --shape 16x512 --shape 1x2048 --shape 1x32768 --shape 8x2048 > $W/tc_small.log 2>&1
echo "tc_small rc=$? at $(($(date +%s)-START)) s"; sed -n '/two timers/,$p' $W/tc_small.log
$B/bin/kvlab sweep experiments/configs/timer_check.ini --out $W/timer_check.h5 --progress none > $W/timer_check.log 2>&1
timeout 90 python3 experiments/peers/decode_peers.py crosscheck --in-process on --kvlab-h5 $W/timer_check.h5 \
  --out $W/crosscheck.h5 > $W/crosscheck.log 2>&1; echo "crosscheck rc=$? at $(($(date +%s)-START)) s"
grep "crosscheck\]" $W/crosscheck.log | cut -c1-260
cd $OUT && tar cJf call.tar.xz w && rm -rf w && ls -la $OUT

#!/usr/bin/env bash
# Session 16 call 7: compute-sanitizer memcheck over the stream-hold tests (the hold kernel reads
# and writes mapped host memory), and the Python package's GPU suite with the final wheel.
set -u
START=$(date +%s)
B=$PWD/.device-carry/b; mkdir -p $B
python3 -c "import tarfile; tarfile.open('.device-carry/bin.tar.xz').extractall('$B')"
cp .device-carry/pyw/*.whl $B/bin/
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $OUT/device.txt
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
t() { echo "$1 rc=$2 at $(($(date +%s)-START)) s"; }
timeout 100 compute-sanitizer --tool memcheck $B/bin/gpu_tests \
  --gtest_filter='BenchHarness.HeldStreamKeepsTheHostsLaunchTimeOutOfTheEvents:BenchHarness.ACallThatWaitsOnItsStreamIsTimedUnheld:BenchHarness.TimesOnTheProcessTimingStream' \
  > $OUT/memcheck_hold.log 2>&1; t memcheck $?
grep -E "^\[hold\]|OK \]|FAILED|Failure|ERROR SUMMARY" $OUT/memcheck_hold.log | head -12
SITE=/tmp/s16site; rm -rf $SITE
python3 -m pip install -q --no-index --no-deps --target $SITE $B/bin/kvlab-*.whl $B/bin/{pytest,pluggy,iniconfig,packaging,pygments}-*.whl
PYTHONPATH=$SITE:$PWD timeout 80 python3 -m pytest -q -p no:cacheprovider -rs tests/python/test_kvlab_gpu.py > $OUT/pytest_gpu.log 2>&1; t pytest_gpu $?
tail -3 $OUT/pytest_gpu.log

#!/usr/bin/env bash
# Session 18 call 4: a third fair run with the read bound (REPEATS=1, the step sweep left out),
# perf.ini with its read_bound sections; the binaries of main 9f2e7ab's kernels (no C++ changed since).
set -u
B=$PWD/.device-carry/b; mkdir -p $B
python3 -c "import tarfile; tarfile.open('.device-carry/bin.tar.xz').extractall('$B')"
R=$OUT/run; mkdir -p $R
OUT=$R STAGE_S=400 REPEATS=1 STEP_SWEEP=0 WHEELS=$PWD/.device-carry/wheels experiments/peers/h100_perf_run.sh $B/bin > $R/stage_stdout.log 2>&1
echo "stage rc=$?"
cat $R/fair_timing/stage.log
grep -E "crosscheck\]|WARNING|FAILED" $R/fair_timing/crosscheck.log $R/fair_timing/peers.log | cut -c1-300 | head -30
sed -n '/^read bound/,/^paged peers/p' $R/fair_timing/table.txt 2>/dev/null | cut -c1-250
cd $OUT && tar cJf call.tar.xz run && rm -rf run && ls -la $OUT

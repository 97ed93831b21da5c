#!/usr/bin/env bash
# Session 17 call 2: a third fair run (its own flush test and cross-check, no repeat, the step sweep
# left out), then page_order.ini (every K1 point behind a peer on shuffled and sequential pages)
# with cuDNN SDPA on its shapes. Binaries of main 9f2e7ab, as in call 1.
set -u
B=$PWD/.device-carry/b; mkdir -p $B
[[ -x $B/bin/kvlab ]] || python3 -c "import tarfile; tarfile.open('.device-carry/bin.tar.xz').extractall('$B')"
R=$OUT/run; mkdir -p $R
OUT=$R STAGE_S=300 STEP_SWEEP=0 WHEELS=$PWD/.device-carry/wheels experiments/peers/h100_perf_run.sh $B/bin > $R/stage_stdout.log 2>&1
echo "stage rc=$?"
cat $R/fair_timing/stage.log
grep -E "crosscheck\]|WARNING|FAILED" $R/fair_timing/crosscheck.log $R/fair_timing/peers.log | cut -c1-300 | head -20
P=$R/page_order; mkdir -p $P
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
timeout -s TERM -k 20 200 $B/bin/kvlab sweep experiments/configs/page_order.ini --out $P/page_order.h5 --progress plain > $P/sweep.log 2>&1
echo "page_order sweep rc=$?"; grep -E "^done:|FAILED|interrupted|\[ceilings\]" $P/sweep.log | head
timeout -k 10 120 python3 experiments/peers/decode_peers.py peers --kvlab-h5 $P/page_order.h5 --only sdpa --sdpa cudnn --budget-s 100 --out $P/page_order_peers.h5 > $P/peers.log 2>&1
echo "page_order peers rc=$?"
python3 experiments/peers/page_order_table.py $P/page_order.h5 $P/page_order_peers.h5 --markdown > $P/table.md 2>&1
cat $P/table.md | cut -c1-250
cd $OUT && tar cJf call.tar.xz run && rm -rf run && ls -la $OUT

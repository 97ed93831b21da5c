#!/usr/bin/env bash
# adopt_perf_run.sh: takes the output of one H100 run of experiments/peers/h100_perf_run.sh into
# the repository, with no hand edit: the result files into data/perf/, every generated table
# regenerated from them. Run on any machine (no GPU), from anywhere, after the GPU run:
#
#   KVLAB=build/experiments/kvlab experiments/peers/adopt_perf_run.sh OUT/fair_timing [MORE_RUNS ...]
#
# Copies (the file names data/perf/README.md documents):
#   perf_sweep.h5 -> data/perf/h100_perf_sweep.h5     perf_peers.h5  -> data/perf/h100_perf_peers.h5
#   step_sweep.h5 -> data/perf/h100_step_sweep.h5     timer_check.h5 -> data/perf/h100_timer_check.h5
#   crosscheck.h5 -> data/perf/h100_crosscheck.h5
#   perf_peers_cudnn_paged.h5 -> data/perf/h100_perf_peers_cudnn_paged.h5   (when the run has it:
#                          cuDNN's paged SDPA, timed in its own process after the other peers)
# and writes from them:
#   data/perf/targets.md   experiments/peers/target_table.py --markdown: kvlab vs cuDNN and
#                          FlashInfer per shape, the grid, the targets (gpu/attention/TUNING.md's
#                          tables)
#   data/perf/step.md      python3 -m analysis.step_figures: step time per variant and the GEMM
#                          crossovers (gpu/step/NOTES.md's tables)
#   data/perf/timing.md    the run's ceilings (every kernel, the best named), the flush test and the
#                          two-timer cross-check
#   experiments/calibrate/FIDELITY.md   experiments/calibrate/make_fidelity.sh (generated whole)
# Repeated runs (h100_perf_run.sh REPEATS=N: OUT/fair_timing/repeat_K/; and MORE_RUNS, the
# fair_timing folders of further calls with the same binaries, with their repeats): every run's
# perf_sweep.h5, perf_peers.h5 and device.txt go to data/perf/h100_perf_runs/run_N/ (run_1 the
# adopted run itself: git stores the same bytes once), and
#   data/perf/targets_runs.md   experiments/peers/target_runs.py --markdown over them: every target
#                          in every run, and in how many it holds
# A single run with no repeats removes an earlier h100_perf_runs/ and targets_runs.md. A further run
# may be a folder of the current h100_perf_runs/ (an adopted run kept beside the new ones).
# A missing input file or a failing generator stops it with exit 2 / 1; files already copied stay.
# Every input must be whole first (`kvlab check --require-complete`: intact, and holding every
# point of its sweep): a run stopped by its deadline leaves files that lack points, and adopting
# one would put part of a table where a whole one was. Such a run stops it with exit 2 before
# anything is copied, unless only the step sweep is incomplete (or absent: a run with
# STEP_SWEEP=0) and KEEP_STEP_SWEEP=1: then
# data/perf/h100_step_sweep.h5 (an earlier run's, whole) stays and the rest is adopted.
# Environment: KVLAB (default build/experiments/kvlab), PYTHON (default python3; needs h5py, pandas,
# numpy, matplotlib: analysis/requirements.txt), KEEP_STEP_SWEEP (default 0).
set -euo pipefail
SRC=${1:?usage: adopt_perf_run.sh DIR (the fair_timing folder of an h100_perf_run.sh run)}
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
SRC=$(cd "$SRC" 2>/dev/null && pwd) || { echo "adopt_perf_run.sh: $1: no such directory" >&2; exit 2; }
cd "$root"
PYTHON=${PYTHON:-python3}
export KVLAB=${KVLAB:-build/experiments/kvlab}
[[ -x $KVLAB ]] || { echo "adopt_perf_run.sh: KVLAB=$KVLAB is not an executable kvlab (build it, or set KVLAB)" >&2; exit 2; }
RUN_FILES=(perf_sweep perf_peers step_sweep timer_check crosscheck)  # data/perf/h100_<name>.h5
incomplete=()
for f in "${RUN_FILES[@]}"; do
  if [[ $f == step_sweep && ! -f $SRC/$f.h5 && ${KEEP_STEP_SWEEP:-0} == 1 ]]; then
    incomplete+=(step_sweep)  # left out of the run (STEP_SWEEP=0): kept from an earlier run below
    continue
  fi
  [[ -f "$SRC/$f.h5" ]] || { echo "adopt_perf_run.sh: $SRC/$f.h5 is missing: not a complete h100_perf_run.sh output" >&2; exit 2; }
done
INPUTS=()
for f in "${RUN_FILES[@]}"; do [[ -f "$SRC/$f.h5" ]] && INPUTS+=("$f"); done
[[ -f "$SRC/perf_peers_cudnn_paged.h5" ]] && INPUTS+=(perf_peers_cudnn_paged)
for f in "${INPUTS[@]}"; do
  "$KVLAB" check --require-complete "$SRC/$f.h5" >&2 || incomplete+=("$f")
done
# The repeated runs: this run's repeat_K/, then each further folder and its repeats. Each needs a
# whole perf_sweep.h5 and perf_peers.h5.
RUNS=("$SRC")
for r in "$SRC"/repeat_*; do [[ -d $r ]] && RUNS+=("$r"); done
for arg in "${@:2}"; do
  more=$(cd "$arg" 2>/dev/null && pwd) || { echo "adopt_perf_run.sh: $arg: no such directory" >&2; exit 2; }
  RUNS+=("$more")
  for r in "$more"/repeat_*; do [[ -d $r ]] && RUNS+=("$r"); done
done
for r in "${RUNS[@]:1}"; do
  for f in perf_sweep perf_peers; do
    [[ -f $r/$f.h5 ]] || { echo "adopt_perf_run.sh: $r/$f.h5 is missing: not a whole repeated run" >&2; exit 2; }
    "$KVLAB" check --require-complete "$r/$f.h5" >&2 || incomplete+=("$r/$f")
  done
done
KEEP_STEP=0
if [[ ${#incomplete[@]} -eq 1 && ${incomplete[0]} == step_sweep && ${KEEP_STEP_SWEEP:-0} == 1 ]]; then
  [[ -f data/perf/h100_step_sweep.h5 ]] || { echo "adopt_perf_run.sh: KEEP_STEP_SWEEP=1 but data/perf/h100_step_sweep.h5 does not exist" >&2; exit 2; }
  KEEP_STEP=1
  echo "step_sweep.h5 is incomplete or left out: data/perf/h100_step_sweep.h5 (an earlier run's) stays" >&2
elif [[ ${#incomplete[@]} -gt 0 ]]; then
  echo "adopt_perf_run.sh: not whole (damaged or missing points): ${incomplete[*]}; nothing copied" \
       "(KEEP_STEP_SWEEP=1 keeps the repository's step sweep when only step_sweep is incomplete)" >&2
  exit 2
fi
n=0
for f in "${RUN_FILES[@]}"; do
  [[ $f == step_sweep && $KEEP_STEP == 1 ]] && continue
  cp "$SRC/$f.h5" "data/perf/h100_$f.h5"
  n=$((n + 1))
done
echo "copied $n files into data/perf/"
PEER_FILES=(data/perf/h100_perf_peers.h5)
if [[ -f "$SRC/perf_peers_cudnn_paged.h5" ]]; then
  cp "$SRC/perf_peers_cudnn_paged.h5" data/perf/h100_perf_peers_cudnn_paged.h5
  PEER_FILES+=(data/perf/h100_perf_peers_cudnn_paged.h5)
  echo "copied perf_peers_cudnn_paged.h5"
else  # a run without cuDNN paged rows: no stale file from an earlier run beside its tables
  rm -f data/perf/h100_perf_peers_cudnn_paged.h5
fi

$PYTHON experiments/peers/target_table.py data/perf/h100_perf_sweep.h5 "${PEER_FILES[@]}" --markdown \
  > data/perf/targets.md.tmp && mv data/perf/targets.md.tmp data/perf/targets.md
echo "wrote data/perf/targets.md"
# The runs are gathered in a new folder first and replace the old one only then: a further run
# may be one of the adopted runs already there (data/perf/h100_perf_runs/run_K), kept beside a new one.
NEW_RUNS=data/perf/.h100_perf_runs.new
rm -rf "$NEW_RUNS"
if (( ${#RUNS[@]} > 1 )); then
  for i in "${!RUNS[@]}"; do
    dst=$NEW_RUNS/run_$((i + 1))
    mkdir -p "$dst"
    cp "${RUNS[$i]}/perf_sweep.h5" "${RUNS[$i]}/perf_peers.h5" "$dst/"
    [[ -f ${RUNS[$i]}/device.txt ]] && cp "${RUNS[$i]}/device.txt" "$dst/"
  done
fi
rm -rf data/perf/h100_perf_runs data/perf/targets_runs.md
if (( ${#RUNS[@]} > 1 )); then
  mv "$NEW_RUNS" data/perf/h100_perf_runs
  RUN_DIRS=()
  for i in "${!RUNS[@]}"; do RUN_DIRS+=("data/perf/h100_perf_runs/run_$((i + 1))"); done
  $PYTHON experiments/peers/target_runs.py "${RUN_DIRS[@]}" --markdown > data/perf/targets_runs.md.tmp \
    && mv data/perf/targets_runs.md.tmp data/perf/targets_runs.md
  echo "copied ${#RUNS[@]} runs into data/perf/h100_perf_runs/; wrote data/perf/targets_runs.md"
fi
{
  echo "# Full decode step, H100 (generated by experiments/peers/adopt_perf_run.sh from data/perf/h100_step_sweep.h5)"
  echo
  echo '```'
  $PYTHON -m analysis.step_figures data/perf/h100_step_sweep.h5
  echo '```'
} > data/perf/step.md.tmp && mv data/perf/step.md.tmp data/perf/step.md
echo "wrote data/perf/step.md"
$PYTHON experiments/peers/timing_report.py data/perf/h100_perf_sweep.h5 data/perf/h100_timer_check.h5 \
  data/perf/h100_crosscheck.h5 --flush-log "$SRC/flush_test.log" > data/perf/timing.md.tmp \
  && mv data/perf/timing.md.tmp data/perf/timing.md
echo "wrote data/perf/timing.md"
PYTHON=$PYTHON experiments/calibrate/make_fidelity.sh
echo "wrote experiments/calibrate/FIDELITY.md"

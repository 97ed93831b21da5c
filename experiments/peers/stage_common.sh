# stage_common.sh: the start of the small GPU stage scripts of experiments/peers (floor_stage.sh,
# scatter_stage.sh), sourced after `set -u`:
#   stage_init TAG DIRNAME BIN   BIN made absolute, D="$OUT/DIRNAME" created, the clock started,
#                                LD_LIBRARY_PATH / PYTHONPATH set, PY, STAGE_S (default 60), rc=0
#   step MSG...                  "[TAG <s> s] MSG" to the terminal and $D/stage.log
#   left                         seconds left of STAGE_S
#   cap WANT RESERVE             a step's limit: at most WANT, leaving RESERVE for the steps after
#   clocks_start / clocks_stop   nvidia-smi clocks, power, temperature every 100 ms to $D/clocks.csv
stage_init() {
  STAGE_TAG=$1
  BIN=$(cd "$3" && pwd)
  OUT=${OUT:-./perf_out}
  D="$OUT/$2"
  mkdir -p "$D"
  T0=$(date +%s)
  export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
  export PYTHONPATH=$(pwd)${PYTHONPATH:+:$PYTHONPATH}
  PY=${PYTHON:-python3}
  STAGE_S=${STAGE_S:-60}
  rc=0
}
step() { echo "[$STAGE_TAG $(( $(date +%s) - T0 )) s] $*" | tee -a "$D/stage.log"; }
left() { echo $(( STAGE_S - ($(date +%s) - T0) )); }
cap() { local c=$(( $(left) - $2 )); (( c > $1 )) && c=$1; (( c < 5 )) && c=5; echo $c; }
clocks_start() {
  nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu --format=csv -lms 100 \
    > "$D/clocks.csv" 2>&1 &
  SMI=$!
}
clocks_stop() { kill "$SMI" 2>/dev/null; }

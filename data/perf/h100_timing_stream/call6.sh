#!/usr/bin/env bash
# Session 15 call 6: two hypotheses for the kvlab process's 1 MiB offset against the Python timer:
# the point order (timer_check with the 1 MiB read last, then once more) and the buffer's place
# (offset_probe: offsets into a 2 MiB-aligned buffer, a fresh 1 MiB cudaMalloc per timing).
set -u
START=$(date +%s)
B=$PWD/.device-carry/b; mkdir -p $B
python3 -c "import tarfile; tarfile.open('.device-carry/bin.tar.xz').extractall('$B')"
K=$B/bin/kvlab
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $OUT/device.txt
W=$OUT/w; mkdir -p $W
med() { python3 -c "
import h5py
f=h5py.File('$1','r'); ix=f['index']
op=[x.decode() if isinstance(x,bytes) else x for x in ix['op'][:]]
st=[x.decode() if isinstance(x,bytes) else x for x in ix['study'][:]]
mib=ix['mib'][:]; m=ix['median_us'][:]
print(' '.join(f'{s}:{o}{int(b)}={v:.3f}' for s,o,b,v in zip(st,op,mib,m) if v==v))"; }
for r in 1 2 3; do
  timeout 60 $K sweep experiments/configs/timer_check.ini --out $W/tc_$r.h5 --progress none > $W/tc_$r.log 2>&1
  echo "round $r as shipped: $(med $W/tc_$r.h5)"
  timeout 60 $K sweep data/perf/h100_timing_stream/timer_check_reversed.ini --out $W/rev_$r.h5 --progress none > $W/rev_$r.log 2>&1
  echo "round $r reversed:   $(med $W/rev_$r.h5)"
done
timeout 120 $B/bin/offset_probe > $W/offset_probe.log 2>&1; echo "probe rc=$? at $(($(date +%s)-START)) s"; cat $W/offset_probe.log
cd $OUT && tar cJf call.tar.xz w && rm -rf w

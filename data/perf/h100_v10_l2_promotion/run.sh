#!/bin/bash
# session-3 call M: v10's tensor-map L2 promotion (none / 128 B / 256 B, kvlab of main 723dfcc
# with only that constant changed): decode_bulk_copy.ini's v10 points twice per variant, ncu
# counters at 64 x 8k HND.
cd "$(dirname "$0")/.."
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
mkdir -p .device-carry/promo && python3 -c "import tarfile; tarfile.open('.device-carry/promo.tar.xz').extractall('.device-carry/promo')"
P=$PWD/.device-carry/promo; D=$OUT/promo; mkdir -p $D
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.mem,temperature.gpu --format=csv,noheader | tee $OUT/device.txt
for r in 1 2; do for v in NONE L2_128B L2_256B; do
  timeout 60 $P/kvlab_$v sweep experiments/configs/decode_bulk_copy.ini --only hnd,nhd,fp8 --axis version=v10_mma_decode_tma_swizzle \
    --out $D/sweep_${v}_$r.h5 --progress none > $D/sweep_${v}_$r.log 2>&1; echo "sweep $v $r rc=$?"
done; done
M=gpu__time_duration.sum,dram__bytes_read.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,lts__t_requests.sum,lts__t_sectors.sum,lts__t_sectors_op_read.sum,lts__t_sectors_srcunit_tex_op_read.sum,lts__t_sectors_srcunit_tex.sum
for v in NONE L2_128B L2_256B; do
  timeout 30 ncu --clock-control none --metrics $M --kernel-name regex:bulk_decode_kernel --launch-count 1 \
    $P/kvlab_$v validate experiments/configs/decode_bulk_copy.ini --only hnd --axis version=v10_mma_decode_tma_swizzle --axis batch=64 --axis context=8192 --progress none > $D/ncu_$v.txt 2>&1
  echo "== ncu $v"; grep -E 'gpu__time|dram__|lts__' $D/ncu_$v.txt
done
python3 - <<'PY'
import h5py, glob, os, collections
D=os.environ['OUT']+'/promo'
rows=collections.defaultdict(dict)
for p in sorted(glob.glob(D+'/sweep_*.h5')):
    v=os.path.basename(p)[6:-3]
    f=h5py.File(p); ix=f['index']
    g=lambda k:[x.decode() if isinstance(x,bytes) else x for x in ix[k][:]]
    for st,fmt,lay,b,c,t,s in zip(g('study'),g('kv_format'),g('layout'),g('batch'),g('context'),g('median_us'),g('status')):
        if s=='ok': rows[(st,fmt,lay,int(b),int(c))][v]=float(t)
vs=['NONE_1','NONE_2','L2_128B_1','L2_128B_2','L2_256B_1','L2_256B_2']
print('shape'.ljust(34)+''.join(x.rjust(11) for x in vs))
for k in sorted(rows): print(str(k).ljust(34)+''.join(('%.1f'%rows[k][x] if x in rows[k] else '-').rjust(11) for x in vs))
PY
cd $OUT && tar czf promo.tgz promo && rm -rf promo

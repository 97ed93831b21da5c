#!/usr/bin/env python3
"""Where the time of a bulk-family decode call goes, from per-block %globaltimer stamps.

The stamps come from a scratch build with data/perf/h100_decode_stamps/stamps.patch applied
(`KVLAB_SCRATCH_STAMPS=FILE kvlab sweep ...` appends one line per block and call): for every
decode block its start, the moment warp 0 passed its first tile's wait, its end and its SM;
for every block of the split merge kernel its start, the release of its dependency wait and its
end. Per shape (format, sequences, context bound, splits) the table gives the median over the
calls (the first three of each point, validation and warm-up, left out) of:

  blocks          decode blocks of the launch
  span_k          first block start -> last block end (us)
  start_skew      first -> last block start (a second wave shows here)
  first_tile      block start -> first tile landed, median and max over the blocks
  end_first, end_median   first and median block end after the first start
  sm_tail         last block end -> the median SM's last block end (the tail's spread)
  idle_pct        % of the SMs' time over the span after each SM's last block (an SM that ran
                  no block counts idle throughout; the SMs are every smid of the file)
  merge_release   last decode block end -> first merge block released
  merge_end       last decode block end -> last merge block end (0 without a merge)
  span_all        first decode block start -> last block end of the call (merge included)

    python3 gpu/attention/stamps_table.py data/perf/h100_decode_stamps/stamps.csv.xz

CSV columns (no header): call, format, sequences, context bound, splits, grid, kind (k: decode
block, m: merge block), index, t0, t1, t2, smid; times in ns. Exit code 2 for a file that is
missing or not such a CSV.
"""
import argparse
import sys

import numpy as np
import pandas as pd

COLUMNS = ["call", "fmt", "seqs", "ctx", "splits", "grid", "kind", "idx", "t0", "t1", "t2", "smid"]
SKIP_CALLS = 3


def per_call(d):
    sms = d[d.kind == "k"].smid.nunique()
    rows = []
    for key, g in d.groupby(["fmt", "seqs", "ctx", "splits", "call"]):
        k, m = g[g.kind == "k"], g[g.kind == "m"]
        if k.empty:
            continue
        s0, kend = k.t0.min(), k.t2.max()
        landed = k[k.t1 > 0]
        first = (landed.t1 - landed.t0) / 1e3
        r = dict(zip(["fmt", "seqs", "ctx", "splits", "call"], key))
        r.update(blocks=len(k), span_k=(kend - s0) / 1e3, start_skew=(k.t0.max() - s0) / 1e3,
                 first_tile=first.median() if len(first) else np.nan,
                 first_tile_max=first.max() if len(first) else np.nan,
                 end_first=(k.t2.min() - s0) / 1e3, end_median=(k.t2.median() - s0) / 1e3)
        last = k.groupby("smid").t2.max()
        span = kend - s0
        r.update(sm_tail=(kend - last.median()) / 1e3,
                 idle_pct=100.0 * ((kend - last).sum() + (sms - len(last)) * span) / (sms * span))
        if len(m):
            r.update(merge_release=(m.t1.min() - kend) / 1e3, merge_end=(m.t2.max() - kend) / 1e3,
                     span_all=(m.t2.max() - s0) / 1e3)
        else:
            r.update(merge_release=np.nan, merge_end=0.0, span_all=r["span_k"])
        rows.append(r)
    return pd.DataFrame(rows)


def table(path):
    try:
        d = pd.read_csv(path, header=None, names=COLUMNS)
    except (OSError, ValueError, pd.errors.ParserError) as e:
        raise ValueError(f"{path}: cannot read ({e})") from None
    if d.empty or not set(d.kind.unique()) <= {"k", "m"} or d.t0.isna().any():
        raise ValueError(f"{path}: not a stamps CSV (kind must be k or m, times present)")
    calls = per_call(d)
    keep = []
    for _, g in calls.groupby(["fmt", "seqs", "ctx", "splits"]):
        keep.append(g.sort_values("call").iloc[SKIP_CALLS:] if len(g) > SKIP_CALLS else g)
    calls = pd.concat(keep)
    return calls.groupby(["fmt", "seqs", "ctx", "splits"]).median(numeric_only=True).drop(
        columns=["call"])


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("csv", help="stamps CSV (optionally .xz / .gz)")
    a = ap.parse_args(argv[1:])
    try:
        t = table(a.csv)
    except ValueError as e:
        print(f"stamps_table.py: error: {e}", file=sys.stderr)
        return 2
    pd.set_option("display.width", 250)
    print(t.round(2).to_string())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

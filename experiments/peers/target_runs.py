#!/usr/bin/env python3
"""The targets over repeated fair runs: each K-row's figure in every run, and in how many it holds.

    python3 experiments/peers/target_runs.py RUN RUN [RUN ...] [--markdown]

A RUN is the folder of one fair run (h100_perf_run.sh's fair_timing/, or one of its repeat_N/
folders: perf_sweep.h5 and the perf_peers*.h5 beside it), or its files joined by commas, the kvlab
sweep first (data/perf/h100_perf_sweep.h5,data/perf/h100_perf_peers.h5). Each run is judged by
target_table.py's rules on its own files and its own ceilings (R and C move between runs); this
script only sets the runs side by side:
  1. the runs: device, R, C;
  2. every target: its figure in each run (the number its verdict is taken on), the range, and
     "holds in k of N"; the verdict is "yes" only where it holds in every run, "NO" where it holds
     in none, and "NO (k of N)" between: a target met in some runs and missed in others is at the
     edge of the run-to-run spread, not met;
  3. K1 point by point: kvlab's best and the best peer (cuDNN SDPA on contiguous KV, FlashInfer
     paged) in each run, the range of kvlab's time over the peer's, and in how many runs kvlab is
     ahead.
Runs of different devices are refused (exit 2): H100 and H200 numbers never mix in one comparison.
Reads result files only.
"""
from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from target_table import ResultFileError, kctx, report, table  # noqa: E402

PEER_FILES = ("perf_peers.h5", "perf_peers_cudnn_paged.h5")


class RunError(Exception):
    pass


def run_files(arg: str) -> list[str]:
    """The result files of one RUN argument: a fair-run folder or a comma-joined file list."""
    if os.path.isdir(arg):
        sweep = os.path.join(arg, "perf_sweep.h5")
        if not os.path.isfile(sweep):
            raise RunError(f"{arg}: no perf_sweep.h5 in this folder (not a fair run's folder)")
        return [sweep] + [os.path.join(arg, f) for f in PEER_FILES if os.path.isfile(os.path.join(arg, f))]
    files = [f for f in arg.split(",") if f]
    missing = [f for f in files if not os.path.isfile(f)]
    if not files or missing:
        raise RunError(f"{arg}: neither a folder nor a comma-joined list of existing files"
                       + (f" (missing: {', '.join(missing)})" if missing else ""))
    return files


def build(r) -> str:
    """The kvlab build and sweep of a run's sweep file: commit (+ 'dirty' for uncommitted sources)
    and the sweep's fingerprint."""
    a = r.attrs
    commit = str(a.get("git_commit", "?"))[:10] + ("+dirty" if int(a.get("git_dirty", 0) or 0) else "")
    return f"{commit}, {a.get('sweep_name', '?')} {a.get('sweep_fingerprint', '?')}"


def card(arg: str) -> str:
    """The card a run's folder names in device.txt (h100_perf_run.sh: name, driver, UUID ...), or '-'."""
    path = os.path.join(arg, "device.txt") if os.path.isdir(arg) else ""
    if not path or not os.path.isfile(path):
        return "-"
    with open(path) as f:
        fields = [x.strip() for x in f.readline().split(",")]
    uuid = next((x for x in fields if x.startswith("GPU-")), None)
    return uuid[:12] if uuid else "-"


def figure(t) -> str:
    """A target's value as its verdict reads it."""
    v = t["value"]
    if v is None:
        return "-"
    tid, what = t["id"], t["what"]
    if tid == "K1":
        return f"{v:d} of {what_points(t)}"
    if tid in ("K2", "K3", "P9"):
        return f"{v:.1f} %"
    if tid in ("K4", "K5"):
        return f"{v:.3f}x"
    if tid == "K6":
        return f"{v:.2f} us"
    if tid == "K7":
        return f"+{v:.1f} %"
    return f"{v:g}"


def what_points(t) -> str:
    # K1's figure opens with "n of N points".
    return t["figure"].split(" of ", 1)[1].split(" ", 1)[0]


def verdict(holds: list) -> tuple[int, str]:
    k = sum(1 for h in holds if h == "yes")
    n = len(holds)
    return k, ("yes" if k == n else "NO" if k == 0 else f"NO ({k} of {n})")


def main(argv) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("runs", nargs="+", help="fair-run folders, or comma-joined result files (sweep first)")
    ap.add_argument("--markdown", action="store_true", help="markdown tables")
    a = ap.parse_args(argv[1:])
    try:
        reps = [report(run_files(r), targets_only=True) for r in a.runs]
    except (RunError, ResultFileError) as e:
        print(f"target_runs.py: error: {e}", file=sys.stderr)
        return 2
    devices = sorted({r.device for r in reps})
    if len(devices) > 1:
        print(f"target_runs.py: error: the runs are from different devices ({', '.join(devices)}); numbers of "
              "different devices never mix in one comparison", file=sys.stderr)
        return 2
    n = len(reps)
    out = [f"{n} runs on {devices[0]}, each judged on its own files and ceilings:"]
    emit = out.append
    table(emit, ["run", "files", "card", "kvlab build, sweep", "R TB/s", "C TB/s"],
          [[i + 1, a.runs[i], card(a.runs[i]), build(r), f"{r.ceilings.read / 1e12:.3f}",
            f"{r.ceilings.copy / 1e12:.3f}"] for i, r in enumerate(reps)], a.markdown)
    builds = sorted({build(r) for r in reps})
    if len(builds) > 1:
        emit(f"note: the runs are of {len(builds)} builds or sweeps ({'; '.join(builds)}): their spread includes "
             "what changed between them, not only the run-to-run spread")

    # Every target in the order the first run that has it lists it.
    keys = []
    for r in reps:
        for t in r.targets:
            if (t["id"], t["what"]) not in keys:
                keys.append((t["id"], t["what"]))
    rows = []
    for key in keys:
        per = [next((t for t in r.targets if (t["id"], t["what"]) == key), None) for r in reps]
        vals = [t["value"] for t in per if t is not None and t["value"] is not None]
        holds = [t["holds"] if t is not None else "not measured" for t in per]
        k, v = verdict(holds)
        rng = "-"
        if vals and key[0] != "K1":
            lo, hi = min(vals), max(vals)
            shown = next(t for t in per if t is not None and t["value"] is not None)
            rng = (f"{figure(dict(shown, value=lo))} - {figure(dict(shown, value=hi))}" if hi != lo
                   else figure(shown))
        rows.append([key[0], key[1]] + [figure(t) if t is not None else "not measured" for t in per] +
                    [rng, f"{k} of {n}", v])
    emit("")
    emit("targets over the runs (a target holds only where it holds in every run):")
    table(emit, ["target", "what"] + [f"run {i + 1}" for i in range(n)] + ["range", "holds in", "verdict"], rows,
          a.markdown)

    # K1 point by point.
    pts = []
    for r in reps:
        for p in r.k1_points:
            if (p["batch"], p["context"]) not in pts:
                pts.append((p["batch"], p["context"]))
    rows = []
    for b, c in sorted(pts):
        per = [next((p for p in r.k1_points if (p["batch"], p["context"]) == (b, c)), None) for r in reps]
        got = [p for p in per if p is not None]
        ratio = [p["kvlab_us"] / p["peer_us"] for p in got]
        ahead = sum(1 for p in got if p["kvlab_us"] <= p["peer_us"])
        cells = [f"{p['kvlab_us']:.1f} / {p['peer_us']:.1f} {p['peer']}" if p is not None else "-" for p in per]
        # The read bound (target_table.py): runs with a paged read of the point's bytes, and in how
        # many of them the peer on contiguous KV beat that bare read.
        bounded = [p for p in got if p.get("paged_read_us") is not None]
        under = sum(1 for p in bounded if p["peer_us"] < p["paged_read_us"])
        rows.append([f"{b} x {kctx(c)}"] + cells +
                    [f"{100 * (min(ratio) - 1):+.1f} to {100 * (max(ratio) - 1):+.1f} %", f"{ahead} of {n}",
                     f"{under} of {len(bounded)}" if bounded else "-"])
    emit("")
    emit("K1 per point (kvlab's best / the best peer, us; kvlab's time over the peer's, the range over the runs; "
         "ahead in: runs where kvlab's time <= the peer's; peer beats the paged read: of the runs with the read "
         "bound, those where the peer was faster than a bare cold read of the point's K/V bytes in 4 KiB pages, "
         "the page tables' order):")
    table(emit, ["point"] + [f"run {i + 1}" for i in range(n)] + ["kvlab vs peer", "ahead in",
                                                                 "peer beats the paged read"], rows, a.markdown)
    print("\n".join(out))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

#!/usr/bin/env python3
"""timing_report: how a performance run was timed, as markdown (data/perf/timing.md).

    python3 experiments/peers/timing_report.py PERF_SWEEP.h5 TIMER_CHECK.h5 CROSSCHECK.h5 \
        [--flush-log flush_test.log]

Prints, from the files of one experiments/peers/h100_perf_run.sh run:
  - the ceilings: R and C of the run, and every kernel they are the best of (the bandwidth rows
    of the perf sweep), fastest first, with its bandwidth at the median and at the fast edge of
    its noise band (bytes / first-quartile time, the edge a ceiling is taken at);
  - the two-timer cross-check: each operation's median through gpu/bench (kvlab sweep) and
    through the Python peer timer, their difference and the verdict (within the file's
    tolerance), plus the diagnostic columns when the check ran with --diagnose;
  - the flush test's table and the events-vs-kernel stamps, copied from the gpu_tests log.
Exit 2 on a missing or unreadable file.
"""
from __future__ import annotations

import argparse
import math
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)
from analysis.load import ResultFileError, load  # noqa: E402
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from run_ceilings import ceiling_rows, run_ceilings  # noqa: E402


def tb(x: float) -> str:
    return "-" if x is None or not math.isfinite(x) else f"{x / 1e12:.4f}"


def us(x: float) -> str:
    return "-" if x is None or not math.isfinite(x) else f"{x:.3f}"


def ceilings(path: str) -> list:
    r = load(path)
    a = r.attrs
    rc = run_ceilings(r)
    R, C = rc.read, rc.copy
    out = [f"## Ceilings ({os.path.basename(path)}, {a.get('device_name', '?')})", "",
           f"Read ceiling R = {tb(R)} TB/s, copy ceiling C = {tb(C)} TB/s, datasheet "
           f"{tb(float(a.get('device_peak_bytes_per_s', math.nan)))} TB/s. Each is the best valid cold DRAM read "
           f"(copy) of the run, taken at the fast edge of its noise band (bytes / first-quartile time): the ceilings "
           f"pass before the sweep (R {tb(rc.pass_read)}, C {tb(rc.pass_copy)} TB/s) and the sweep's ceiling rows "
           f"below (contiguous kernels, cold, working set >= 8 x L2; experiments/peers/run_ceilings.py).", "",
           "| kernel | MiB | median us | TB/s (median) | TB/s (fast edge) | % of its ceiling |", "|---|---:|---:|---:|---:|---:|"]
    df = r.index
    # The ok rows, and ceiling rows a sweep without the run-ceiling rule recorded as failed for
    # beating the pass (they are what R is).
    raised = ceiling_rows(df)
    keys = set(raised["key"]) if raised is not None and not raised.empty else set()
    bw = df[(df["kind"] == "bandwidth") & ((df["status"] == "ok") | df["key"].isin(keys))].copy()
    if bw.empty:
        return out + ["", "(no bandwidth rows in this file)", ""]
    moved = bw["working_set_bytes"].astype(float)
    bw["fast"] = moved / (bw["q1_us"].astype(float) * 1e-6)
    bw = bw.sort_values("fast", ascending=False)
    for _, row in bw.iterrows():
        ceil = R if row["op"] == "read" else C
        out.append(f"| {row.get('kernel', '?')} | {int(row['mib'])} | {us(float(row['median_us']))} | "
                   f"{tb(float(row['bytes_per_s']))} | {tb(float(row['fast']))} | "
                   f"{100 * float(row['fast']) / ceil:.1f} |")
    return out + [""]


def crosscheck(kvlab_path: str, py_path: str) -> list:
    py = load(py_path)
    a = py.attrs
    tol = float(a.get("crosscheck_tolerance", 0.02))
    df = py.index
    out = [f"## Two-timer cross-check (tolerance {tol:.0%})", "",
           "The same operation timed through gpu/bench (`kvlab sweep experiments/configs/timer_check.ini`) and "
           "through experiments/peers/peer_timer.py (`decode_peers.py crosscheck`).", ""]
    diag = "python_own_stream_us" in df.columns and df["python_own_stream_us"].notna().any()
    inproc = "cpp_in_process_us" in df.columns and df["cpp_in_process_us"].notna().any()
    head = "| op | MiB | kvlab us | python us | python / kvlab - 1 | verdict |"
    rule = "|---|---:|---:|---:|---:|---|"
    tol_abs = float(a.get("crosscheck_tolerance_abs_us", 0.0) or 0.0)
    if tol_abs > 0:
        out[0] = f"## Two-timer cross-check (tolerance max({tol:.0%}, {tol_abs:.2f} us))"
    if inproc:
        out[-2] += (" The C++ column times the same operation through gpu/bench inside the Python timer's process "
                    "(kvlab.bench); the Python timer must agree with both.")
        head += " C++ in one process us | python / C++ in one process - 1 |"
        rule += "---:|---:|"
    if diag:
        head += " python, own stream | python, fresh flush buffer | python stamped: events | in-kernel |"
        rule += "---:|---:|---:|---:|"
    out += [head, rule]
    for _, r in df.iterrows():
        if r["status"] == "skipped":
            continue
        line = (f"| {r['op']} {r['load']} | {int(r['mib'])} | {us(float(r['kvlab_median_us']))} | "
                f"{us(float(r['median_us']))} | {100 * float(r['rel_diff_vs_kvlab']):+.2f} % | "
                f"{'ok' if r['status'] == 'ok' else 'DISAGREE'} |")
        if inproc:
            line += (f" {us(float(r.get('cpp_in_process_us', math.nan)))} |"
                     f" {100 * float(r.get('rel_diff_in_process', math.nan)):+.2f} % |")
        if diag:
            line += "".join(f" {us(float(r.get(c, math.nan)))} |" for c in
                            ("python_own_stream_us", "python_fresh_buffers_us", "python_stamped_events_us",
                             "python_in_kernel_us"))
        out.append(line)
    worst = float(a.get("crosscheck_worst", math.nan))
    bad = int((df["status"] == "failed").sum())
    worst_in = (f", {100 * float(a.get('crosscheck_worst_in_process', math.nan)):.2f} % in one process"
                if inproc else "")
    bound = f"max({tol:.0%}, {tol_abs:.2f} us)" if tol_abs > 0 else f"{tol:.0%}"
    out += ["", f"Worst difference {100 * worst:.2f} % against the sweep{worst_in}: "
            f"{'AGREE' if bad == 0 else 'DISAGREE'} within {bound} "
            f"({len(df) - int((df['status'] == 'skipped').sum())} operations).", ""]
    return out


def flush_log(path: str) -> list:
    keep = [ln.rstrip("\n") for ln in open(path) if ln.startswith(("[flush]", "[stamps]", "[streams]", "[bulk]"))]
    if not keep:
        return []
    return ["## Flush test and timer overhead (gpu_tests L2Flush.*, BenchHarness.*)", "", "```", *keep, "```", ""]


def main(argv) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("perf_sweep")
    ap.add_argument("timer_check")
    ap.add_argument("crosscheck")
    ap.add_argument("--flush-log", default="")
    a = ap.parse_args(argv[1:])
    for p in [a.perf_sweep, a.timer_check, a.crosscheck] + ([a.flush_log] if a.flush_log else []):
        if not os.path.isfile(p):
            print(f"timing_report.py: error: {p}: no such file", file=sys.stderr)
            return 2
    try:
        lines = ["# How the H100 performance run was timed", "",
                 "Generated by experiments/peers/timing_report.py (experiments/peers/adopt_perf_run.sh) from "
                 "data/perf/h100_perf_sweep.h5, h100_timer_check.h5 and h100_crosscheck.h5; do not edit.", ""]
        lines += ceilings(a.perf_sweep)
        lines += crosscheck(a.timer_check, a.crosscheck)
        if a.flush_log:
            lines += flush_log(a.flush_log)
    except (ResultFileError, OSError, KeyError) as e:
        print(f"timing_report.py: error: {e}", file=sys.stderr)
        return 2
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

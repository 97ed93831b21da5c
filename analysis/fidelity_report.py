"""The decode-attention fidelity report: experiments/calibrate/FIDELITY.md, generated.

Reads ONLY the HDF5 files written by `kvlab calibrate` (one calibrate point each) and writes the
Markdown document: summary (uncalibrated, pooled, calibrated, leave-one-out), median |error| by
group, per version, peers, holdout splits, the records above 10 % leave-one-out, and every row.
Every number in the document comes from those files, so it cannot go stale when the data/perf
run is replaced: regenerate it with experiments/calibrate/make_fidelity.sh.

    python3 -m analysis.fidelity_report MAIN.h5 [OTHER.h5 ...] --markdown OUT.md

Each file is classified by its calibrate point's own parameters: exactly one file must be the
main calibration (version=best, holdout=none); version=NAME files are the per-version table
(peer:* versions the peers table); holdout=EXPR files the train/test splits.

The summary numbers are recomputed from each point's per-record trace ("fidelity") and checked
against the point's index columns (err_median, err_loo_median, ...): a disagreement is an error,
not a footnote.
"""
from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass

import numpy as np
import pandas as pd

from analysis.load import ResultFileError, load

# Issue #6 target: median |error| of the cost model.
TARGET = 0.10
# Records whose leave-one-out |error| exceeds this are listed one by one.
OUTLIER = 0.10
# Call-size groups (bytes moved by one decode call), edges in MB (1e6 bytes).
SIZE_EDGES_MB = (20.0, 300.0)
# The trace columns this report needs (analysis/figures/cost_model.py FIDELITY_COLUMNS plus the shape).
NEEDED = ["label", "version", "kv_format", "lengths", "graph", "batch", "context", "heldout", "bytes",
          "measured_s", "predicted_uncalibrated_s", "predicted_pooled_s", "predicted_s", "predicted_loo_s"]
# What a standard holdout tests (make_fidelity.sh runs these); other expressions get no gloss.
HOLDOUT_NOTES = {
    "context >= 32768": "extrapolate to long contexts",
    "batch >= 64": "extrapolate to large batches",
    "lengths == 'mixed' || block_size != 16 || gqa_group != 4": "mixed lengths, block size, GQA group",
    "graph == 'on'": "no CUDA-graph record fitted: the eager overhead is used",
    "kv_format == 'nvfp4'": "format not fitted: the fallback efficiency is used",
}
REGENERATE = "KVLAB=build/experiments/kvlab experiments/calibrate/make_fidelity.sh"


class ReportError(Exception):
    """The input cannot make the report: wrong file kind, missing columns, inconsistent numbers."""


@dataclass
class Calibration:
    path: str
    point: pd.Series      # the calibrate point's index row
    trace: pd.DataFrame   # one row per record ("fidelity")
    formats: pd.DataFrame  # calibrated efficiency per format ("formats")

    @property
    def version(self) -> str:
        return str(self.point["version"])

    @property
    def holdout(self) -> str:
        return str(self.point["holdout"])

    @property
    def fitted(self) -> pd.DataFrame:
        return self.trace[self.trace["heldout"] == 0]

    @property
    def heldout(self) -> pd.DataFrame:
        return self.trace[self.trace["heldout"] == 1]


def read_calibration(path: str) -> Calibration:
    r = load(path)
    cal = r.ok("calibrate")
    if len(cal) != 1:
        raise ReportError(f"{path}: expected one calibrate point (a `kvlab calibrate --out` file), found {len(cal)}")
    point = cal.iloc[0]
    trace = r.trace(point, "fidelity")
    missing = [c for c in NEEDED if c not in trace.columns]
    if missing:
        raise ReportError(f"{path}: calibrate point {point['group']} lacks fidelity columns {', '.join(missing)}")
    c = Calibration(path=path, point=point, trace=trace, formats=r.trace(point, "formats"))
    check_summary(c)
    return c


def abs_err(d: pd.DataFrame, col: str) -> pd.Series:
    return (d[col] - d["measured_s"]).abs() / d["measured_s"]


def summary_from_trace(c: Calibration) -> dict:
    """The calibrate point's summary metrics, recomputed from its trace (fitted records)."""
    f = c.fitted
    return {
        "err_uncalibrated_median": float(np.median(abs_err(f, "predicted_uncalibrated_s"))),
        "err_uncalibrated_max": float(abs_err(f, "predicted_uncalibrated_s").max()),
        "err_pooled_median": float(np.median(abs_err(f, "predicted_pooled_s"))),
        "err_pooled_max": float(abs_err(f, "predicted_pooled_s").max()),
        "err_median": float(np.median(abs_err(f, "predicted_s"))),
        "err_max": float(abs_err(f, "predicted_s").max()),
        "err_loo_median": float(np.median(abs_err(f, "predicted_loo_s"))),
        "err_loo_max": float(abs_err(f, "predicted_loo_s").max()),
    }


def check_summary(c: Calibration) -> None:
    if int(c.point["records"]) != len(c.trace):
        raise ReportError(f"{c.path}: the point says {int(c.point['records'])} records, its trace has {len(c.trace)}")
    for k, v in summary_from_trace(c).items():
        if not np.isclose(float(c.point[k]), v, rtol=1e-9, atol=1e-12):
            raise ReportError(f"{c.path}: index column {k} = {c.point[k]!r} but the trace gives {v!r}")


def pct(x: float, signed: bool = False) -> str:
    return f"{100 * x:+.1f} %" if signed else f"{100 * x:.1f} %"


def md_table(header: list[str], align: str, rows: list[list[str]]) -> list[str]:
    """align: one char per column, 'l' or 'r'."""
    sep = ["---" if a == "l" else "---:" for a in align]
    out = ["| " + " | ".join(header) + " |", "|" + "|".join(sep) + "|"]
    out += ["| " + " | ".join(str(x).replace("|", "\\|") for x in r) + " |" for r in rows]
    return out


def efficiencies(c: Calibration) -> str:
    return ", ".join(f"{f} {e:.3f}" for f, e in zip(c.formats["kv_format"], c.formats["efficiency"]))


def calibrated_terms(c: Calibration) -> str:
    p = c.point
    fixed = f"{p['fixed_us']:.2f} us eager"
    if int(p["graph_fixed_fitted"]):
        fixed += f" / {p['graph_fixed_us']:.2f} us CUDA graph"
    return f"{fixed} + bytes / (eff(format) R); eff {efficiencies(c)}"


def size_group(mb: float) -> str:
    lo, hi = SIZE_EDGES_MB
    return f"calls under {lo:g} MB" if mb < lo else (f"calls of {lo:g}-{hi:g} MB" if mb <= hi else f"calls over {hi:g} MB")


def groups(c: Calibration) -> list[tuple[str, pd.DataFrame]]:
    t = c.fitted
    out = [(f"format {f}", t[t["kv_format"] == f]) for f in c.formats["kv_format"]]
    mb = t["bytes"] / 1e6
    lo, hi = SIZE_EDGES_MB
    out += [(size_group(lo / 2), t[mb < lo]), (size_group(lo), t[(mb >= lo) & (mb <= hi)]),
            (size_group(hi * 2), t[mb > hi])]
    out += [("mixed-length batches", t[t["lengths"] == "mixed"]), ("CUDA-graph calls", t[t["graph"] == "on"])]
    return [(n, d) for n, d in out if not d.empty]


def version_rows(cals: list[Calibration]) -> list[list[str]]:
    rows = []
    for c in sorted(cals, key=lambda c: c.version):
        p = c.point
        rows.append([f"`{c.version}`", str(int(p["records"])), pct(p["err_loo_median"]), pct(p["err_loo_max"]),
                     pct(p["err_pooled_loo_median"]), pct(p["err_uncalibrated_median"]),
                     f"{p['fixed_us']:.2f}" + (f" / {p['graph_fixed_us']:.2f}" if int(p["graph_fixed_fitted"]) else ""),
                     efficiencies(c)])
    return rows


VERSION_HEADER = ["version", "records", "calibrated LOO median", "calibrated LOO max", "pooled LOO median",
                  "uncalibrated median", "fixed us (eager / graph)", "efficiency (achieved / R)"]


def outlier_classes(out: pd.DataFrame) -> list[tuple[str, str, pd.DataFrame]]:
    """The records above OUTLIER split by format class (NVFP4 or not) and by the side of the
    prediction: (class key, description, records)."""
    res = []
    for fkey, fname, d in (("other", "BF16/FP8", out[out["kv_format"] != "nvfp4"]),
                           ("nvfp4", "NVFP4", out[out["kv_format"] == "nvfp4"])):
        high = d["predicted_loo_s"] > d["measured_s"]
        sides = [("high", "predicted above the measurement (measured faster)", d[high]),
                 ("low", "predicted below the measurement (measured slower)", d[~high])]
        if fkey == "nvfp4":  # the per-sequence part (too slow) first: the other side follows from it
            sides.reverse()
        for skey, sname, e in sides:
            if e.empty:
                continue
            res.append((f"{fkey}_{skey}", f"{fname}, {sname}: {len(e)} records, "
                        f"{e['bytes'].min() / 1e6:.1f}-{e['bytes'].max() / 1e6:.1f} MB per call, measured "
                        f"{e['measured_s'].min() * 1e6:.1f}-{e['measured_s'].max() * 1e6:.1f} us, LOO error "
                        f"{pct(abs_err(e, 'predicted_loo_s').min())}-{pct(abs_err(e, 'predicted_loo_s').max())}; "
                        f"batch {', '.join(str(x) for x in sorted(set(e['batch'])))}, context "
                        f"{', '.join(str(x) for x in sorted(set(e['context'])))}.", e))
    return res


# Likely cause of each class of large error (hypotheses from the kernels' structure, not modelled);
# only the classes the data shows are printed.
CAUSES = {
    "other_high": "the fixed per-call time ({fixed}, fitted) is mostly launch and ramp-up latency, which overlaps "
                  "with the data stream once a call lasts longer than it; the additive model counts it in full, so "
                  "calls only a few times that long come out too slow.",
    "nvfp4_low": "NVFP4 time has a per-sequence part (the dequantizing 2-stage pipeline restarts for every "
                 "(sequence, head) work item) that bytes do not capture: short sequences at large batch, and the "
                 "smallest calls, run slower than their bytes say.",
    "nvfp4_high": "the one NVFP4 efficiency is fitted across short and long sequences alike; a per-sequence "
                  "cost on short sequences lowers it, so the long, large calls come out too slow.",
}


def render(main: Calibration, versions: list[Calibration], peers: list[Calibration], holdouts: list[Calibration],
           skipped: list[str]) -> str:
    p, t = main.point, main.trace
    R = float(p["fit_read_ceiling_bytes_per_s"])
    fm = main.formats
    winners = sorted(set(t["version"]))
    L = ["# Decode-attention fidelity", "",
         "<!-- GENERATED by analysis/fidelity_report.py: do not edit by hand. Regenerate with",
         f"     {REGENERATE}  -->", "",
         f"Predicted vs measured decode-attention time on the {p['gpu_name']} ({p['device']}), from "
         f"`{p['sources']}` (the decode-attention performance run, experiments/configs/perf.ini). Target: median |error| <= {TARGET * 100:.0f} %.", "",
         "This document is generated from `kvlab calibrate` output files; every number below comes from them. "
         "To regenerate it after the data/perf files change:", "",
         "```sh", f"{REGENERATE}     # writes experiments/calibrate/FIDELITY.md", "```", "",
         "The main calibration, its figure, and its use by the simulator:", "",
         "```sh",
         f"build/experiments/kvlab calibrate {p['results'].replace('+', ' ')} --out results/cal.h5",
         "python3 -m analysis.figures results/cal.h5 --out results/fig    # simulated_vs_measured.{png,pdf}",
         "build/experiments/kvlab simulate experiments/configs/simulate_chat.ini --set calibration=results/cal.h5 --out sim.h5",
         "```", "",
         "## The model and the records", "",
         f"Records: {p['selection']} (every axis but the version is the shape; versions that won a shape: "
         f"{', '.join(winners)}); repeated measurements of a shape merged by their median. "
         f"{len(t)} records, {len(fm)} formats ("
         + ", ".join(f"{f} {int(n)}" for f, n in zip(fm["kv_format"], fm["records"])) + "), "
         f"{int((t['lengths'] == 'mixed').sum())} mixed-length batches (lengths reconstructed from the run seed and "
         f"checked against each point's `min_bytes`), {int((t['graph'] == 'on').sum())} CUDA-graph calls. "
         f"R = {R / 1e12:.3f} TB/s, {p['ceiling_source']}.", "",
         "Three models predict each record's time from the bytes it moves: the uncalibrated roofline "
         "(bytes / R); the pooled model the simulator used before (one fixed per-call time plus bytes at one "
         "fraction of R, fitted to all records); and the calibrated model (a fixed per-call time for eager and "
         "for CUDA-graph launches, plus bytes at a fitted fraction of R per KV format). "
         "Error = (predicted - measured) / measured; leave-one-out (LOO) refits the model without the record.", "",
         "## Summary", ""]
    L += md_table(["model", "terms", "median", "max", "median, leave-one-out", "max, leave-one-out"], "llrrrr", [
        ["uncalibrated roofline", "bytes / R", pct(p["err_uncalibrated_median"]), pct(p["err_uncalibrated_max"]), "-", "-"],
        ["pooled (the sim's original calibration, \"before\")",
         f"{p['pooled_fixed_us']:.2f} us + bytes / ({p['pooled_efficiency']:.3f} R)", pct(p["err_pooled_median"]),
         pct(p["err_pooled_max"]), pct(p["err_pooled_loo_median"]), "-"],
        ["calibrated (\"after\")", calibrated_terms(main), pct(p["err_median"]), pct(p["err_max"]),
         f"**{pct(p['err_loo_median'])}**", pct(p["err_loo_max"])]])
    met = lambda x: "met" if x <= TARGET else "NOT met"
    L += ["", f"Target (median <= {TARGET * 100:.0f} %, out of sample): pooled {pct(p['err_pooled_loo_median'])} "
          f"({met(p['err_pooled_loo_median'])}), calibrated {pct(p['err_loo_median'])} ({met(p['err_loo_median'])}). "
          f"Formats without a fitted record would use the fallback efficiency {p['fallback_efficiency']:.3f}.", ""]

    L += ["## Median |error| by group", "",
          "Calibrated: leave-one-out; pooled and uncalibrated: in-sample.", ""]
    grows, weak = [], []
    for name, d in groups(main):
        loo, pooled = np.median(abs_err(d, "predicted_loo_s")), np.median(abs_err(d, "predicted_pooled_s"))
        grows.append([name, str(len(d)), pct(loo), pct(pooled), pct(np.median(abs_err(d, "predicted_uncalibrated_s")))])
        if pooled > TARGET and not name.startswith("calls"):
            weak.append(f"{name} ({pct(pooled)} pooled, {pct(loo)} calibrated)")
    L += md_table(["group", "records", "calibrated LOO", "pooled", "uncalibrated"], "lrrrr", grows)
    L += [""]
    if weak:
        L += ["Why the pooled model was extended: one achieved bandwidth and one overhead for every call cannot "
              "describe formats that run at different fractions of R, nor CUDA-graph launches. Groups (format, "
              f"lengths, graph) where the pooled median exceeds {TARGET * 100:.0f} %: " + "; ".join(weak) + ".", ""]

    L += ["## Per version", "",
          "One calibration per kvlab version (`kvlab calibrate ... --version NAME`), same model, that version's "
          "measurements only (all of its shapes, not only those it won).", ""]
    L += md_table(VERSION_HEADER, "lrrrrrrl", version_rows(versions)) if versions else ["(no per-version calibration given)"]
    L += [""]
    bad = [c for c in versions if c.point["err_pooled_loo_median"] > TARGET]
    if bad:
        L += ["Versions the pooled model misses by more than the target: " + "; ".join(
            f"`{c.version}` (pooled LOO {pct(c.point['err_pooled_loo_median'])}, calibrated LOO "
            f"{pct(c.point['err_loo_median'])}; formats at {efficiencies(c)} of R)" for c in bad) + ".", ""]

    L += ["## Peers", "",
          "The same calibration of the peers (PyTorch SDPA backends on the same GPU) "
          "(`kvlab calibrate PEERS.h5 --version peer:NAME`)" + (f", from `{peers[0].point['sources']}`" if peers else "")
          + ".", ""]
    L += md_table(VERSION_HEADER, "lrrrrrrl", version_rows(peers)) if peers else ["(no peer calibration given)"]
    if skipped:
        L += ["", "Not calibrated: " + "; ".join(skipped) + "."]
    L += [""]

    L += ["## Train/test splits", "",
          "`kvlab calibrate ... --holdout EXPR`: the model is fitted on the other records; median |error| on the "
          "held-out records (calibrated, pooled, uncalibrated), max |error| of the calibrated model on them.", ""]
    hrows, limits = [], []
    for c in holdouts:
        h = c.heldout
        if len(h) != int(c.point["heldout_records"]):
            raise ReportError(f"{c.path}: heldout_records = {c.point['heldout_records']} but the trace marks {len(h)}")
        cal_med = float(np.median(abs_err(h, "predicted_s")))
        note = HOLDOUT_NOTES.get(c.holdout, "")
        hrows.append([f"`{c.holdout}`" + (f" ({note})" if note else ""), str(len(h)), pct(cal_med),
                      pct(abs_err(h, "predicted_s").max()), pct(np.median(abs_err(h, "predicted_pooled_s"))),
                      pct(np.median(abs_err(h, "predicted_uncalibrated_s")))])
        if cal_med > TARGET:
            limits.append(f"`{c.holdout}` ({pct(cal_med)})")
    L += md_table(["held out", "records", "calibrated", "calibrated max", "pooled", "uncalibrated"], "lrrrrr", hrows) \
        if hrows else ["(no holdout calibration given)"]
    L += [""]
    if limits:
        L += ["Splits above the target: " + ", ".join(limits) + ". These are the model's limits: what the fit "
              "never saw (a format's achieved bandwidth, the CUDA-graph overhead) must be measured; the model "
              "cannot infer it from the other records.", ""]

    out = t[t["heldout"] == 0]
    out = out[abs_err(out, "predicted_loo_s") > OUTLIER]
    L += ["## What the remaining errors are", "",
          f"{len(out)} of {len(t)} records are above {OUTLIER * 100:.0f} % (leave-one-out):", ""]
    classes = outlier_classes(out)
    L += [f"- {text}" for _, text, _ in classes]
    sgn = lambda r, col: pct((r[col] - r["measured_s"]) / r["measured_s"], True)
    if classes:
        L += ["", "Likely causes (hypotheses from the kernels' structure, not modelled):"]
        L += [f"- {text.split(':')[0]}: " + CAUSES[key].format(fixed=f"{p['fixed_us']:.2f} us eager")
              for key, text, _ in classes if key in CAUSES]
        L += ["", "A per-sequence term per format was tried on an earlier run of this data (a prototype, not in "
              "kvlab): it did not lower the leave-one-out median and fitted negative per-sequence costs for BF16 "
              "and FP8, so it was not adopted.", ""]
    L += md_table(["record (version layout format batch context block group)", "MB", "measured us", "calibrated us",
                   "LOO us", "err calibrated", "err LOO"], "lrrrrrr",
                  [[r["label"], f"{r['bytes'] / 1e6:.2f}", f"{r['measured_s'] * 1e6:.2f}", f"{r['predicted_s'] * 1e6:.2f}",
                    f"{r['predicted_loo_s'] * 1e6:.2f}", sgn(r, "predicted_s"), sgn(r, "predicted_loo_s")]
                   for _, r in out.iterrows()])

    L += ["", "## Rows", "", "Predictions in microseconds; errors signed, (predicted - measured) / measured.", ""]
    L += md_table(["record (version layout format batch context block group)", "MB", "measured us", "bytes/R us",
                   "pooled us", "calibrated us", "err bytes/R", "err pooled", "err calibrated", "err LOO"], "lrrrrrrrrr",
                  [[r["label"], f"{r['bytes'] / 1e6:.2f}", f"{r['measured_s'] * 1e6:.2f}",
                    f"{r['predicted_uncalibrated_s'] * 1e6:.2f}", f"{r['predicted_pooled_s'] * 1e6:.2f}",
                    f"{r['predicted_s'] * 1e6:.2f}", sgn(r, "predicted_uncalibrated_s"), sgn(r, "predicted_pooled_s"),
                    sgn(r, "predicted_s"), sgn(r, "predicted_loo_s")] for _, r in t.iterrows()])
    return "\n".join(L).rstrip() + "\n"


def classify(cals: list[Calibration]):
    main = [c for c in cals if c.version == "best" and c.holdout == "none"]
    if len(main) != 1:
        raise ReportError(f"need exactly one main calibration (version=best, holdout=none), got {len(main)}: "
                          + ", ".join(c.path for c in main))
    holdouts = [c for c in cals if c.holdout != "none"]
    bad = [c for c in holdouts if c.version != "best"]
    if bad:
        raise ReportError("holdout calibrations must use --version best: " + ", ".join(c.path for c in bad))
    single = [c for c in cals if c.version != "best"]
    versions = [c for c in single if not c.version.startswith("peer:")]
    peers = [c for c in single if c.version.startswith("peer:")]
    for group in (versions, peers, holdouts):
        keys = [c.version if group is not holdouts else c.holdout for c in group]
        dup = sorted({k for k in keys if keys.count(k) > 1})
        if dup:
            raise ReportError(f"calibrated twice: {', '.join(dup)}")
    srcs = {c.point["gpu_name"] for c in cals}
    if len(srcs) > 1:
        raise ReportError(f"calibrations of different GPUs: {', '.join(sorted(srcs))}")
    return main[0], versions, peers, holdouts


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python3 -m analysis.fidelity_report", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("calibrations", nargs="+", help="`kvlab calibrate --out` files (one main, any per-version, "
                    "peer and holdout calibrations)")
    ap.add_argument("--markdown", required=True, help="write the document here ('-': stdout)")
    ap.add_argument("--skipped", action="append", default=[],
                    help="'VERSION: why' for a version that could not be calibrated (listed in the document)")
    a = ap.parse_args(argv)
    try:
        cals = [read_calibration(p) for p in a.calibrations]
        text = render(*classify(cals), skipped=a.skipped)
    except (ReportError, ResultFileError) as e:
        print(f"fidelity_report: error: {e}", file=sys.stderr)
        return 2
    if a.markdown == "-":
        sys.stdout.write(text)
    else:
        with open(a.markdown, "w") as f:
            f.write(text)
        print(f"fidelity_report: wrote {a.markdown} ({len(cals)} calibrations)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

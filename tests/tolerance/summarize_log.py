#!/usr/bin/env python3
"""Folds a KVLAB_TOLERANCE_LOG file into one line per tolerance row.

Every check a test makes through tests/common/tolerance_check.h's within_tolerance(op, ...)
appends a CSV line when KVLAB_TOLERANCE_LOG names a file (the columns of
data/tolerance/cpu_measurements.csv, one case per line). This script keeps, per (op, format,
dtype, layers), the worst max |out - ref|, the worst needed atol (|out - ref| - rtol |ref|)
and the worst NMSE, with the number of checks and elements, so the file says how close the
tests come to each bound:

    KVLAB_TOLERANCE_LOG=/tmp/tol.log ctest --test-dir build -L cpu -LE slow
    python3 tests/tolerance/summarize_log.py /tmp/tol.log --out data/tolerance/cpu_checks.csv

Exit codes: 0 ok, 2 bad input (missing or malformed log).
"""
import argparse
import sys

COLUMNS = ["op", "format", "dtype", "layers", "subject", "dataset", "cases", "elements",
           "rtol", "max_abs", "needed_atol", "worst_nmse", "nmse_unit"]


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("log", help="the KVLAB_TOLERANCE_LOG file")
    ap.add_argument("--out", required=True, help="summary CSV to write")
    ap.add_argument("--dataset", default="every check of the CPU test suite (ctest -L cpu -LE slow)",
                    help="what the log measured (the dataset column)")
    a = ap.parse_args(argv)
    rows = {}
    try:
        with open(a.log) as f:
            for n, line in enumerate(f, 1):
                line = line.strip()
                if not line or line.startswith("#"):
                    continue
                p = line.split(",")
                if len(p) != len(COLUMNS):
                    print(f"summarize_log: {a.log}:{n}: {len(p)} fields, expected {len(COLUMNS)}",
                          file=sys.stderr)
                    return 2
                key = tuple(p[:4])
                r = rows.setdefault(key, {"tests": set(), "cases": 0, "elements": 0, "rtol": p[8],
                                          "max_abs": 0.0, "needed_atol": 0.0, "worst_nmse": 0.0})
                if r["rtol"] != p[8]:
                    print(f"summarize_log: {a.log}:{n}: rtol {p[8]} differs from {r['rtol']} "
                          f"for {key}: the table changed during the run", file=sys.stderr)
                    return 2
                r["tests"].add(p[4])
                r["cases"] += int(p[6])
                r["elements"] += int(p[7])
                for c in ("max_abs", "needed_atol", "worst_nmse"):
                    r[c] = max(r[c], float(p[COLUMNS.index(c)]))
    except OSError as e:
        print(f"summarize_log: {e}", file=sys.stderr)
        return 2
    except ValueError as e:
        print(f"summarize_log: malformed number in {a.log}: {e}", file=sys.stderr)
        return 2
    with open(a.out, "w") as f:
        f.write(f"# summarized by tests/tolerance/summarize_log.py from a KVLAB_TOLERANCE_LOG run\n")
        f.write(",".join(COLUMNS) + "\n")
        for key in sorted(rows):
            r = rows[key]
            subject = f"{len(r['tests'])} tests"
            f.write(",".join(list(key) + [subject, a.dataset.replace(",", ";"), str(r["cases"]),
                                          str(r["elements"]), r["rtol"], f"{r['max_abs']:.6g}",
                                          f"{r['needed_atol']:.6g}", f"{r['worst_nmse']:.6g}",
                                          "check"]) + "\n")
    print(f"{len(rows)} rows -> {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

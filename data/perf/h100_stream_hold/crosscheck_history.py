#!/usr/bin/env python3
"""The two-timer cross-check of every adopted fair run, from the git history of
data/perf/h100_crosscheck.h5 (one version per adopted run): per run and operation, the Python
timer's median minus the `kvlab sweep` process's, in us. Prints CSV (commit of the adoption,
commit of the binaries, op, MiB, kvlab us, python us, python - kvlab us).

    python3 data/perf/h100_stream_hold/crosscheck_history.py > data/perf/h100_stream_hold/crosscheck_history.csv

Run from the repository root (needs git, h5py, pandas)."""
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))
sys.path.insert(0, ROOT)
from analysis.load import load  # noqa: E402

PATH = "data/perf/h100_crosscheck.h5"


def main() -> int:
    commits = subprocess.run(["git", "-C", ROOT, "log", "--format=%h", "--", PATH], capture_output=True, text=True,
                             check=True).stdout.split()
    print("adopted_in,binaries,op,mib,kvlab_us,python_us,python_minus_kvlab_us")
    for c in reversed(commits):
        blob = subprocess.run(["git", "-C", ROOT, "show", f"{c}:{PATH}"], capture_output=True, check=True).stdout
        with tempfile.NamedTemporaryFile(suffix=".h5") as f:
            f.write(blob)
            f.flush()
            r = load(f.name)
            src = str(r.attrs.get("git_commit", ""))[:7]
            for _, x in r.index.iterrows():
                if x["status"] == "skipped" or "kvlab_median_us" not in x:
                    continue
                print(f"{c},{src},{x['op']},{int(x['mib'])},{x['kvlab_median_us']:.3f},{x['median_us']:.3f},"
                      f"{x['median_us'] - x['kvlab_median_us']:+.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""analysis.fidelity_report (experiments/calibrate/FIDELITY.md, generated) on `kvlab calibrate`
outputs of the shipped H100 run: the summary numbers are the calibrate point's own index columns,
a holdout split's numbers are kvlab's console line, every record is a row, and bad input (no
main calibration, a file that is not a calibration, an index that disagrees with its trace) exits
with code 2 and a message."""
import re
import shutil
import subprocess

import h5py
import pytest

from analysis import fidelity_report as fr
from analysis.load import load
from tests.python.conftest import ROOT
from tests.python.test_calibrate import H100_RUN, calibration  # noqa: F401  (module fixture: kvlab calibrate)

PEERS_RUN = f"{ROOT}/data/perf/h100_perf_peers.h5"
HOLDOUT = "graph == 'on'"


@pytest.fixture(scope="module")
def extra_calibrations(kvlab_bin, tmp_path_factory):
    """A per-version, a peer and a holdout calibration of the shipped runs; and the holdout's console."""
    d = tmp_path_factory.mktemp("fid")
    version = load(H100_RUN).ok("decode_attention")["version"].iloc[0]
    peer = sorted(set(load(PEERS_RUN).ok("decode_attention")["version"]))[0]
    out = {}
    for name, args in (("version", [H100_RUN, "--version", version]), ("peer", [PEERS_RUN, "--version", peer]),
                       ("holdout", [H100_RUN, "--holdout", HOLDOUT])):
        r = subprocess.run([kvlab_bin, "calibrate", *args, "--no-rows", "--out", str(d / f"{name}.h5")],
                           capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stdout + r.stderr
        out[name] = (str(d / f"{name}.h5"), r.stdout)
    return out


def _report(tmp_path, files):
    md = tmp_path / "FIDELITY.md"
    assert fr.main([*map(str, files), "--markdown", str(md)]) == 0
    return md.read_text()


def _summary_rows(text):
    """The summary table: {model: [cells]}."""
    sec = text.split("## Summary", 1)[1].split("##", 1)[0]
    rows = [[c.strip() for c in ln.strip("|").split(" | ")] for ln in sec.splitlines() if ln.startswith("| ")]
    return {r[0]: r for r in rows[1:]}


def test_summary_equals_the_calibrate_point(calibration, extra_calibrations, tmp_path):
    out, stdout = calibration
    text = _report(tmp_path, [out] + [f for f, _ in extra_calibrations.values()])
    p = load(str(out)).ok("calibrate").iloc[0]
    pc = lambda k: f"{100 * p[k]:.1f} %"
    s = _summary_rows(text)
    unc, pooled, cal = (next(v for k, v in s.items() if k.startswith(m)) for m in ("uncalibrated", "pooled", "calibrated"))
    assert unc[2:4] == [pc("err_uncalibrated_median"), pc("err_uncalibrated_max")]
    assert pooled[2:5] == [pc("err_pooled_median"), pc("err_pooled_max"), pc("err_pooled_loo_median")]
    assert cal[2:6] == [pc("err_median"), pc("err_max"), f"**{pc('err_loo_median')}**", pc("err_loo_max")]
    assert f"{p['fixed_us']:.2f} us eager" in cal[1] and f"{p['pooled_fixed_us']:.2f} us" in pooled[1]
    # ... and they are kvlab's console summary.
    for label, k in (("uncalibrated roofline (bytes / R)", "err_uncalibrated_median"),
                     ("calibrated, leave-one-out", "err_loo_median"), ("pooled, leave-one-out", "err_pooled_loo_median")):
        m = re.search(re.escape(label) + r"\s+([0-9.]+)%", stdout)
        assert m and m.group(1) + " %" == pc(k), (label, stdout[-1500:])
    assert f"R = {p['fit_read_ceiling_bytes_per_s'] / 1e12:.3f} TB/s" in text
    assert f"`{p['sources']}`" in text and "experiments/calibrate/make_fidelity.sh" in text
    # Every record is one row of the rows table; the outlier count is the trace's.
    t = load(str(out)).trace(p, "fidelity")
    rows = text.split("## Rows", 1)[1]
    # A record's label starts with its version: a registry name (v...) or auto.
    assert sum(1 for ln in rows.splitlines() if ln.startswith(("| v", "| auto "))) == len(t) == int(p["records"])
    assert f"{int((t['err_loo'].abs() > fr.OUTLIER).sum())} of {len(t)} records are above 10 %" in text


def test_version_peer_and_holdout_tables(calibration, extra_calibrations, tmp_path):
    out, _ = calibration
    text = _report(tmp_path, [out] + [f for f, _ in extra_calibrations.values()])
    for name in ("version", "peer"):
        q = load(extra_calibrations[name][0]).ok("calibrate").iloc[0]
        line = next(ln for ln in text.splitlines() if ln.startswith(f"| `{q['version']}` |"))
        assert f"| {100 * q['err_loo_median']:.1f} % | {100 * q['err_loo_max']:.1f} % |" in line, line
    section = text.split("## Peers")[1].split("##")[0]
    assert "peer:" in section and "(no peer calibration given)" not in section
    # The holdout row is what kvlab printed for the held-out records.
    path, console = extra_calibrations["holdout"]
    m = re.search(r"held out \((\d+) records, not fitted\): median \|err\| uncalibrated ([0-9.]+)%, pooled ([0-9.]+)%, "
                  r"calibrated ([0-9.]+)% \(max ([0-9.]+)%\)", console)
    assert m, console
    n, unc, pooled, cal, cmax = m.groups()
    line = next(ln for ln in text.splitlines() if ln.startswith("| `graph == 'on'`"))
    assert line.endswith(f"| {n} | {cal} % | {cmax} % | {pooled} % | {unc} % |"), line


def test_bad_input_exit_code_2(calibration, extra_calibrations, tmp_path, capsys):
    out, _ = calibration
    md = tmp_path / "x.md"
    cases = [
        ([extra_calibrations["holdout"][0]], "need exactly one main calibration"),
        ([out, out], "need exactly one main calibration"),
        ([H100_RUN], "expected one calibrate point"),
        ([tmp_path / "missing.h5"], "no such file"),
    ]
    # A calibration whose index disagrees with its trace.
    forged = tmp_path / "forged.h5"
    shutil.copy(out, forged)
    with h5py.File(forged, "r+") as f:
        f["index/err_loo_median"][0] = 0.5
    cases.append(([forged], "index column err_loo_median"))
    for files, needle in cases:
        assert fr.main([*map(str, files), "--markdown", str(md)]) == 2, files
        err = capsys.readouterr().err
        assert needle in err, (needle, err)
        assert not md.exists()

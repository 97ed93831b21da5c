"""analysis.compare on timed points: a median that moved by +-20 % with tight quartiles is a
regression / improvement, a move inside the noise band (overlapping quartiles) or below the
time tolerance is not, points timed by another method are not compared, a timing that became
invalid (failed) is a regression, and missing and new points are listed. The files are
written in the kvlab schema by the peer writer (experiments/peers/peer_results.py), with
known timings; no GPU needed."""
import os
import sys

import pytest

from analysis import compare

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "experiments", "peers"))
import peer_results  # noqa: E402

AXES = ["batch", "context", "version"]
NUMERIC = {"batch", "context"}
METRICS = ["median_us", "q1_us", "q3_us", "rel_iqr", "cold_l2", "rel_l2", "step_us", "step_us_q1", "step_us_q3"]


def timed(batch, median, rel_iqr=0.01, version="v5", flush="read_allocate", status="ok", reason="", rel_l2=1e-3,
          kind="decode_attention", step=False):
    half = median * rel_iqr / 2
    r = dict(study="s", kind=kind, batch=batch, context=8192, version=version, status=status, reason=reason,
             rel_l2=rel_l2, cold_l2=1.0 if flush != "none" else 0.0, flush=flush, rel_iqr=rel_iqr)
    if step:
        r.update(step_us=median, step_us_q1=median - half, step_us_q3=median + half)
    else:
        r.update(median_us=median, q1_us=median - half, q3_us=median + half)
    return r


def write(path, rows):
    peer_results.write_result_file(str(path), rows, {"device_name": "test"}, AXES, NUMERIC, METRICS, ["flush"])
    return str(path)


BASE = [
    timed(1, 100.0),                                # +20 %, tight bands      -> regression
    timed(2, 100.0),                                # -20 %                   -> improvement
    timed(3, 100.0),                                # +1 %, disjoint bands    -> same (below time_tol)
    timed(4, 100.0, rel_iqr=0.25),                  # +10 %, overlapping      -> noise
    timed(5, 100.0),                                # same flush? no: warm    -> not compared
    timed(6, 100.0),                                # becomes timing invalid  -> regression (status)
    timed(7, 100.0),                                # gone in NEW             -> missing
    timed(9, 5000.0, kind="decode_step", step=True),  # decode_step's own quartile columns, +20 % -> regression
]
NEW = [
    timed(1, 120.0),
    timed(2, 80.0),
    timed(3, 101.0, rel_iqr=0.002),
    timed(4, 110.0, rel_iqr=0.25),
    timed(5, 60.0, flush="none"),
    timed(6, 100.0, status="failed", reason="timing invalid: ..."),
    timed(8, 100.0),                                # only in NEW             -> new
    timed(9, 6000.0, kind="decode_step", step=True),
]


@pytest.fixture
def files(tmp_path):
    return write(tmp_path / "base.h5", BASE), write(tmp_path / "new.h5", NEW)


def verdicts(df):
    out = {}
    for _, r in df.iterrows():
        batch = int(r["key"].split("batch=")[1].split(",")[0])
        out.setdefault(batch, []).append(r["verdict"])
    return out


def test_timed_points_compare_by_their_noise_bands(files):
    v = verdicts(compare.compare(*files))
    assert v[1] == ["regression"]
    assert v[2] == ["improvement"]
    assert 3 not in v and 4 not in v  # below time_tol; inside the noise band
    assert len(v[5]) == 1 and v[5][0].startswith("timing method changed (read_allocate -> none)")
    assert v[6] == ["regression: ok -> failed"]
    assert v[7] == ["missing in new"] and v[8] == ["new in new"]
    assert v[9] == ["regression"]


def test_identical_files_compare_clean_and_the_cli_counts(files, capsys):
    base, new = files
    assert compare.compare(base, base).empty
    assert compare.main([base, base]) == 0
    assert compare.main([base, new]) == 1
    out = capsys.readouterr().out
    assert "3 regressions, 1 improvements, 1 points missing in new, 1 new points, 1 timed differently" in out
    assert "missing in new: s/decode_attention:batch=7" in out and "new in new: s/decode_attention:batch=8" in out


def test_a_looser_time_tolerance_hides_the_20_percent(files):
    v = verdicts(compare.compare(*files, time_tol=0.25))
    assert 1 not in v and 2 not in v and 9 not in v
    assert v[6] == ["regression: ok -> failed"]  # status changes never hide behind a tolerance

"""gpu/attention/stamps_table.py: per-block time stamps of decode calls summarised per shape
(medians over the calls after the first three), the merge's share after the last decode block,
and bad input refused with exit code 2."""
import lzma
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TOOL = os.path.join(ROOT, "gpu", "attention", "stamps_table.py")


def run(*args):
    return subprocess.run([sys.executable, TOOL, *args], capture_output=True, text=True, timeout=60)


def write_calls(path, calls=5, xz=False):
    """Two decode blocks and one merge block per call, times in ns from 10^9: block 0 runs
    [0, 90 us], its first tile at 4 us; block 1 [1, 100 us], first tile at 6 us; the merge is
    released 1 us after the last block and ends 3 us after it. Call 1 is slower (a warm-up)."""
    lines = []
    for c in range(1, calls + 1):
        base, slow = 10**9 + c * 10**6, (50_000 if c == 1 else 0)
        lines.append(f"{c},fp8_e4m3,16,8192,2,2,k,0,{base},{base + 4000},{base + 90000 + slow},3")
        lines.append(f"{c},fp8_e4m3,16,8192,2,2,k,1,{base + 1000},{base + 7000},{base + 100000 + slow},7")
        lines.append(f"{c},fp8_e4m3,16,8192,2,2,m,0,{base + 2000},{base + 101000 + slow},{base + 103000 + slow},0")
    text = "\n".join(lines) + "\n"
    if xz:
        path.write_bytes(lzma.compress(text.encode()))
    else:
        path.write_text(text)


def test_medians_per_shape_after_the_first_calls(tmp_path):
    f = tmp_path / "stamps.csv.xz"
    write_calls(f, xz=True)
    r = run(str(f))
    assert r.returncode == 0, r.stderr
    row = next(l for l in r.stdout.splitlines() if "fp8_e4m3" in l).split()
    # fmt seqs ctx splits | blocks span_k start_skew first_tile first_tile_max end_first
    # end_median sm_tail idle_pct merge_release merge_end span_all
    vals = [float(x) for x in row[4:]]
    assert vals[0] == 2.0          # blocks
    assert vals[1] == 100.0        # span_k: first start -> last end (the slow call left out)
    assert vals[2] == 1.0          # start skew
    assert vals[3] == 5.0          # median first tile of 4 and 6 us
    assert vals[4] == 6.0
    assert vals[7] == 5.0          # sm_tail: 101 - median(91, 101) = 5 us
    assert vals[8] == 5.0          # idle: SM 3 idle 10 of 100 us, SM 7 none -> 10 / 200
    assert vals[9] == 1.0          # merge released 1 us after the last decode block
    assert vals[10] == 3.0         # merge end
    assert vals[11] == 103.0       # the call's whole span


def test_bad_input_exits_2(tmp_path):
    r = run(str(tmp_path / "missing.csv"))
    assert r.returncode == 2 and "error" in r.stderr
    bad = tmp_path / "bad.csv"
    bad.write_text("1,bf16,1,512,1,1,x,0,1,2,3,0\n")
    r = run(str(bad))
    assert r.returncode == 2 and "not a stamps CSV" in r.stderr

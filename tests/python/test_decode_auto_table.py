"""gpu/attention/decode_auto_table.inc, the table `version = auto` picks from, is what its own
header's command makes of the files it names: the command is rerun on the repository's files
and every row must come back the same. A result file replaced under the same name (a later fair
run adopted as data/perf/h100_perf_sweep.h5) would change the table's source silently; this
catches it. Also: the tool refuses a missing file with exit code 2."""
import os
import shlex
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TABLE = os.path.join(ROOT, "gpu", "attention", "decode_auto_table.inc")


def rows(path):
    with open(path) as f:
        return [line.rstrip("\n") for line in f if line.startswith("{")]


def header_command():
    with open(TABLE) as f:
        for line in f:
            if line.startswith("// Command: "):
                return shlex.split(line[len("// Command: "):])
    raise AssertionError("decode_auto_table.inc has no '// Command:' line")


def test_the_table_is_what_its_command_makes_of_its_files(tmp_path):
    argv = header_command()
    assert argv[:2] == ["python3", "gpu/attention/decode_auto_table.py"], argv
    i = argv.index("--out")
    argv[i + 1] = str(tmp_path / "table.inc")
    files = [a for a in argv[2:i] if not a.startswith("--")]
    missing = [f for f in files if not os.path.exists(os.path.join(ROOT, f))]
    assert not missing, f"the table's command names files the repository lacks: {missing}"
    r = subprocess.run([sys.executable] + argv[1:], cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    want, got = rows(TABLE), rows(tmp_path / "table.inc")
    assert len(want) > 100
    diff = [(a, b) for a, b in zip(want, got) if a != b]
    assert len(want) == len(got) and not diff, (
        f"{len(want)} rows in the table, {len(got)} from its command; first differences: {diff[:3]}")


def test_a_missing_file_exits_2(tmp_path):
    r = subprocess.run([sys.executable, os.path.join(ROOT, "gpu", "attention", "decode_auto_table.py"),
                        str(tmp_path / "none.h5"), "--out", str(tmp_path / "t.inc")],
                       capture_output=True, text=True)
    assert r.returncode == 2
    assert "no such file" in r.stderr

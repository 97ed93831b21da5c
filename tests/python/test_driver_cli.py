"""The `kvlab` command line, end to end: results, bad input (exit code 2, nothing lost),
crash safety under SIGKILL with --resume, shards, workers and merge."""
import os
import re
import shutil
import signal
import subprocess
import time

import h5py
import pytest

from analysis.load import load


def rows(path):
    with h5py.File(path, "r") as f:
        n = f["index/key"].shape[0]
        for g in f["index/group"].asstr()[()]:
            assert g in f, f"index row names missing group {g}"
        return n


def keys(path):
    with h5py.File(path, "r") as f:
        return list(f["index/key"].asstr()[()])


def test_info_prints_self_check(run):
    r = run("info", "--kinds")
    assert r.returncode == 0, r.stderr
    assert "self-check: PASS" in r.stdout
    assert "quant_error" in r.stdout and "axis scheme" in r.stdout


def test_help_on_every_subcommand(run):
    for cmd in ("info", "sweep", "validate", "simulate", "merge", "recover"):
        r = run(cmd, "--help")
        assert r.returncode == 0 and "usage: kvlab " + cmd in r.stdout, (cmd, r.stdout, r.stderr)


def test_sweep_result_is_self_describing(small_results):
    with h5py.File(small_results, "r") as f:
        assert f.attrs["kvlab_schema"] == "kvlab.results"
        assert f.attrs["schema_version"] == 2
        for a in ("git_commit", "git_dirty", "compiler", "argv", "config_text", "device_name", "created_utc"):
            assert a in f.attrs, a
        assert "[quant]" in f.attrs["config_text"]
    r = load(str(small_results))
    assert len(r.index) == 8 + 4
    assert set(r.index["status"]) == {"ok"}
    q = r.ok("quant_error")
    assert (q["rel_l2_mean"] > 0).all() and (q["bytes_per_token"] > 0).all()
    # bf16 is far more accurate than 4-bit formats on the same data.
    by = q.groupby("scheme")["rel_l2_mean"].mean()
    assert by["bf16"] < by["fp8_e4m3_pt"] < by["mxfp4"]
    trace = r.trace(q.iloc[0], "rel_l2_per_token")
    assert trace.shape == (128,)


def test_dry_run_lists_points_and_estimate(run, small_config):
    r = run("sweep", small_config, "--dry-run", "--axis", "quant.tokens=pow2:5:7")
    assert r.returncode == 0, r.stderr
    assert "-- 28 points" in r.stdout and "estimated" in r.stdout
    assert "tokens=32" in r.stdout and "tokens=128" in r.stdout


def test_axis_override_zip_and_constraint(run, tmp_path):
    ini = tmp_path / "z.ini"
    ini.write_text("[f]\nkind = format_error\nformat = e4m3,e5m2,e2m1\ntokens = 8,16,32\nhead_dim = 16,32,64\n"
                   "zip = tokens, head_dim\nwhere = format != 'e5m2' or tokens > 8\n")
    r = run("sweep", ini, "--dry-run")
    assert "-- 8 points" in r.stdout, r.stdout + r.stderr
    assert "tokens=8 head_dim=16" in r.stdout and "tokens=8 head_dim=32" not in r.stdout


@pytest.mark.parametrize("args,message", [
    (["frobnicate"], "unknown subcommand"),
    (["sweep"], "missing CONFIG"),
    (["sweep", "/nonexistent/x.ini"], "cannot read sweep config"),
    (["sweep", "{cfg}", "--axis", "nope=1"], "unknown axis 'nope'"),
    (["sweep", "{cfg}", "--axis", "tokens=pow2:a:3"], "malformed range"),
    (["sweep", "{cfg}", "--axis", "tokens=range:9:3"], "empty range"),
    (["sweep", "{cfg}", "--axis", "quant.scheme=nope"], "unknown value 'nope'"),
    (["sweep", "{cfg}", "--axis", "tokens"], "expected NAME=VALUES"),
    (["sweep", "{cfg}", "--shard", "2/2"], "--shard"),
    (["sweep", "{cfg}", "--bogus"], "unrecognised option"),
    (["sweep", "{cfg}", "--only", "nosuch"], "unknown study"),
    (["sweep", "{bad}"], "malformed config"),
    (["sweep", "{badkind}"], "unknown kind"),
    (["sweep", "{cfg}", "--out", "{file}/sub/x.h5"], "output directory"),
    (["merge", "--out", "{tmp}/m.h5"], "no input files"),
])
def test_bad_input_exit_code_2(run, small_config, tmp_path, args, message):
    bad = tmp_path / "bad.ini"
    bad.write_text("[s]\nkind = quant_error\nthis line has no equals sign\n")
    badkind = tmp_path / "badkind.ini"
    badkind.write_text("[s]\nkind = warp_drive\n")
    afile = tmp_path / "afile"
    afile.write_text("x")
    subst = {"cfg": small_config, "bad": bad, "badkind": badkind, "file": afile, "tmp": tmp_path}
    r = run(*[a.format(**subst) for a in args])
    assert r.returncode == 2, (args, r.stdout, r.stderr)
    assert message in r.stderr, (message, r.stderr)


def test_existing_output_needs_resume_and_is_kept(run, small_config, small_results):
    before = open(small_results, "rb").read()
    r = run("sweep", small_config, "--out", small_results)
    assert r.returncode == 2 and "--resume" in r.stderr
    assert open(small_results, "rb").read() == before


def test_resume_refuses_other_schema_and_corrupt_files(run, small_config, small_results, tmp_path):
    other = tmp_path / "other.h5"
    with h5py.File(other, "w") as f:
        f["x"] = [1, 2, 3]
    before = open(other, "rb").read()
    r = run("sweep", small_config, "--out", other, "--resume")
    assert r.returncode == 2 and "not a kvlab result file" in r.stderr, r.stderr
    assert open(other, "rb").read() == before

    wrong = tmp_path / "wrong_version.h5"
    shutil.copy(small_results, wrong)
    with h5py.File(wrong, "a") as f:
        f.attrs["schema_version"] = 99
    r = run("sweep", small_config, "--out", wrong, "--resume")
    assert r.returncode == 2 and "schema_version 99" in r.stderr, r.stderr

    # A corrupt tail (the file cut short): a clear error, the bytes left as they were.
    torn = tmp_path / "torn.h5"
    data = open(small_results, "rb").read()
    torn.write_bytes(data[: len(data) * 2 // 3])
    before = open(torn, "rb").read()
    for args in (["sweep", small_config, "--out", torn, "--resume"], ["merge", "--out", tmp_path / "m.h5", torn]):
        r = run(*args)
        assert r.returncode == 2, (args, r.stdout, r.stderr)
        assert "torn" in r.stderr or "corrupt" in r.stderr or "damaged" in r.stderr or "truncated" in r.stderr, r.stderr
        assert open(torn, "rb").read() == before
    assert not os.path.exists(tmp_path / "m.h5")


def _opened_across_a_commit(err):
    """HDF5 takes a file's length when it opens it, before its shared lock: a reader whose open
    straddles an in-place commit that grew the file reads the new superblock against the old
    length and refuses the file as truncated (stored_eof past eof). A refusal, never a misread;
    the next open sees the commit whole."""
    m = re.search(r"truncated file: eof = (\d+), .*stored_eof = (\d+)", str(err))
    return m is not None and int(m.group(1)) < int(m.group(2))


def read_rows(path, timeout=10.0):
    """rows() through plain h5py while a writer commits: a commit changing pages in place holds
    the file's lock for milliseconds (HDF5 readers get "unable to lock file", errno 11), and an
    open that straddles a commit is refused as truncated (_opened_across_a_commit): wait and
    open again."""
    deadline = time.time() + timeout
    while True:
        try:
            return rows(path)
        except OSError as e:
            if not (isinstance(e, BlockingIOError) or _opened_across_a_commit(e)):
                raise
            if time.time() > deadline:
                raise
            time.sleep(0.002)


def test_sigkill_mid_sweep_then_resume(run, kvlab_bin, tmp_path):
    """Kill a real sweep with SIGKILL, several times, at seeded random moments while it
    commits point after point (tiny points: much of the time goes into commits, so kills
    land inside them). While it runs h5py reads the file directly: every read succeeds (after
    waiting out the lock of an in-place commit). After a kill the file is either the last
    commit, readable as is, or (a kill inside an in-place commit) poisoned: h5py refuses it as
    "not an HDF5 file" (never a torn file it could misread) until `kvlab recover` rolls the
    commit back. --resume then runs exactly the missing points."""
    import random
    seed = int(os.environ.get("KVLAB_TEST_SEED", "20240607"))
    print(f"seed {seed}")
    rng = random.Random(seed)
    ini = tmp_path / "long.ini"
    ini.write_text("[f]\nkind = format_error\nformat = e4m3,e5m2,e2m1\ndist = gaussian,laplace\n"
                   "tokens = range:16:800:16\nhead_dim = 64\n")
    out = tmp_path / "long.h5"
    total = 3 * 2 * 50
    kills, reads, prev, poisoned = 4, 0, 0, 0
    for k in range(kills):
        proc = subprocess.Popen([kvlab_bin, "sweep", ini, "--out", out, "--progress", "none"]
                                + (["--resume"] if k else []),
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        # Kill once a seeded number of new points is visible, after a seeded random pause
        # (0-30 ms: a point plus its commit take a few ms to tens of ms), so kills land at
        # random moments of the compute / commit cycle whatever the machine's speed.
        target, pause = prev + rng.randint(2, 15), rng.uniform(0.0, 0.03)
        deadline = time.time() + 60
        while time.time() < deadline and proc.poll() is None:
            if os.path.exists(out):
                n = read_rows(out)  # must never fail, whatever the writer is doing
                assert n >= prev
                reads += 1
                if n >= target:
                    break
        time.sleep(pause)
        assert proc.poll() is None, "the sweep finished before it could be killed: make it longer"
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        if open(out, "rb").read(8) == b"KVLABTRN":
            poisoned += 1
            assert os.path.exists(str(out) + ".rollback")
            with pytest.raises(OSError):
                h5py.File(out, "r")  # refused, not misread
        if os.path.exists(str(out) + ".rollback") or os.path.exists(str(out) + ".commit"):
            r = run("recover", out)
            assert r.returncode == 0 and "clean" in r.stdout, r.stdout + r.stderr
        killed_at = rows(out)  # readable as the kill (and the recovery) left it
        assert prev <= killed_at < total
        assert len(set(keys(out))) == killed_at
        prev = killed_at
    assert reads > 20, reads
    assert prev > 0
    print(f"{kills} kills, {poisoned} inside an in-place commit")
    r = run("sweep", ini, "--out", out, "--resume", "--progress", "plain")
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"{prev} of this sweep's {total} finished, {total - prev} to run" in r.stdout, r.stdout
    assert not os.path.exists(str(out) + ".commit")
    assert rows(out) == total
    assert len(set(keys(out))) == total
    res = load(str(out))
    assert len(res.runs) == kills + 1
    assert res.runs["finished_utc"].iloc[:kills].isna().all() and res.runs["finished_utc"].notna().iloc[kills]
    # Resuming a finished sweep runs nothing.
    r = run("sweep", ini, "--out", out, "--resume", "--progress", "none")
    assert r.returncode == 0 and "done: 0 points run" in r.stdout


def forge_journal(path, page_index, old_page, new_page, size):
    """What a commit killed while it rewrote one page in place leaves: the sealed journal of
    experiments/h5/durable.cpp (format KVLABRB2), tied to the file's device and inode."""
    import struct
    import zlib
    st = os.stat(path)
    crcs = b"".join(struct.pack("<I", zlib.crc32(new_page[i:i + 512])) for i in range(0, len(new_page), 512))
    body = (b"KVLABRB2" + struct.pack("<QQQQIIQ", st.st_dev, st.st_ino, size, size, 4096, 512, 1) +
            struct.pack("<QII", page_index * 4096, len(old_page), len(new_page)) + old_page + crcs)
    with open(str(path) + ".rollback", "wb") as f:
        f.write(body + struct.pack("<I", zlib.crc32(body)))


def test_interrupted_commit_is_rolled_back(run, small_results, small_config, tmp_path):
    """A sealed rollback journal left by a commit killed mid-write is undone on resume; a
    journal left next to another file of the same name is removed, never applied."""
    f = tmp_path / "j.h5"
    shutil.copy(small_results, f)
    good = open(f, "rb").read()
    garbage = b"\xff" * 4096
    forge_journal(f, 0, good[:4096], garbage, len(good))
    with open(f, "r+b") as fh:
        fh.write(garbage)
    with pytest.raises(Exception):
        load(str(f))
    r = run("recover", f)
    assert r.returncode == 0 and "rolled back" in r.stdout, r.stdout + r.stderr
    assert open(f, "rb").read() == good
    assert not os.path.exists(tmp_path / "j.h5.rollback")

    # The same journal, but the file was replaced since (another inode): not applied.
    forge_journal(f, 0, good[:4096], garbage, len(good))
    os.rename(f, tmp_path / "old.h5")
    shutil.copy(tmp_path / "old.h5", f)
    r = run("recover", f)
    assert r.returncode == 0 and "stale journal" in r.stdout, r.stdout + r.stderr
    assert open(f, "rb").read() == good and not os.path.exists(tmp_path / "j.h5.rollback")


def test_shards_merge_and_workers(run, small_config, small_results, tmp_path):
    s0, s1, merged = tmp_path / "s0.h5", tmp_path / "s1.h5", tmp_path / "merged.h5"
    for k, out in ((0, s0), (1, s1)):
        r = run("sweep", small_config, "--out", out, "--shard", f"{k}/2", "--progress", "none", "--no-fsync")
        assert r.returncode == 0, r.stderr
    assert rows(s0) + rows(s1) == rows(small_results)
    r = run("merge", "--out", merged, s1, s0)
    assert r.returncode == 0, r.stderr
    assert keys(merged) == keys(small_results)  # sweep order restored
    with h5py.File(merged, "r") as f:
        assert f.attrs["shard"] == "merged" and f["inputs/path"].shape == (2,)
    r = run("merge", "--out", merged, s0, s1)
    assert r.returncode == 2 and "exists" in r.stderr
    r = run("merge", "--out", tmp_path / "dup.h5", s0, s0)
    assert r.returncode == 2 and "is in both" in r.stderr

    wout = tmp_path / "w.h5"
    r = run("sweep", small_config, "--out", wout, "--workers", "2", "--no-fsync")
    assert r.returncode == 0, r.stdout + r.stderr
    assert sorted(keys(wout)) == sorted(keys(small_results))
    assert not os.path.exists(str(wout) + ".shards")  # merged into --out, then removed
    r = run("sweep", small_config, "--out", wout, "--workers", "2", "--resume", "--progress", "none")
    assert r.returncode == 0 and rows(wout) == rows(small_results), r.stdout + r.stderr


def test_validate_runs_without_timing(run, small_config):
    r = run("validate", small_config, "--only", "fmt", "--progress", "none")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "4 points run (ok 4" in r.stdout

"""Results that cannot be silently wrong, end to end through the real `kvlab`: sweep identity on
resume and merge, checksums (`kvlab check`, `recover`, the Python helper), output paths, bad
bytes in configs, I/O failures (exit code 3), workers that fail or lose their parent, and the
dynamic hand-out of uneven points."""
import os
import shutil
import signal
import stat
import subprocess
import sys
import time

import h5py
import numpy as np
import pytest

from analysis import result_integrity as ri
from tests.python.conftest import ROOT

LONG_INI = """\
name = long
seed = 3
[f]
kind = format_error
format = e4m3,e5m2,e2m1
dist = gaussian,laplace
tokens = range:16:3200:16
head_dim = 64
"""


def keys(path):
    with h5py.File(path, "r") as f:
        return list(f["index/key"].asstr()[()])


def data(path):
    return open(path, "rb").read()


def children(pid):
    out = []
    for t in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{t}/children") as f:
            out += [int(x) for x in f.read().split()]
    return out


def alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split()[2] != "Z"
    except OSError:
        return False


@pytest.fixture
def long_config(tmp_path):
    p = tmp_path / "long.ini"
    p.write_text(LONG_INI)
    return p


def test_resume_and_merge_check_the_sweep_identity(run, small_config, small_results, tmp_path):
    before = data(small_results)
    r = run("sweep", small_config, "--out", small_results, "--resume", "--seed", "7")
    assert r.returncode == 2, r.stdout + r.stderr
    assert "seed: " in r.stderr and "has 3, this run has 7" in r.stderr, r.stderr
    r = run("sweep", small_config, "--out", small_results, "--resume", "--only", "fmt")
    assert r.returncode == 2 and "only in" in r.stderr, r.stderr
    assert data(small_results) == before
    # --allow-mixed runs only the points the file lacks; every row says which run and seed made it.
    mixed = tmp_path / "mixed.h5"
    shutil.copy(small_results, mixed)
    r = run("sweep", small_config, "--out", mixed, "--resume", "--allow-mixed", "--seed", "7",
            "--axis", "fmt.tokens=64,96", "--progress", "none")
    assert r.returncode == 0, r.stdout + r.stderr
    with h5py.File(mixed, "r") as f:
        seeds = f["index/sweep_seed"][()]
        assert sorted(set(seeds)) == [3, 7] and (seeds == 7).sum() == 4
        assert len(set(f["index/run_id"].asstr()[()])) == 2
        assert f.attrs["identity_mixed"] == 1
    assert run("check", mixed).returncode == 0

    # Shards of different seeds do not merge without --allow-mixed.
    s0, s1 = tmp_path / "s0.h5", tmp_path / "s1.h5"
    assert run("sweep", small_config, "--out", s0, "--shard", "0/2", "--no-fsync", "--progress", "none").returncode == 0
    assert run("sweep", small_config, "--out", s1, "--shard", "1/2", "--seed", "9", "--no-fsync",
               "--progress", "none").returncode == 0
    r = run("merge", "--out", tmp_path / "m.h5", s0, s1)
    assert r.returncode == 2 and "seed" in r.stderr and not os.path.exists(tmp_path / "m.h5"), r.stderr
    r = run("merge", "--out", tmp_path / "m.h5", s0, s1, "--allow-mixed")
    assert r.returncode == 0, r.stderr
    r = run("merge", "--out", tmp_path / "m2.h5", s0, "--require-complete")
    assert r.returncode == 1 and "missing" in r.stdout, r.stdout


def test_check_recover_and_the_python_helper_agree(run, small_results, tmp_path):
    r = run("check", small_results)
    assert r.returncode == 0 and "intact" in r.stdout, r.stdout
    assert ri.verify(str(small_results)).ok
    size = os.path.getsize(small_results)
    with h5py.File(small_results, "r") as f:
        cell = f["index/rel_l2_mean"].id.get_offset()  # contiguous? chunked: find a chunk
        chunk = f["index/rel_l2_mean"].id.get_chunk_info(0).byte_offset if cell is None else cell
    # A changed value in the index: both find it.
    bad = tmp_path / "bad.h5"
    b = bytearray(data(small_results))
    b[chunk] ^= 0x40
    bad.write_bytes(bytes(b))
    r = run("check", bad)
    assert r.returncode == 1 and "DAMAGED" in r.stdout and "row_crc" in r.stdout, r.stdout
    assert not ri.verify(str(bad)).ok
    before = data(bad)
    # A truncated tail: recover calls it damaged, not clean.
    cut = tmp_path / "cut.h5"
    cut.write_bytes(data(small_results)[: size - 5000])
    r = run("recover", cut)
    assert r.returncode == 1 and "damaged" in r.stdout, r.stdout
    assert not ri.verify(str(cut)).ok
    assert data(bad) == before


def test_damage_that_crashes_the_hdf5_library_is_reported_not_crashed_on(run, small_config, small_results,
                                                                        tmp_path):
    """A huge object size in the global heap that holds the string cells makes HDF5 1.10 read
    past its buffer (SIGSEGV in H5HG_read): check, recover, --resume and merge probe the file in a
    child process and report the damage with their usual exit codes, the file untouched."""
    import struct
    b = bytearray(data(small_results))
    gcol = b.find(b"GCOL")
    assert gcol > 0
    struct.pack_into("<Q", b, gcol + 24, 0x7FFFFFFF)  # object 1: index, refcount, reserved, size
    bad = tmp_path / "heap.h5"
    bad.write_bytes(bytes(b))
    r = run("check", bad)
    assert r.returncode == 1 and "DAMAGED" in r.stdout and "crashed" in r.stdout, r.stdout + r.stderr
    r = run("recover", bad)
    assert r.returncode == 1 and "damaged" in r.stdout.lower(), r.stdout + r.stderr
    r = run("sweep", small_config, "--out", bad, "--resume", "--progress", "none", "--no-fsync")
    assert r.returncode == 2 and "crashed" in r.stderr, r.stderr
    r = run("merge", "--out", tmp_path / "m.h5", small_results, bad)
    assert r.returncode == 2 and "crashed" in r.stderr and not os.path.exists(tmp_path / "m.h5"), r.stderr
    assert data(bad) == bytes(b)


def test_a_file_written_from_python_carries_the_same_integrity_data(run, small_results, tmp_path):
    """A peer writer's file (schema-1 layout from h5py, no groups) sealed by the helper is
    accepted by `kvlab check` and `kvlab merge`, and a changed byte in it is found."""
    sys.path.insert(0, os.path.join(ROOT, "experiments", "peers"))
    import peer_results
    rows = [dict(target="K1", layout="contiguous", kv_format="bf16", lengths="uniform", graph="off",
                 version="peer:sdpa", head_dim=128, block_size=16, num_kv_heads=8, gqa_group=4, batch=b,
                 context=4096, seed=0, status="ok", reason="", median_us=10.0 + b) for b in (1, 2, 4)]
    peer = tmp_path / "peer.h5"
    axes = ["target", "layout", "kv_format", "lengths", "graph", "version", "head_dim", "block_size",
            "num_kv_heads", "gqa_group", "batch", "context", "seed"]
    numeric = {"head_dim", "block_size", "num_kv_heads", "gqa_group", "batch", "context", "seed"}
    for r in rows:
        r.update(study="peers", kind="decode_attention")
    peer_results.write_result_file(str(peer), rows, {"device_name": "H100"}, axes, numeric, ["median_us"], [],
                                   run={"started_utc": "2026-01-01T00:00:00Z", "argv": "test"}, seal=False)
    r = run("check", peer)
    assert r.returncode == 0 and "NOT VERIFIED" in r.stdout, r.stdout
    assert run("check", "--strict", peer).returncode == 1
    rep = ri.seal(str(peer), seed=0)
    assert rep.ok and rep.rows_verified == 4, rep.problems
    r = run("check", peer)
    assert r.returncode == 0 and "intact" in r.stdout, r.stdout
    merged = tmp_path / "merged.h5"
    r = run("merge", "--out", merged, small_results, peer)
    assert r.returncode == 2 and "another sweep" in r.stderr
    r = run("merge", "--out", merged, small_results, peer, "--allow-mixed")
    assert r.returncode == 0, r.stderr
    assert run("check", merged).returncode == 0 and ri.verify(str(merged)).ok
    with h5py.File(peer, "r+") as f:
        f["index/median_us"][1] = 99.0
    assert run("check", peer).returncode == 1 and not ri.verify(str(peer)).ok
    # The peer writer seals by default: its files verify as written.
    sealed = tmp_path / "sealed.h5"
    peer_results.write_result_file(str(sealed), rows, {"device_name": "H100"}, axes, numeric, ["median_us"], [])
    r = run("check", "--strict", sealed)
    assert r.returncode == 0 and "intact" in r.stdout, r.stdout


def test_output_paths_are_followed_or_refused(run, small_config, tmp_path):
    target = tmp_path / "real.h5"
    link = tmp_path / "link.h5"
    os.symlink(target, link)
    r = run("sweep", small_config, "--out", link, "--only", "fmt", "--progress", "none", "--no-fsync")
    assert r.returncode == 0, r.stderr
    assert os.path.islink(link) and len(keys(target)) == 4  # the link stays a link
    dangling = tmp_path / "dangling.h5"
    os.symlink(tmp_path / "missing" / "x.h5", dangling)
    r = run("sweep", small_config, "--out", dangling, "--only", "fmt")
    assert r.returncode == 2 and "symlink" in r.stderr, r.stderr
    fifo = tmp_path / "fifo.h5"
    os.mkfifo(fifo)
    for args in (["sweep", small_config, "--out", fifo, "--resume"], ["merge", "--out", tmp_path / "m.h5", fifo],
                 ["check", fifo], ["merge", "--force", "--out", fifo, target]):
        r = run(*args, timeout=20)  # never blocks on the FIFO
        assert r.returncode == 2 and "FIFO" in r.stderr, (args, r.stderr)
    r = run("sweep", small_config, "--out", tmp_path, "--only", "fmt")
    assert r.returncode == 2 and "directory" in r.stderr, r.stderr


def test_bad_bytes_and_flags_touch_nothing(run, kvlab_bin, small_config, small_results, tmp_path):
    before = data(small_results)
    r = run("sweep", small_config, "--out", small_results, "--resume", "--progress", "sideways")
    assert r.returncode == 2 and "--progress" in r.stderr and data(small_results) == before
    bad = tmp_path / "latin1.ini"
    bad.write_bytes(b"name = caf\xe9\n[f]\nkind = format_error\n")
    r = run("sweep", bad, "--out", small_results, "--resume")
    assert r.returncode == 2 and "not valid UTF-8" in r.stderr and "line 1" in r.stderr, r.stderr
    empty = tmp_path / "empty.ini"
    empty.write_text("[f]\nkind = format_error\ntokens = 16,32\nwhere = tokens > 1000\n")
    r = run("sweep", empty, "--out", small_results, "--resume")
    assert r.returncode == 2 and "no points" in r.stderr, r.stderr
    deep = tmp_path / "deep.ini"
    deep.write_text("[f]\nkind = format_error\nwhere = " + "(" * 20000 + "tokens > 1" + ")" * 20000 + "\n")
    r = run("sweep", deep, "--out", small_results, "--resume")
    assert r.returncode == 2 and "constraint" in r.stderr, r.stderr
    typo = tmp_path / "typo.ini"
    typo.write_text("[f]\nkind = format_error\nwhere = format == 4\n")
    r = run("sweep", typo, "--out", small_results, "--resume")
    assert r.returncode == 2 and "compares text with a number" in r.stderr, r.stderr
    assert data(small_results) == before
    # Bytes that are not UTF-8 in argv (a path) are stored escaped: readers never fail on them.
    odd = bytes(tmp_path) + b"/r\xff.h5"
    r = subprocess.run([kvlab_bin, "sweep", str(small_config), "--only", "fmt", "--out", odd, "--progress",
                        "none", "--no-fsync"], capture_output=True)
    assert r.returncode == 0, r.stderr
    with h5py.File(odd, "r") as f:
        assert "\\xFF" in f.attrs["argv"]
    plain = tmp_path / "plain.h5"  # the report names its input: a UTF-8 name for this one
    shutil.copy(odd, plain)
    rep = subprocess.run([sys.executable, "-m", "analysis.report", plain, "--out", tmp_path / "report.html"],
                         capture_output=True, text=True, cwd=ROOT, env=dict(os.environ, PYTHONPATH=ROOT))
    assert rep.returncode == 0, rep.stderr


def test_validate_that_validates_nothing_fails(run):
    info = run("info", "--no-self-check")
    if "device: " in info.stdout and "skipped" not in info.stdout:
        pytest.skip("a GPU is present: `kvlab validate` would validate for real")
    r = run("validate", "--only", "append_small", "--progress", "none")  # GPU points only
    assert r.returncode == 1, r.stdout + r.stderr
    assert "nothing was validated" in r.stdout, r.stdout


def _small_fs(tmp_path):
    """A 2 MiB file system (tmpfs) when this process may mount one, else None."""
    mnt = tmp_path / "small_fs"
    mnt.mkdir()
    if os.geteuid() != 0 or shutil.which("mount") is None:
        return None
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mnt)], capture_output=True)
    return mnt if r.returncode == 0 else None


def test_a_full_disk_is_an_io_error_that_keeps_the_last_commit(kvlab_bin, long_config, tmp_path):
    mnt = _small_fs(tmp_path)
    try:
        if mnt is not None:
            out = mnt / "full.h5"
            cmd = [kvlab_bin, "sweep", str(long_config), "--out", str(out), "--progress", "none"]
        else:  # no mount allowed: a file size limit fails writes the same way (EFBIG)
            out = tmp_path / "full.h5"
            cmd = ["bash", "-c", f'ulimit -f 2048; exec "{kvlab_bin}" sweep "{long_config}" --out "{out}" --progress none']
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        assert r.returncode == 3, r.stdout + r.stderr
        assert "I/O error" in r.stderr and "previous commit" in r.stderr, r.stderr
        assert not os.path.exists(str(out) + ".rollback") and not os.path.exists(str(out) + ".commit")
        rep = ri.verify(str(out))
        assert rep.ok and 0 < rep.rows < 3 * 2 * 250, rep.problems
    finally:
        if mnt is not None:
            subprocess.run(["umount", str(mnt)], capture_output=True)


def test_merge_force_is_refused_while_a_sweep_writes(run, kvlab_bin, long_config, small_results, tmp_path):
    out = tmp_path / "busy.h5"
    proc = subprocess.Popen([kvlab_bin, "sweep", long_config, "--out", out, "--progress", "none", "--no-fsync"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.time() + 60
        while not os.path.exists(out) and time.time() < deadline:
            time.sleep(0.01)
        r = run("merge", "--force", "--out", out, small_results)
        assert r.returncode == 2 and "being written" in r.stderr, r.stderr
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
    assert proc.returncode == 128 + signal.SIGTERM
    assert run("check", out).returncode == 0  # the writer's file, untouched by the merge


def test_workers_fail_cleanly_and_die_with_their_parent(run, kvlab_bin, tmp_path):
    long_config = tmp_path / "workers.ini"
    long_config.write_text(LONG_INI.replace("range:16:3200:16", "range:16:1072:16"))  # 402 points
    single = tmp_path / "single.h5"
    assert run("sweep", long_config, "--out", single, "--no-fsync", "--progress", "none").returncode == 0
    out = tmp_path / "w.h5"
    # 1. A partial --out (a killed single-process run).
    p = subprocess.Popen([kvlab_bin, "sweep", long_config, "--out", out, "--no-fsync", "--progress", "none"],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    while not (os.path.exists(out) and len(keys_retry(out)) > 20):
        time.sleep(0.01)
    p.kill()
    p.wait()
    assert run("recover", out).returncode == 0
    before = data(out)
    # 2. Resumed with workers; one worker is killed: --out untouched, non-zero exit.
    p = subprocess.Popen([kvlab_bin, "sweep", long_config, "--out", out, "--resume", "--workers", "2",
                          "--no-fsync", "--progress", "none"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         text=True)
    kids = []
    deadline = time.time() + 60
    while len(kids) < 2 and time.time() < deadline:
        kids = children(p.pid)
        time.sleep(0.01)
    time.sleep(0.5)
    os.kill(kids[0], signal.SIGKILL)
    log, _ = p.communicate(timeout=300)
    assert p.returncode == 1 and "was killed by signal 9" in log and "left untouched" in log, log
    assert data(out) == before
    # 3. Resumed with workers again, and the parent is killed: its workers follow it.
    p = subprocess.Popen([kvlab_bin, "sweep", long_config, "--out", out, "--resume", "--workers", "2",
                          "--no-fsync", "--progress", "none"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    kids = []
    deadline = time.time() + 60
    while len(kids) < 2 and time.time() < deadline:
        kids = children(p.pid)
        time.sleep(0.01)
    time.sleep(1.0)
    p.kill()
    p.wait()
    deadline = time.time() + 30
    while any(alive(k) for k in kids) and time.time() < deadline:
        time.sleep(0.05)
    assert not any(alive(k) for k in kids), "workers outlived their parent"
    assert data(out) == before
    # 4. A single-process resume counts the points of --out and of the worker files.
    r = run("sweep", long_config, "--out", out, "--resume", "--no-fsync", "--progress", "none")
    assert r.returncode == 0 and "folded" in r.stdout, r.stdout + r.stderr
    # The same points with the same numbers as one uninterrupted run (rows in run order).
    with h5py.File(out, "r") as a, h5py.File(single, "r") as b:
        va = dict(zip(a["index/key"].asstr()[()], a["index/rel_l2_mean"][()]))
        vb = dict(zip(b["index/key"].asstr()[()], b["index/rel_l2_mean"][()]))
    assert va == vb
    assert run("check", out).returncode == 0


def keys_retry(path):
    for _ in range(500):
        try:
            return keys(path)
        except (BlockingIOError, OSError):
            time.sleep(0.01)
    return []


def test_dynamic_hand_out_balances_uneven_points(run, tmp_path):
    """Heavy and light points alternate, so `index % 2` would give every heavy point to one
    worker; handed out as workers finish, both get about the same work."""
    ini = tmp_path / "uneven.ini"
    ini.write_text("seed = 5\n[u]\nkind = quant_error\nscheme = bf16, fp16, fp8_e4m3_per_tensor, "
                   "fp8_e5m2_per_tensor, fp8_e4m3_per_token, mxfp4, nvfp4, mxfp8\ntokens = 65536, 64\n")
    out = tmp_path / "u.h5"
    r = run("sweep", ini, "--out", out, "--workers", "2", "--no-fsync", "--progress", "none")
    assert r.returncode == 0, r.stdout + r.stderr
    with h5py.File(out, "r") as f:
        point = f["index/point"][()]
        sec = f["index/seconds"][()]
        rid = f["index/run_id"].asstr()[()]
    dynamic = [sec[rid == x].sum() for x in sorted(set(rid))]
    static = [sec[point % 2 == k].sum() for k in (0, 1)]
    print(f"busy seconds per worker: dynamic {dynamic}, index % 2 would give {static}")
    assert len(dynamic) == 2
    assert max(dynamic) / min(dynamic) < 2.0 < max(static) / min(static)


def test_check_require_complete_and_the_adoption_refuse_a_partial_run(run, kvlab_bin, small_config,
                                                                     small_results, tmp_path):
    # A shard lacks points of its sweep, as a run stopped by its deadline does: `kvlab check`
    # says so, and with --require-complete counts it as failed; a whole file passes.
    shard = tmp_path / "shard.h5"
    r = run("sweep", small_config, "--out", shard, "--shard", "0/2", "--no-fsync", "--progress", "none")
    assert r.returncode == 0, r.stdout + r.stderr
    r = run("check", shard)
    assert r.returncode == 0 and "incomplete: " in r.stdout and "--resume` runs the rest" in r.stdout, r.stdout
    r = run("check", "--require-complete", shard)
    assert r.returncode == 1 and "INCOMPLETE" in r.stdout, r.stdout
    r = run("check", "--require-complete", small_results)
    assert r.returncode == 0 and "ncomplete" not in r.stdout, r.stdout
    # adopt_perf_run.sh checks every input before it copies anything: a run whose step sweep
    # is partial is refused (exit 2) and nothing is copied. The script writes into the
    # repository it sits in, so it runs from a copy in a scratch tree here.
    repo = tmp_path / "repo"
    (repo / "experiments" / "peers").mkdir(parents=True)
    (repo / "data" / "perf").mkdir(parents=True)
    script = repo / "experiments" / "peers" / "adopt_perf_run.sh"
    shutil.copy(os.path.join(ROOT, "experiments", "peers", "adopt_perf_run.sh"), script)
    kept = repo / "data" / "perf" / "h100_step_sweep.h5"
    shutil.copy(small_results, kept)
    src = tmp_path / "fair_timing"
    src.mkdir()
    for name in ["perf_sweep", "perf_peers", "timer_check", "crosscheck"]:
        shutil.copy(small_results, src / f"{name}.h5")
    shutil.copy(shard, src / "step_sweep.h5")

    def adopt(**extra):
        return subprocess.run(["bash", str(script), str(src)], capture_output=True, text=True,
                              timeout=120, env={**os.environ, "KVLAB": kvlab_bin, **extra})

    r = adopt()
    assert r.returncode == 2 and "not whole" in r.stderr and "step_sweep" in r.stderr, r.stderr
    assert sorted(os.listdir(repo / "data" / "perf")) == ["h100_step_sweep.h5"], r.stdout
    # A damaged input (a truncated tail) is refused the same way, KEEP_STEP_SWEEP or not.
    size = os.path.getsize(small_results)
    (src / "perf_peers.h5").write_bytes(data(small_results)[: size - 5000])
    r = adopt(KEEP_STEP_SWEEP="1")
    assert r.returncode == 2 and "not whole" in r.stderr and "perf_peers" in r.stderr, r.stderr
    assert sorted(os.listdir(repo / "data" / "perf")) == ["h100_step_sweep.h5"], r.stdout
    # Only the step sweep partial, KEEP_STEP_SWEEP=1: the others are adopted, the kept step
    # sweep is untouched (the generators that follow need a real run's files: not here).
    shutil.copy(small_results, src / "perf_peers.h5")
    r = adopt(KEEP_STEP_SWEEP="1", PYTHON="false")
    assert "data/perf/h100_step_sweep.h5 (an earlier run's) stays" in r.stderr, r.stderr
    assert "copied 4 files into data/perf/" in r.stdout, r.stdout
    assert data(kept) == data(small_results)
    assert data(repo / "data" / "perf" / "h100_perf_sweep.h5") == data(small_results)
    # A repeated run (h100_perf_run.sh REPEATS=2) is checked with the rest: a repeat without its
    # peer file is refused before anything is copied.
    for f in (repo / "data" / "perf").iterdir():
        if f.name != "h100_step_sweep.h5":
            f.unlink()
    (src / "repeat_2").mkdir()
    shutil.copy(small_results, src / "repeat_2" / "perf_sweep.h5")
    r = adopt(KEEP_STEP_SWEEP="1", PYTHON="false")
    assert r.returncode == 2 and "repeat_2/perf_peers.h5 is missing" in r.stderr, r.stderr
    assert sorted(os.listdir(repo / "data" / "perf")) == ["h100_step_sweep.h5"], r.stdout
    # A partial repeat is refused the same way, and so is a further run folder that does not exist.
    shutil.copy(shard, src / "repeat_2" / "perf_peers.h5")
    r = adopt(KEEP_STEP_SWEEP="1", PYTHON="false")
    assert r.returncode == 2 and "not whole" in r.stderr and "repeat_2/perf_peers" in r.stderr, r.stderr
    shutil.copy(small_results, src / "repeat_2" / "perf_peers.h5")
    r = subprocess.run(["bash", str(script), str(src), str(tmp_path / "no_such_run")], capture_output=True,
                       text=True, timeout=120, env={**os.environ, "KVLAB": kvlab_bin, "KEEP_STEP_SWEEP": "1"})
    assert r.returncode == 2 and "no_such_run: no such directory" in r.stderr, r.stderr
    assert sorted(os.listdir(repo / "data" / "perf")) == ["h100_step_sweep.h5"], r.stdout
    # Adopted runs kept beside new ones: a further run may be a folder of the repository's own
    # data/perf/h100_perf_runs/, which the adoption replaces; its files land as the last run, whole.
    old = repo / "data" / "perf" / "h100_perf_runs" / "run_1"
    old.mkdir(parents=True)
    shutil.copy(small_results, old / "perf_sweep.h5")
    shutil.copy(small_results, old / "perf_peers.h5")
    (old / "device.txt").write_text("NVIDIA H100 80GB HBM3, 580.159.04, GPU-0ld00000-0000\n")
    # PYTHON=true: the generators print nothing (they need a real run's files); the copies are real.
    r = subprocess.run(["bash", str(script), str(src), str(old)], capture_output=True, text=True, timeout=120,
                       env={**os.environ, "KVLAB": kvlab_bin, "KEEP_STEP_SWEEP": "1", "PYTHON": "true"})
    assert "copied 3 runs into data/perf/h100_perf_runs/" in r.stdout, r.stdout + r.stderr
    runs = repo / "data" / "perf" / "h100_perf_runs"
    assert sorted(os.listdir(runs)) == ["run_1", "run_2", "run_3"]
    assert (runs / "run_3" / "device.txt").read_text().startswith("NVIDIA H100 80GB HBM3, 580.159.04, GPU-0ld")
    assert data(runs / "run_3" / "perf_peers.h5") == data(small_results)
    assert not (repo / "data" / "perf" / ".h100_perf_runs.new").exists()
    shutil.rmtree(runs)
    (src / "repeat_2").rename(tmp_path / "repeat_2_aside")
    for f in (repo / "data" / "perf").iterdir():
        if f.is_file() and f.name != "h100_step_sweep.h5":
            f.unlink()
    # A run with the step sweep left out (STEP_SWEEP=0) is adopted with KEEP_STEP_SWEEP=1 only.
    (src / "step_sweep.h5").unlink()
    r = adopt(PYTHON="false")
    assert r.returncode == 2 and "step_sweep.h5 is missing" in r.stderr, r.stderr
    r = adopt(KEEP_STEP_SWEEP="1", PYTHON="false")
    assert "data/perf/h100_step_sweep.h5 (an earlier run's) stays" in r.stderr, r.stderr
    assert "copied 4 files into data/perf/" in r.stdout, r.stdout
    assert data(kept) == data(small_results)

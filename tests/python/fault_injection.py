"""Fault injection for kvlab result files: bad inputs, kills, corruption, a full disk, and the
bytes a commit writes. Prints the table of "results that cannot be silently wrong":

    | bad inputs tried | answered exit 2 with nothing touched | kills survived |
    | corruptions detected | bytes written per point, before and after |

    build/venv/bin/python3 tests/python/fault_injection.py [--seed N] [--full] [--only SECTION,...]

Sections (all by default):
  inputs   every axis of every kind given 0, -1, 2^32+16, NaN and an empty value, plus bad
           flags, configs, outputs, seeds and studies: each must be exit 2 naming the study, the
           axis and the value with nothing touched, or (0 / -1 where the axis's rule allows
           them) run exactly as given
  kills    SIGKILL at seeded random moments while a file is created, while points commit,
           while `kvlab merge` writes, and of --workers runs (a worker, or the parent): after
           `kvlab recover` / --resume the file verifies and holds exactly a single run's points
  corrupt  seeded random bytes written into a finished file (a few bytes, or 512 at once) and
           truncated tails: whenever what h5py reads changed, `kvlab check` reports damage and
           --resume refuses the file without touching it
  disk     a full disk (a 2 MiB tmpfs where mounting is allowed, `ulimit -f` otherwise): exit
           code 3, no temporary or journal left, the file verifies
  bytes    bytes written per point with the whole file rewritten at every commit (the cost
           before, KVLAB_COMMIT=replace) and with in-place commits (now), on the default sweep
           (--full: all of it; else its CPU studies quant_fixed, formats, capacity)
Exit code 0 when every check held, 1 otherwise. KVLAB_BIN names the kvlab binary.
"""
from __future__ import annotations

import argparse
import concurrent.futures as cf
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import h5py
import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)
KVLAB = os.environ.get("KVLAB_BIN") or os.path.join(ROOT, "build", "experiments", "kvlab")

BAD_VALUES = ["0", "-1", str(2**32 + 16), "NaN", ""]
FLOW_INI = """\
name = flow
seed = 11
[f]
kind = format_error
format = e4m3,e5m2,e2m1
dist = gaussian,laplace
tokens = range:16:{hi}:16
head_dim = 64
"""


def kvlab(*args, timeout=600, env=None, cwd=None):
    return subprocess.run([KVLAB, *map(str, args)], capture_output=True, text=True, errors="replace",
                          timeout=timeout, env=env, cwd=cwd)


def snapshot(d):
    """Every entry under d with its bytes (to prove nothing was touched); FIFOs and links by
    their kind (opening a FIFO would block)."""
    import stat as st
    out = {}
    for root, dirs, files in os.walk(d):
        for f in files + dirs:
            p = os.path.join(root, f)
            m = os.lstat(p).st_mode
            if st.S_ISREG(m):
                with open(p, "rb") as fh:
                    out[p] = fh.read()
            else:
                out[p] = (st.S_IFMT(m), os.readlink(p) if st.S_ISLNK(m) else None)
    return out


def rows_by_key(path, metric="rel_l2_mean"):
    with h5py.File(path, "r") as f:
        return dict(zip(f["index/key"].asstr()[()], f["index"][metric][()]))


def wait_readable_rows(path, timeout=30):
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            with h5py.File(path, "r") as f:
                return f["index/key"].shape[0]
        except (OSError, KeyError):
            time.sleep(0.005)
    return -1


class Table:
    def __init__(self):
        self.tried = self.refused = self.accepted = 0
        self.kills = self.kills_survived = 0
        self.corrupt = self.corrupt_harmless = self.corrupt_detected = 0
        self.bytes_before = self.bytes_after = None
        self.bytes_note = ""
        self.bytes_growth = None
        self.failures = []

    def fail(self, what):
        self.failures.append(what)
        print("FAIL:", what, flush=True)


# ---- inputs -------------------------------------------------------------------------------------
def kind_axes():
    r = kvlab("info", "--kinds", "--no-self-check")
    kinds, cur = {}, None
    for line in r.stdout.splitlines():
        m = re.match(r"^  (\w+) \[(cpu|gpu)\]:", line)
        if m:
            cur = m.group(1)
            kinds[cur] = []
            continue
        m = re.match(r"^      axis (\w+) \(default ([^;)]*)", line)
        if m and cur:
            kinds[cur].append((m.group(1), m.group(2)))
    return kinds


def try_axis_value(kind, axis, value, work):
    """One bad value: (outcome, detail). outcome: refused | accepted | FAIL."""
    d = tempfile.mkdtemp(dir=work)
    cfg = os.path.join(d, "c.ini")
    with open(cfg, "w") as f:
        f.write(f"[s]\nkind = {kind}\n")
    canary = os.path.join(d, "canary.h5")
    with open(canary, "wb") as f:
        f.write(b"existing results")
    before = snapshot(d)
    out = os.path.join(d, "out.h5")
    r = kvlab("sweep", cfg, "--axis", f"s.{axis}={value}", "--out", out, "--progress", "none", "--no-fsync")
    try:
        if r.returncode == 2:
            msg = r.stderr
            shown = f"'{value}'"
            if snapshot(d) != before:
                return "FAIL", f"exit 2 but files changed: {kind}.{axis}={value!r}"
            named = shown in msg or f"{axis}={value}" in msg  # a rule names 'v'; a point check axis=v
            if "[s]" not in msg or axis not in msg or not named:
                return "FAIL", f"exit 2 without naming study, axis and value: {kind}.{axis}={value!r}: {msg.strip()}"
            return "refused", ""
        if r.returncode != 0:
            return "FAIL", f"exit {r.returncode} for {kind}.{axis}={value!r}: {r.stderr.strip()[:300]}"
        # Accepted: the point ran with exactly this value.
        with h5py.File(out, "r") as f:
            col = f["index"][axis][()]
            got = col[0].decode() if isinstance(col[0], bytes) else col[0]
            status = f["index/status"].asstr()[0]
        want = float(value) if isinstance(got, (float, np.floating)) else value
        if got != want or status == "failed":
            return "FAIL", f"{kind}.{axis}={value!r} ran as {got!r} ({status})"
        return "accepted", ""
    finally:
        shutil.rmtree(d, ignore_errors=True)


def flag_and_file_cases(work):
    """Bad flags, configs, outputs, seeds and studies against an existing result file: each must
    be exit 2 with the file untouched."""
    d = os.path.join(work, "flags")
    os.makedirs(d)
    cfg = os.path.join(d, "flow.ini")
    with open(cfg, "w") as f:
        f.write(FLOW_INI.format(hi=96))
    res = os.path.join(d, "r.h5")
    assert kvlab("sweep", cfg, "--out", res, "--no-fsync", "--progress", "none").returncode == 0
    other = os.path.join(d, "other.ini")
    with open(other, "w") as f:
        f.write(FLOW_INI.format(hi=96).replace("[f]", "[g]"))
    latin = os.path.join(d, "latin1.ini")
    with open(latin, "wb") as f:
        f.write(b"name = caf\xe9\n[f]\nkind = format_error\n")
    deep = os.path.join(d, "deep.ini")
    with open(deep, "w") as f:
        f.write("[f]\nkind = format_error\nwhere = " + "(" * 20000 + "tokens > 1" + ")" * 20000 + "\n")
    never = os.path.join(d, "never.ini")
    with open(never, "w") as f:
        f.write("[f]\nkind = format_error\nwhere = tokens > 1000000\n")
    typo = os.path.join(d, "typo.ini")
    with open(typo, "w") as f:
        f.write("[f]\nkind = format_error\nwhere = format == 4\n")
    fifo = os.path.join(d, "fifo.h5")
    os.mkfifo(fifo)
    dangling = os.path.join(d, "dangling.h5")
    os.symlink(os.path.join(d, "no", "such", "dir", "x.h5"), dangling)
    s0, s1 = os.path.join(d, "s0.h5"), os.path.join(d, "s1.h5")
    assert kvlab("sweep", cfg, "--out", s0, "--shard", "0/2", "--no-fsync", "--progress", "none").returncode == 0
    assert kvlab("sweep", cfg, "--out", s1, "--shard", "1/2", "--seed", "12", "--no-fsync",
                 "--progress", "none").returncode == 0
    v1 = os.path.join(d, "v1.h5")
    shutil.copy(res, v1)
    with h5py.File(v1, "r+") as f:
        f.attrs["schema_version"] = 1
    cases = [
        ["sweep", cfg, "--out", res, "--resume", "--seed", "12"],                  # another seed
        ["sweep", other, "--out", res, "--resume"],                                # another study
        ["sweep", cfg, "--out", res, "--resume", "--axis", "f.tokens=16,32"],      # other points
        ["sweep", cfg, "--out", res, "--resume", "--progress", "sideways"],
        ["sweep", cfg, "--out", res, "--resume", "--seed", "-1"],
        ["sweep", cfg, "--out", res, "--resume", "--seed", str(2**64)],
        ["sweep", cfg, "--out", res, "--resume", "--workers", "0"],
        ["sweep", cfg, "--out", res, "--resume", "--shard", "2/2"],
        ["sweep", cfg, "--out", res, "--resume", "--threads", "0"],
        ["sweep", latin, "--out", res, "--resume"],
        ["sweep", deep, "--out", res, "--resume"],
        ["sweep", never, "--out", res, "--resume"],
        ["sweep", typo, "--out", res, "--resume"],
        ["sweep", cfg, "--out", res],                                              # exists, no --resume
        ["sweep", cfg, "--out", fifo, "--resume"],
        ["sweep", cfg, "--out", dangling],
        ["sweep", cfg, "--out", d],                                                # a directory
        ["sweep", os.path.join(d, "missing.ini"), "--out", res, "--resume"],
        ["sweep", cfg, "--out", v1, "--resume"],                                   # schema 1: no resume
        ["merge", "--out", os.path.join(d, "m.h5"), s0, s1],                       # mixed seeds
        ["merge", "--out", res, s0],                                               # exists, no --force
        ["merge", "--out", os.path.join(d, "m.h5"), s0, s0],                       # duplicate points
        ["merge", "--out", os.path.join(d, "m.h5"), fifo],
        ["merge", "--out", os.path.join(d, "m.h5"), v1],                           # schema 1: --allow-mixed
        ["check", os.path.join(d, "missing.h5")],
        ["recover", fifo],
    ]
    return d, cases


def section_inputs(t: Table, work, seed):
    kinds = kind_axes()
    jobs = [(k, a, v) for k, axes in sorted(kinds.items()) for a, _ in axes for v in BAD_VALUES]
    print(f"[inputs] {len(jobs)} axis values over {len(kinds)} kinds", flush=True)
    with cf.ThreadPoolExecutor(max_workers=max(2, os.cpu_count() or 2)) as ex:
        for (k, a, v), (outcome, detail) in zip(jobs, ex.map(lambda j: try_axis_value(*j, work), jobs)):
            t.tried += 1
            if outcome == "refused":
                t.refused += 1
            elif outcome == "accepted":
                t.accepted += 1
            else:
                t.fail(detail)
    d, cases = flag_and_file_cases(work)
    for args in cases:
        before = snapshot(d)
        r = kvlab(*args, timeout=60)
        t.tried += 1
        if r.returncode == 2 and snapshot(d) == before:
            t.refused += 1
        else:
            t.fail(f"{' '.join(map(str, args))}: exit {r.returncode}, files "
                   f"{'untouched' if snapshot(d) == before else 'CHANGED'}: {r.stderr.strip()[:200]}")
    print(f"[inputs] {t.tried} tried, {t.refused} refused (exit 2, nothing touched), "
          f"{t.accepted} accepted as valid and run exactly as given", flush=True)


# ---- kills ----------------------------------------------------------------------------------------
def recover_and_finish(t: Table, what, out, cfg, reference, extra=()):
    """After a kill: recover, verify, resume to the end; the file must hold exactly the reference."""
    from analysis import result_integrity as ri
    if os.path.exists(out):
        r = kvlab("recover", out)
        if r.returncode != 0:
            return t.fail(f"{what}: recover said {r.stdout.strip()} {r.stderr.strip()}")
        rep = ri.verify(out)
        if not rep.ok:
            return t.fail(f"{what}: the killed file does not verify: {rep.problems[:2]}")
    r = kvlab("sweep", cfg, "--out", out, "--resume", "--no-fsync", "--progress", "none", *extra)
    if r.returncode != 0:
        return t.fail(f"{what}: resume exit {r.returncode}: {r.stderr.strip()[:300]}")
    if kvlab("check", out).returncode != 0:
        return t.fail(f"{what}: the finished file does not verify")
    got = rows_by_key(out)
    if got != reference:
        missing = set(reference) - set(got)
        return t.fail(f"{what}: {len(got)} points, {len(missing)} missing, or values differ")
    t.kills_survived += 1


def section_kills(t: Table, work, seed, n_each):
    rng = random.Random(seed)
    d = os.path.join(work, "kills")
    os.makedirs(d)
    cfg = os.path.join(d, "flow.ini")
    with open(cfg, "w") as f:
        f.write(FLOW_INI.format(hi=800))  # 300 points of a few ms each
    ref = os.path.join(d, "ref.h5")
    assert kvlab("sweep", cfg, "--out", ref, "--no-fsync", "--progress", "none").returncode == 0
    reference = rows_by_key(ref)
    total = len(reference)

    # While the file is created and its first points commit (fsync on: slow commits).
    for i in range(n_each):
        out = os.path.join(d, f"create{i}.h5")
        p = subprocess.Popen([KVLAB, "sweep", cfg, "--out", out, "--progress", "none"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(rng.uniform(0.0, 0.4))
        p.kill()
        p.wait()
        t.kills += 1
        recover_and_finish(t, f"kill during create #{i}", out, cfg, reference)

    # While points commit: after a seeded number of points, plus a seeded pause.
    for i in range(n_each):
        out = os.path.join(d, f"commit{i}.h5")
        p = subprocess.Popen([KVLAB, "sweep", cfg, "--out", out, "--progress", "none"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        target = rng.randint(5, total // 3)
        deadline = time.time() + 120
        while time.time() < deadline and p.poll() is None:
            if os.path.exists(out) and wait_readable_rows(out, 1) >= target:
                break
            time.sleep(0.002)
        time.sleep(rng.uniform(0, 0.03))
        p.kill()
        p.wait()
        t.kills += 1
        recover_and_finish(t, f"kill during commits #{i}", out, cfg, reference)

    # While `kvlab merge` writes: the output appears complete or not at all.
    s0, s1 = os.path.join(d, "s0.h5"), os.path.join(d, "s1.h5")
    for k, s in ((0, s0), (1, s1)):
        assert kvlab("sweep", cfg, "--out", s, "--shard", f"{k}/2", "--no-fsync", "--progress", "none").returncode == 0
    inputs_before = snapshot_files([s0, s1])
    for i in range(n_each):
        out = os.path.join(d, f"merge{i}.h5")
        p = subprocess.Popen([KVLAB, "merge", "--out", out, s0, s1], stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
        time.sleep(rng.uniform(0.0, 0.8))
        p.kill()
        p.wait()
        t.kills += 1
        ok = snapshot_files([s0, s1]) == inputs_before
        if os.path.exists(out):
            ok &= kvlab("check", out).returncode == 0 and rows_by_key(out) == reference
        r = kvlab("merge", "--force", "--out", out, s0, s1)  # again: a leftover temporary is no obstacle
        ok &= r.returncode == 0 and rows_by_key(out) == reference
        ok &= not os.path.exists(out + ".commit")
        if ok:
            t.kills_survived += 1
        else:
            t.fail(f"kill during merge #{i}: {r.stderr.strip()[:200]}")

    # --workers runs: a worker killed, or the parent killed (its workers must follow it).
    for i in range(n_each):
        out = os.path.join(d, f"workers{i}.h5")
        p = subprocess.Popen([KVLAB, "sweep", cfg, "--out", out, "--workers", "2", "--no-fsync", "--progress", "none"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        kids, deadline = [], time.time() + 60
        while len(kids) < 2 and time.time() < deadline:
            kids = children(p.pid)
            time.sleep(0.005)
        time.sleep(rng.uniform(0.2, 1.5))
        t.kills += 1
        if i % 2 == 0:
            os.kill(rng.choice(kids), signal.SIGKILL)
            rc = p.wait(timeout=300)
            if rc == 0 or os.path.exists(out):
                t.fail(f"workers #{i}: a worker was killed but the run exited {rc} / wrote {out}")
                continue
        else:
            p.kill()
            p.wait()
            deadline = time.time() + 30
            while any(alive(k) for k in kids) and time.time() < deadline:
                time.sleep(0.02)
            if any(alive(k) for k in kids):
                t.fail(f"workers #{i}: workers outlived their killed parent")
                for k in kids:
                    if alive(k):
                        os.kill(k, signal.SIGKILL)
                continue
        recover_and_finish(t, f"kill of --workers #{i}", out, cfg, reference, extra=("--workers", "2"))
    print(f"[kills] {t.kills_survived} of {t.kills} kills survived", flush=True)


def snapshot_files(paths):
    return {p: open(p, "rb").read() for p in paths}


def children(pid):
    out = []
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                out += [int(x) for x in f.read().split()]
    except OSError:
        pass
    return out


def alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split()[2] != "Z"
    except OSError:
        return False


# ---- corruption ---------------------------------------------------------------------------------
def logical(path):
    """What h5py reads from a file: every attribute and dataset value, or None if unreadable."""
    try:
        with h5py.File(path, "r") as f:
            out = {}

            def attrs(name, obj):
                for k in obj.attrs.keys():
                    v = obj.attrs[k]
                    out[(name, "@" + k)] = repr(v.tolist() if isinstance(v, np.ndarray) else v)

            attrs("/", f)

            def visit(name, obj):
                attrs(name, obj)
                if isinstance(obj, h5py.Dataset):
                    v = obj[()]
                    out[(name, "")] = v.tobytes() if isinstance(v, np.ndarray) and v.dtype.kind != "O" else repr(
                        v.tolist() if isinstance(v, np.ndarray) else v)
            f.visititems(visit)
            return out
    except Exception:
        return None


def section_corrupt(t: Table, work, seed, n):
    rng = random.Random(seed + 1)
    d = os.path.join(work, "corrupt")
    os.makedirs(d)
    cfg = os.path.join(d, "flow.ini")
    with open(cfg, "w") as f:
        f.write(FLOW_INI.format(hi=320))
    good = os.path.join(d, "good.h5")
    assert kvlab("sweep", cfg, "--out", good, "--no-fsync", "--progress", "none").returncode == 0
    base = open(good, "rb").read()
    ref = logical(good)
    for i in range(n):
        b = bytearray(base)
        mode = ("bytes", "block512", "truncate")[i % 3]
        if mode == "bytes":
            for _ in range(rng.randint(1, 8)):
                b[rng.randrange(len(b))] = rng.randrange(256)
        elif mode == "block512":
            at = rng.randrange(len(b) - 512)
            b[at:at + 512] = bytes(rng.randrange(256) for _ in range(512))
        else:
            del b[rng.randint(1, len(b) - 1):]
        if bytes(b) == base:
            continue
        path = os.path.join(d, f"c{i}.h5")
        with open(path, "wb") as f:
            f.write(b)
        t.corrupt += 1
        if logical(path) == ref:
            t.corrupt_harmless += 1  # the bytes hit nothing h5py reads (free or padding space)
            continue
        r = kvlab("check", path)
        before = open(path, "rb").read()
        rr = kvlab("sweep", cfg, "--out", path, "--resume", "--no-fsync", "--progress", "none")
        untouched = open(path, "rb").read() == before and not os.path.exists(path + ".rollback")
        if r.returncode == 1 and "DAMAGED" in r.stdout and rr.returncode == 2 and untouched:
            t.corrupt_detected += 1
        else:
            t.fail(f"corruption #{i} ({mode}) changed what h5py reads but check exit {r.returncode}, "
                   f"resume exit {rr.returncode}, file {'untouched' if untouched else 'CHANGED'}")
    meaningful = t.corrupt - t.corrupt_harmless
    print(f"[corrupt] {t.corrupt_detected} of {meaningful} corruptions that changed the data detected "
          f"({t.corrupt_harmless} more hit only unused bytes)", flush=True)


# ---- full disk ----------------------------------------------------------------------------------
def section_disk(t: Table, work):
    from analysis import result_integrity as ri
    d = os.path.join(work, "disk")
    os.makedirs(d)
    cfg = os.path.join(d, "flow.ini")
    with open(cfg, "w") as f:
        f.write(FLOW_INI.format(hi=1600))
    mnt = os.path.join(d, "fs")
    os.makedirs(mnt)
    mounted = os.geteuid() == 0 and subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", mnt], capture_output=True).returncode == 0
    try:
        out = os.path.join(mnt if mounted else d, "full.h5")
        cmd = [KVLAB, "sweep", cfg, "--out", out, "--progress", "none"]
        if not mounted:
            cmd = ["bash", "-c", 'ulimit -f 2048; exec "$@"', "kvlab", *cmd]
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        how = "a 2 MiB tmpfs" if mounted else "ulimit -f 2048"
        leftovers = [p for p in (out + ".rollback", out + ".commit") if os.path.exists(p)]
        rep = ri.verify(out) if os.path.exists(out) else None
        ok = r.returncode == 3 and not leftovers and (rep is None or rep.ok)
        print(f"[disk] full disk ({how}): exit {r.returncode}, {'no' if not leftovers else leftovers} leftovers, "
              f"file {'verifies with ' + str(rep.rows) + ' points' if rep and rep.ok else 'absent or damaged'}",
              flush=True)
        if not ok:
            t.fail(f"full disk ({how}): exit {r.returncode}: {r.stderr.strip()[:300]}")
    finally:
        if mounted:
            subprocess.run(["umount", mnt], capture_output=True)


# ---- bytes per point ------------------------------------------------------------------------------
def run_io(cfg_args, out, env, extra=()):
    r = kvlab("sweep", *cfg_args, "--out", out, "--progress", "none", *extra, env=env, timeout=3600)
    if r.returncode != 0:
        raise RuntimeError(r.stderr)
    with h5py.File(out, "r") as f:
        runs = f["runs"]
        written = float(runs["bytes_written"][-1])
        points = int(runs["points_run"][-1])
        size = os.path.getsize(out)
    return written, points, size


def section_bytes(t: Table, work, full):
    d = os.path.join(work, "bytes")
    os.makedirs(d)
    ini = os.path.join(ROOT, "experiments", "configs", "default.ini")
    args = [ini]
    what = "CPU studies quant_fixed, formats, capacity"
    if not full:
        args += ["--only", "quant_fixed,formats,capacity"]
    elif not os.path.exists(os.path.join(ROOT, "build", "model", "smollm2-135m.h5")):
        # The real-model studies need the imported model (`bash cmake/quickstart.sh run` makes it).
        studies = [m for m in re.findall(r"^\[(\w+)\]", open(ini).read(), re.M)
                   if m != "timing" and not m.startswith(("real_kv", "model_quality"))]
        args += ["--only", ",".join(studies)]
        what = "every study but the real-model ones (no imported model here)"
    else:
        what = "all of it"
    res = {}
    for mode in ("replace", "auto"):
        env = dict(os.environ, KVLAB_COMMIT=mode)
        written, points, size = run_io(args, os.path.join(d, f"{mode}.h5"), env)
        res[mode] = (written / points, points, size)
        print(f"[bytes] KVLAB_COMMIT={mode}: {points} points, file {size / 1e6:.1f} MB, "
              f"{written / 1e6:.1f} MB written, {written / points / 1e3:.1f} KB per point", flush=True)
    t.bytes_before, t.bytes_after = res["replace"][0], res["auto"][0]
    t.bytes_note = (f"default sweep ({what}): "
                    f"{res['auto'][1]} points, a {res['auto'][2] / 1e6:.1f} MB file")
    if not t.bytes_after < t.bytes_before / 5:
        t.fail(f"in-place commits wrote {t.bytes_after:.0f} B per point, the whole-file rewrite {t.bytes_before:.0f}")
    # O(point), not O(file): the same points in a file 4x as long cost the same per point.
    per = {}
    for hi in (800, 3200):
        cfg = os.path.join(d, f"flow{hi}.ini")
        with open(cfg, "w") as f:
            f.write(FLOW_INI.format(hi=hi))
        written, points, size = run_io([cfg], os.path.join(d, f"flow{hi}.h5"), dict(os.environ), ("--no-fsync",))
        per[hi] = written / points
        print(f"[bytes] in place, {points} points, file {size / 1e6:.1f} MB: {per[hi] / 1e3:.1f} KB per point",
              flush=True)
    t.bytes_growth = per[3200] / per[800]
    if t.bytes_growth > 1.5:
        t.fail(f"bytes per point grow with the file: {per[800]:.0f} B at 300 points, {per[3200]:.0f} B at 1200")


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seed", type=int, default=int(os.environ.get("KVLAB_TEST_SEED", "20261126")))
    ap.add_argument("--full", action="store_true", help="more kills and corruptions; bytes on the whole default sweep")
    ap.add_argument("--only", default="inputs,kills,corrupt,disk,bytes")
    a = ap.parse_args(argv)
    sections = set(a.only.split(","))
    print(f"fault injection, seed {a.seed}, kvlab {KVLAB}", flush=True)
    t = Table()
    t0 = time.time()
    with tempfile.TemporaryDirectory(prefix="kvlab_faults_") as work:
        if "inputs" in sections:
            section_inputs(t, work, a.seed)
        if "kills" in sections:
            section_kills(t, work, a.seed, 6 if a.full else 2)
        if "corrupt" in sections:
            section_corrupt(t, work, a.seed, 90 if a.full else 30)
        if "disk" in sections:
            section_disk(t, work)
        if "bytes" in sections:
            section_bytes(t, work, a.full)
    meaningful = t.corrupt - t.corrupt_harmless
    print(f"\nfault injection: {time.time() - t0:.0f} s, seed {a.seed}\n")
    print("| what | count |")
    print("|---|---|")
    if "inputs" in sections:
        print(f"| bad inputs tried | {t.tried} |")
        print(f"| answered exit 2 with nothing touched | {t.refused} (the other {t.accepted}: 0 or -1 where the "
              f"axis's rule allows it, run exactly as given) |")
    if "kills" in sections:
        print(f"| kills survived | {t.kills_survived} of {t.kills} |")
    if "corrupt" in sections:
        print(f"| corruptions detected | {t.corrupt_detected} of {meaningful} ({t.corrupt_harmless} more hit only "
              f"unused bytes) |")
    if "bytes" in sections:
        print(f"| bytes written per point, before and after | {t.bytes_before / 1e3:.1f} KB -> "
              f"{t.bytes_after / 1e3:.1f} KB ({t.bytes_note}); in place, a 4x longer file: "
              f"{t.bytes_growth:.2f}x per point |")
    if t.failures:
        print(f"\n{len(t.failures)} FAILURES:")
        for f in t.failures:
            print("  " + f)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

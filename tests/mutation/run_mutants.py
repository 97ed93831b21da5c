#!/usr/bin/env python3
"""kvlab's planted-bug (mutation) suite: does each test suite notice a realistic bug?

Every mutant in tests/mutation/mutants.py is one small source patch (a unique search/replace
of a short snippet) in reference/, gpu/, sim/ or experiments/. For each mutant the runner

  1. applies the patch to a scratch copy of the source tree (a mutant whose snippet is no
     longer found exactly once is reported "stale", never "killed");
  2. rebuilds incrementally on top of the project's configured build directory (Ninja): it
     recompiles only the translation units that the patched file reaches (through the
     build's compile_commands.json and ninja's dependency log, with ccache when present)
     and relinks only the test executables that cover the mutant, with the recompiled
     objects placed first on the build's own link line; the build directory is never
     written;
  3. runs those tests (their gtest filters) and records "killed" with the first failing
     test (a crash or a timeout kills too) or "survived".

CPU mutants run here (CI runs them through the CTest test `mutation.cpu`, label
"mutation"). GPU mutants are built here and run on a GPU machine:

  python3 tests/mutation/run_mutants.py --kind cpu                       # build + run here
  python3 tests/mutation/run_mutants.py --kind gpu --pack DIR            # build, strip, pack
  python3 tests/mutation/run_mutants.py --run-packed DIR --bin BINDIR    # on the GPU machine

Exit codes: 0 every evaluated mutant killed (or marked equivalent) and at most
--max-stale of them stale; 1 a mutant survived, failed to build, or too many are stale;
2 bad input (unknown mutant, no Ninja build directory, a baseline test that already fails).
"""
import argparse
import concurrent.futures
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import mutants as mutant_list  # noqa: E402

SOURCE_DIRS = ("reference", "sim", "gpu", "experiments", "tests")
EXIT_BAD_INPUT = 2


class BadInput(Exception):
    pass


def log(msg):
    print(msg, flush=True)


# ------------------------------------------------------------------------------ build model
class Build:
    """What the runner needs from a configured Ninja build directory."""

    def __init__(self, build_dir):
        self.dir = os.path.abspath(build_dir)
        cache = os.path.join(self.dir, "CMakeCache.txt")
        if not os.path.exists(os.path.join(self.dir, "build.ninja")) or not os.path.exists(cache):
            raise BadInput(f"{self.dir} is not a configured Ninja build directory "
                           "(cmake -G Ninja; quickstart.sh configures one)")
        self.root = None
        with open(cache) as f:
            for line in f:
                if line.startswith("CMAKE_HOME_DIRECTORY:"):
                    self.root = line.split("=", 1)[1].strip()
        if not self.root:
            raise BadInput(f"{cache} names no source directory")
        cc = os.path.join(self.dir, "compile_commands.json")
        if not os.path.exists(cc):
            raise BadInput(f"{cc} is missing (CMAKE_EXPORT_COMPILE_COMMANDS)")
        with open(cc) as f:
            self.compile = {os.path.normpath(e["file"]): e for e in json.load(f)}
        self.ccache = shutil.which("ccache")
        self._deps = None
        self._links = {}
        self._objects = {}
        self.archive_of = {}  # object -> the project archive it is a member of
        # The mutants are evaluated on threads: the lazily filled tables are built under one
        # lock (a half-filled deps table would make a mutant look "not-built").
        self._lock = threading.RLock()

    def ninja(self, *args):
        r = subprocess.run(["ninja", "-C", self.dir] + list(args), capture_output=True, text=True)
        if r.returncode != 0:
            raise BadInput(f"ninja {' '.join(args)} failed: {r.stderr.strip()[:500]}")
        return r.stdout

    def deps(self):
        """object (absolute) -> set of absolute source/header paths it was built from."""
        with self._lock:
            if self._deps is None:
                deps, obj = {}, None
                for line in self.ninja("-t", "deps").splitlines():
                    if not line.startswith(" ") and ": #deps" in line:
                        obj = os.path.normpath(os.path.join(self.dir, line.split(":")[0]))
                        deps[obj] = set()
                    elif line.strip() and obj:
                        deps[obj].add(os.path.normpath(os.path.join(self.dir, line.strip())))
                self._deps = deps
            return self._deps

    def link_command(self, target):
        """The target's final link command (argv) and the objects/libraries it links."""
        with self._lock:
            return self._link_command(target)

    def _link_command(self, target):
        if target not in self._links:
            cmds = self.ninja("-t", "commands", target).strip().splitlines()
            if not cmds:
                raise BadInput(f"no build commands for target {target}")
            cmd = cmds[-1].strip()
            cmd = re.sub(r"^:\s*&&\s*", "", cmd)
            cmd = re.sub(r"\s*&&\s*:\s*$", "", cmd)
            argv = shlex.split(cmd)
            if "-o" not in argv:
                raise BadInput(f"cannot read the link command of {target}: {cmd[:200]}")
            self._links[target] = argv
        return self._links[target]

    def objects_of(self, target):
        """Objects the target's executable is made of (absolute paths): its own objects and the
        archive members the linker pulled in (read from a link map, one link per target)."""
        with self._lock:
            return self._objects_of(target)

    def _objects_of(self, target):
        if target in self._objects:
            return self._objects[target]
        argv = list(self.link_command(target))
        fd, tmp = tempfile.mkstemp(prefix="kvlab-mutation-link-")
        os.close(fd)
        i = argv.index("-o")
        argv[i + 1] = tmp
        argv.insert(1, f"-Wl,-Map={tmp}.map")
        r = subprocess.run(argv, cwd=self.dir, capture_output=True, text=True)
        if r.returncode != 0:
            raise BadInput(f"cannot link {target} for its link map: {r.stderr.strip()[:500]}")
        objs = set()
        for a in argv:
            if a.endswith(".o"):
                objs.add(os.path.normpath(os.path.join(self.dir, a)))
        members = {}
        with open(tmp + ".map", errors="replace") as f:
            for line in f:
                m = re.match(r"^(\S+\.a)\((\S+\.o)\)", line)
                if m:
                    members.setdefault(os.path.normpath(os.path.join(self.dir, m.group(1))),
                                       set()).add(m.group(2))
        os.unlink(tmp)
        os.unlink(tmp + ".map")
        for lib, names in members.items():
            if not lib.startswith(self.dir + os.sep):
                continue  # system libraries
            for line in self.ninja("-t", "query", os.path.relpath(lib, self.dir)).splitlines():
                s = line.strip()
                if s.endswith(".o") and not s.startswith("|"):
                    o = os.path.normpath(os.path.join(self.dir, s))
                    self.archive_of[o] = lib
                    if os.path.basename(s) in names:
                        objs.add(o)
        self._objects[target] = objs
        return objs

    def target_path(self, target):
        argv = self.link_command(target)
        return os.path.normpath(os.path.join(self.dir, argv[argv.index("-o") + 1]))


# ------------------------------------------------------------------------------ one mutant
def apply_patch(text, m):
    n = text.count(m["find"])
    if n != m.get("count", 1):
        return None, f"snippet found {n} times (expected {m.get('count', 1)})"
    return text.replace(m["find"], m["replace"]), ""


def tus_for(build, m, targets):
    """Translation units (compile_commands entries) the mutant's file reaches in `targets`."""
    path = os.path.normpath(os.path.join(build.root, m["file"]))
    if path in build.compile:
        return [build.compile[path]]
    linked = set()
    for t in targets:
        linked |= build.objects_of(t)
    out = []
    for obj, deps in build.deps().items():
        if path in deps and obj in linked:
            src = [d for d in deps if d in build.compile]
            for s in src:
                e = build.compile[s]
                if os.path.normpath(os.path.join(e["directory"], output_of(e))) == obj:
                    out.append(e)
    return out


def output_of(entry):
    if "output" in entry:
        return entry["output"]
    argv = shlex.split(entry["command"])
    return argv[argv.index("-o") + 1]


def link_target(build, target, objects, bin_dir):
    """Relinks `target` with the recompiled objects ({original object: new object}). An
    original on the link line is replaced; an archive member is replaced inside a copy of its
    archive (same member, same position: the executable's layout barely moves, which keeps
    the packed GPU binaries near-identical); a member whose name is not unique in its archive
    goes first on the link line instead (the linker then never pulls the original)."""
    build.objects_of(target)  # fills archive_of for this target's libraries
    argv = list(build.link_command(target))
    i = argv.index("-o")
    out = os.path.join(bin_dir, os.path.basename(argv[i + 1]))
    argv[i + 1] = out
    os.makedirs(bin_dir, exist_ok=True)
    front = dict(objects)
    for k, a in enumerate(argv):
        p = os.path.normpath(os.path.join(build.dir, a))
        if p in front:
            argv[k] = front.pop(p)
    copies = {}
    for orig in list(front):
        lib = build.archive_of.get(orig)
        if not lib:
            continue
        names = subprocess.run(["ar", "t", lib], capture_output=True, text=True).stdout.split()
        if names.count(os.path.basename(orig)) != 1:
            continue
        if lib not in copies:
            copies[lib] = os.path.join(bin_dir, "lib", os.path.relpath(lib, build.dir))
            os.makedirs(os.path.dirname(copies[lib]), exist_ok=True)
            shutil.copyfile(lib, copies[lib])
        r = subprocess.run(["ar", "r", copies[lib], front[orig]], capture_output=True, text=True)
        if r.returncode != 0:
            return out, r.returncode, r.stderr
        del front[orig]
    for k, a in enumerate(argv):
        p = os.path.normpath(os.path.join(build.dir, a))
        if p in copies:
            argv[k] = copies[p]
    argv = argv[:1] + sorted(front.values()) + argv[1:]
    r = subprocess.run(argv, cwd=build.dir, capture_output=True, text=True)
    return out, r.returncode, r.stderr


FAILED_RE = re.compile(r"^\[  FAILED  \] (\S+)", re.M)
PASSED_RE = re.compile(r"^\[  PASSED  \] (\d+) test", re.M)


def run_test(binary, gtest_filter, cwd, timeout, log_path, env_extra=None):
    """Runs one gtest binary; returns (passed, first_failure, seconds)."""
    cmd = [binary, "--gtest_brief=1", "--gtest_fail_fast"]
    if gtest_filter:
        cmd.append("--gtest_filter=" + gtest_filter)
    env = dict(os.environ)
    env.update(env_extra or {})
    t0 = time.time()
    try:
        r = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired as e:
        with open(log_path, "a") as f:
            f.write(f"$ {' '.join(cmd)}\nTIMEOUT after {timeout} s\n{e.stdout or ''}\n")
        return False, f"timeout after {timeout:.0f} s", time.time() - t0
    with open(log_path, "a") as f:
        f.write(f"$ {' '.join(cmd)}\n{r.stdout}\n{r.stderr}\nexit {r.returncode}\n")
    if r.returncode == 0:
        m = PASSED_RE.search(r.stdout)
        if m and int(m.group(1)) == 0:  # every selected test skipped (e.g. no GPU): no verdict
            return True, "no test ran (all skipped)", time.time() - t0
        return True, "", time.time() - t0
    m = FAILED_RE.search(r.stdout)
    if m:
        return False, m.group(1), time.time() - t0
    return False, f"exit {r.returncode} (crash or abort)", time.time() - t0


def evaluate(build, m, scratch, work, baseline, pack_dir=None):
    """Builds and runs (or, with pack_dir, packs) one mutant. Returns a result dict."""
    res = {"id": m["id"], "file": m["file"], "what": m["what"], "kind": m["kind"],
           "result": "", "killed_by": "", "detail": "", "seconds": 0.0}
    t0 = time.time()
    path = os.path.join(scratch, m["file"])
    try:
        with open(os.path.join(build.root, m["file"])) as f:
            original = f.read()
    except OSError:
        res.update(result="stale", detail=f"{m['file']} no longer exists")
        return res
    mutated, why = apply_patch(original, m)
    if mutated is None:
        res.update(result="stale", detail=why)
        return res
    mdir = os.path.join(work, m["id"])
    os.makedirs(mdir, exist_ok=True)
    targets = [t for t, _ in m["tests"]]
    if not targets:
        res.update(result="survived", detail="no covering test")
        return res
    try:
        tus = tus_for(build, m, targets)
    except BadInput as e:
        res.update(result="build-error", detail=str(e))
        return res
    if not tus:
        res.update(result="not-built", detail="no translation unit of the covering tests "
                   "includes the file in this build")
        return res
    # The patched copy is private to this mutant: a scratch tree per mutant would cost a copy;
    # instead every mutant gets an overlay directory holding only its patched file, searched
    # before the shared scratch tree.
    overlay = os.path.join(mdir, "src")
    os.makedirs(os.path.dirname(os.path.join(overlay, m["file"])), exist_ok=True)
    with open(os.path.join(overlay, m["file"]), "w") as f:
        f.write(mutated)
    objs, compiled_from = {}, {}
    for e in tus:
        out, rc, err = compile_tu_overlay(build, e, scratch, overlay, os.path.join(mdir, "obj"))
        if rc != 0:
            res.update(result="build-error", detail=f"compiling {e['file']}: {err.strip()[-800:]}")
            return res
        orig = os.path.normpath(os.path.join(e["directory"], output_of(e)))
        objs[orig] = out
        compiled_from[orig] = e["file"]
    res["tus"] = len(objs)
    log_path = os.path.join(mdir, "log.txt")
    patched_src = os.path.normpath(os.path.join(build.root, m["file"]))
    for target, flt in m["tests"]:
        # Only this target's objects: a header reaches other targets' test objects too.
        mine = build.objects_of(target)
        objs_t = {o: n for o, n in objs.items()
                  if o in mine or os.path.normpath(compiled_from[o]) == patched_src}
        binary, rc, err = link_target(build, target, objs_t, os.path.join(mdir, "bin"))
        if rc != 0:
            res.update(result="build-error", detail=f"linking {target}: {err.strip()[-800:]}")
            return res
        if pack_dir is not None:
            dest = os.path.join(pack_dir, "mutants", m["id"])
            os.makedirs(dest, exist_ok=True)
            subprocess.run(["strip", "-o", os.path.join(dest, os.path.basename(binary)), binary],
                           check=True)
            continue
        base_s = baseline.get((target, flt), 60.0)
        ok, fail, _ = run_test(binary, flt, build.root, max(30.0, 10 * base_s), log_path)
        if not ok:
            res.update(result="killed", killed_by=f"{target}: {fail}")
            break
        if fail:  # passed without running anything
            res.update(result="not-run", detail=f"{target}: {fail}")
            break
    else:
        if pack_dir is not None:
            res.update(result="packed")
        else:
            res.update(result="equivalent" if m.get("equivalent") else "survived",
                       detail=m.get("equivalent", ""))
    res["seconds"] = round(time.time() - t0, 1)
    if pack_dir is None:
        shutil.rmtree(os.path.join(mdir, "obj"), ignore_errors=True)
        shutil.rmtree(os.path.join(mdir, "bin"), ignore_errors=True)
    return res


def compile_tu_overlay(build, entry, scratch, overlay, obj_dir):
    """compile_tu with the mutant's overlay directory searched before the scratch tree (so
    `#include "reference/..."` finds the patched header) and the patched source compiled from
    the overlay."""
    argv = shlex.split(entry["command"])
    rel_src = os.path.relpath(os.path.normpath(entry["file"]), build.root)
    src_in_overlay = os.path.join(overlay, rel_src)
    src = src_in_overlay if os.path.exists(src_in_overlay) else os.path.join(scratch, rel_src)
    out = os.path.join(obj_dir, os.path.relpath(os.path.normpath(os.path.join(
        entry["directory"], output_of(entry))), build.dir))
    os.makedirs(os.path.dirname(out), exist_ok=True)
    new = []
    i = 0
    while i < len(argv):
        a = argv[i]
        if a == "-o":
            new += ["-o", out]
            i += 2
            continue
        if a == "-I" + build.root:
            new += ["-I" + overlay, "-I" + scratch]
            i += 1
            continue
        if a == "-I" and i + 1 < len(argv) and argv[i + 1] == build.root:
            new += ["-I", overlay, "-I", scratch]
            i += 2
            continue
        if os.path.normpath(a) == os.path.normpath(entry["file"]):
            a = src
        new.append(a)
        i += 1
    if build.ccache:
        new = [build.ccache] + new
    r = subprocess.run(new, cwd=entry["directory"], capture_output=True, text=True)
    return out, r.returncode, r.stderr


# ------------------------------------------------------------------------------ driver
def select(args):
    ms = mutant_list.MUTANTS
    ids = [m["id"] for m in ms]
    if len(set(ids)) != len(ids):
        raise BadInput("duplicate mutant ids in mutants.py")
    for m in ms:
        for k in ("id", "file", "find", "replace", "what", "kind", "tests"):
            if k not in m:
                raise BadInput(f"mutant {m.get('id', '?')} has no '{k}'")
        if m["kind"] not in ("cpu", "gpu"):
            raise BadInput(f"mutant {m['id']}: kind must be cpu or gpu")
        if m["find"] == m["replace"]:
            raise BadInput(f"mutant {m['id']}: the patch changes nothing")
    if args.only:
        want = set(args.only.split(","))
        unknown = want - set(ids)
        if unknown:
            raise BadInput(f"unknown mutant ids: {', '.join(sorted(unknown))}")
        ms = [m for m in ms if m["id"] in want]
    if args.kind != "all":
        ms = [m for m in ms if m["kind"] == args.kind]
    drop = {t for t in args.without.split(",") if t}
    if drop:
        ms = [dict(m, tests=[(t, f) for t, f in m["tests"] if t not in drop]) for m in ms]
    if args.exclude:
        def minus(f):
            pos, _, neg = (f or "*").partition("-")
            return (pos or "*") + "-" + ":".join(x for x in (neg, args.exclude) if x)
        ms = [dict(m, tests=[(t, minus(f)) for t, f in m["tests"]]) for m in ms]
    return ms


def make_scratch(build):
    scratch = tempfile.mkdtemp(prefix="kvlab-mutation-")
    for d in SOURCE_DIRS:
        shutil.copytree(os.path.join(build.root, d), os.path.join(scratch, d),
                        ignore=shutil.ignore_patterns("__pycache__", "*.pyc"), symlinks=True)
    return scratch


def baseline_runs(build, ms, work):
    """Runs every (target, filter) the selected mutants use on the unmutated build."""
    base = {}
    pairs = sorted({(t, f) for m in ms for t, f in m["tests"]})
    log_path = os.path.join(work, "baseline.txt")
    for target, flt in pairs:
        binary = build.target_path(target)
        if not os.path.exists(binary):
            raise BadInput(f"{binary} is not built (build the project first)")
        ok, fail, s = run_test(binary, flt, build.root, 1800, log_path)
        if ok and fail:  # the filter selected no test, or every selected test skipped
            raise BadInput(f"baseline {target} --gtest_filter={flt}: {fail}; a mutant judged by "
                           f"it could never be killed (fix the filter, or run where the tests "
                           f"run); see {log_path}")
        if not ok:
            raise BadInput(f"baseline {target} --gtest_filter={flt} fails without any mutant "
                           f"({fail}); see {log_path}")
        base[(target, flt)] = s
        log(f"baseline {target} [{flt or '*'}] passes in {s:.1f} s")
    return base


def summarize(results, max_stale, out_json):
    width = max([len(r["id"]) for r in results] + [10])
    log("")
    log(f"{'mutant':<{width}}  {'result':<11}  killed by / detail")
    for r in results:
        extra = r["killed_by"] or r["detail"]
        log(f"{r['id']:<{width}}  {r['result']:<11}  {extra[:160]}")
    counts = {}
    for r in results:
        counts.setdefault(r["kind"], {}).setdefault(r["result"], 0)
        counts[r["kind"]][r["result"]] += 1
    bad = False
    for kind, c in sorted(counts.items()):
        total = sum(c.values())
        evaluated = total - c.get("stale", 0) - c.get("not-built", 0) - c.get("not-run", 0)
        killed = c.get("killed", 0)
        log(f"{kind}: killed {killed} / {evaluated} evaluated ({total} mutants; "
            + ", ".join(f"{k} {v}" for k, v in sorted(c.items())) + ")")
        if c.get("survived", 0) or c.get("build-error", 0) or c.get("not-run", 0):
            bad = True
        if total and c.get("stale", 0) > max_stale * total:
            log(f"{kind}: {c['stale']} of {total} mutants are stale (more than {max_stale:.0%}): "
                "update their snippets in tests/mutation/mutants.py")
            bad = True
    survivors = [r["id"] for r in results if r["result"] == "survived"]
    if survivors:
        log("survived: " + ", ".join(survivors))
    if out_json:
        with open(out_json, "w") as f:
            json.dump(results, f, indent=1)
    return 1 if bad else 0


def run_packed(args):
    """On the GPU machine: run the packed mutant binaries (manifest.json) with their filters."""
    with open(os.path.join(args.run_packed, "manifest.json")) as f:
        manifest = json.load(f)
    root = os.getcwd()
    logs = args.logs or tempfile.mkdtemp(prefix="kvlab-mutation-logs-")
    os.makedirs(logs, exist_ok=True)
    results, base = [], {}
    pairs = sorted({(t, f) for m in manifest for t, f in m["tests"]})
    if args.no_baseline:  # the caller ran these tests on the unmutated binaries already
        pairs, base = [], {(t, f): 6.0 for t, f in pairs}
    for target, flt in pairs:
        binary = os.path.join(args.bin, target)
        ok, fail, s = run_test(binary, flt, root, 1800, os.path.join(logs, "baseline.txt"))
        if not ok:
            log(f"baseline {target} [{flt}] fails without any mutant: {fail}")
            return EXIT_BAD_INPUT
        base[(target, flt)] = s
        log(f"baseline {target} [{flt}] passes in {s:.1f} s")

    def evaluate_packed(m):
        res = {"id": m["id"], "file": m["file"], "what": m["what"], "kind": "gpu",
               "result": "", "killed_by": "", "detail": ""}
        if m.get("result") != "packed":
            res.update(result=m.get("result", "?"), detail=m.get("detail", ""))
            return res
        t0 = time.time()
        for target, flt in m["tests"]:
            binary = os.path.join(args.run_packed, "mutants", m["id"], target)
            ok, fail, _ = run_test(binary, flt, root, max(60.0, 10 * base[(target, flt)]),
                                   os.path.join(logs, m["id"] + ".txt"))
            if not ok:
                res.update(result="killed", killed_by=f"{target}: {fail}")
                break
            if fail:
                res.update(result="not-run", detail=f"{target}: {fail}")
                break
        else:
            res.update(result="equivalent" if m.get("equivalent") else "survived",
                       detail=m.get("equivalent", ""))
        res["seconds"] = round(time.time() - t0, 1)
        return res

    # --jobs mutant binaries at a time (small tests: they share the GPU without changing any
    # verdict); the JSON is rewritten after every mutant, so a caller's time limit keeps the
    # finished ones.
    done = {}
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        futures = {pool.submit(evaluate_packed, m): i for i, m in enumerate(manifest)}
        for fut in concurrent.futures.as_completed(futures):
            res = fut.result()
            done[futures[fut]] = res
            log(f"{res['id']}: {res['result']} {res['killed_by']}")
            results = [done[i] for i in sorted(done)]
            if args.json:
                with open(args.json + ".tmp", "w") as f:
                    json.dump(results, f, indent=1)
                os.replace(args.json + ".tmp", args.json)
    results = [done[i] for i in sorted(done)]
    return summarize(results, args.max_stale, args.json)


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n\n", 1)[1])
    ap.add_argument("--build", default="build", help="configured Ninja build directory")
    ap.add_argument("--kind", choices=("cpu", "gpu", "all"), default="cpu")
    ap.add_argument("--only", help="comma-separated mutant ids")
    ap.add_argument("--exclude", default="",
                    help="gtest patterns (':'-separated) left out of every run, e.g. the test "
                         "cases a change added")
    ap.add_argument("--without", default="",
                    help="comma-separated test targets to leave out (e.g. the tests a change "
                         "added, to measure the suite before it)")
    ap.add_argument("--jobs", type=int, default=int(os.environ.get("KVLAB_MUTATION_JOBS", "2")))
    ap.add_argument("--list", action="store_true", help="list the mutants and exit")
    ap.add_argument("--check", action="store_true",
                    help="only check that every selected patch applies (stale otherwise)")
    ap.add_argument("--json", help="write the results here")
    ap.add_argument("--keep", action="store_true", help="keep the scratch tree and logs")
    ap.add_argument("--max-stale", type=float, default=0.25,
                    help="fail when more than this fraction of a kind is stale")
    ap.add_argument("--pack", help="GPU: build, strip and collect the mutant binaries here")
    ap.add_argument("--run-packed", help="run a packed directory (on the GPU machine)")
    ap.add_argument("--bin", help="with --run-packed: the unmutated binaries (baseline)")
    ap.add_argument("--logs", help="with --run-packed: where the logs go")
    ap.add_argument("--no-baseline", action="store_true",
                    help="with --run-packed: skip the unmutated runs (the caller just ran the "
                         "same tests and they passed); mutant runs time out after 60 s")
    args = ap.parse_args(argv)
    try:
        if args.run_packed:
            if not args.bin:
                raise BadInput("--run-packed needs --bin (the unmutated binaries)")
            return run_packed(args)
        ms = select(args)
        if args.list:
            for m in ms:
                log(f"{m['id']:<34} {m['kind']:<4} {m['file']:<44} {m['what']}")
            return 0
        if args.check:
            root = os.path.dirname(os.path.dirname(HERE))
            stale = 0
            for m in ms:
                try:
                    with open(os.path.join(root, m["file"])) as f:
                        _, why = apply_patch(f.read(), m)
                except OSError:
                    why = "the file no longer exists"
                if why:
                    stale += 1
                    log(f"stale {m['id']}: {m['file']}: {why}")
            log(f"{len(ms) - stale} of {len(ms)} patches apply")
            return 1 if stale else 0
        build = Build(args.build)
        if not ms:
            raise BadInput("no mutant selected")
        scratch = make_scratch(build)
        work = os.path.join(scratch, "_mutants")
        os.makedirs(work)
        log(f"scratch tree {scratch}; {len(ms)} mutants; {args.jobs} jobs; "
            f"ccache {'on' if build.ccache else 'off'}")
        t0 = time.time()
        if args.pack:
            os.makedirs(args.pack, exist_ok=True)
            baseline = {}
        else:
            baseline = baseline_runs(build, ms, work)
        results = []
        with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, args.jobs)) as ex:
            futs = {ex.submit(evaluate, build, m, scratch, work, baseline, args.pack): m for m in ms}
            for fut in concurrent.futures.as_completed(futs):
                r = fut.result()
                results.append(r)
                log(f"[{len(results)}/{len(ms)}] {r['id']}: {r['result']} {r['killed_by']}"
                    f"{(' [' + str(r['tus']) + ' TUs]') if r.get('tus') else ''}"
                    f"{(' ' + r['detail'][:200]) if r['result'] not in ('killed', 'survived') else ''}"
                    f" ({r.get('seconds', 0)} s)")
        order = {m["id"]: i for i, m in enumerate(ms)}
        results.sort(key=lambda r: order[r["id"]])
        log(f"total {time.time() - t0:.0f} s")
        if args.pack:
            manifest = []
            for m, r in zip(ms, results):
                manifest.append({"id": m["id"], "file": m["file"], "what": m["what"],
                                 "tests": m["tests"], "result": r["result"],
                                 "detail": r["detail"], "equivalent": m.get("equivalent", "")})
            with open(os.path.join(args.pack, "manifest.json"), "w") as f:
                json.dump(manifest, f, indent=1)
            bad = [r for r in results if r["result"] != "packed"]
            for r in bad:
                log(f"not packed: {r['id']}: {r['result']} {r['detail'][:300]}")
            code = 1 if any(r["result"] == "build-error" for r in bad) else 0
        else:
            code = summarize(results, args.max_stale, args.json)
        if not args.keep:
            shutil.rmtree(scratch, ignore_errors=True)
        else:
            log(f"kept {scratch}")
        return code
    except BadInput as e:
        print(f"run_mutants: {e}", file=sys.stderr)
        return EXIT_BAD_INPUT


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

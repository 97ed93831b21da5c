"""The mutation suite's runner (tests/mutation/run_mutants.py) and its mutant list.

The runner itself runs as the CTest test `mutation.cpu` (label mutation); these checks are the
quick part: the patch rule (a snippet found exactly once, else "stale", never "killed"), the
list's shape (every layer planted, ids unique, kinds valid) and the command-line errors.
"""
import importlib.util
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RUNNER = os.path.join(ROOT, "tests", "mutation", "run_mutants.py")


def load_runner():
    spec = importlib.util.spec_from_file_location("run_mutants", RUNNER)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_a_patch_applies_only_to_a_unique_snippet():
    r = load_runner()
    m = {"find": "a < n", "replace": "a <= n"}
    assert r.apply_patch("for (a = 0; a < n; ++a)", m) == ("for (a = 0; a <= n; ++a)", "")
    text, why = r.apply_patch("for (b = 0; b < n; ++b)", m)
    assert text is None and "found 0 times" in why
    text, why = r.apply_patch("a < n; a < n", m)
    assert text is None and "found 2 times" in why


def test_the_list_plants_bugs_in_every_layer():
    r = load_runner()
    ms = r.mutant_list.MUTANTS
    assert len(ms) >= 40
    ids = [m["id"] for m in ms]
    assert len(set(ids)) == len(ids)
    layers = {}
    for m in ms:
        assert m["kind"] in ("cpu", "gpu"), m["id"]
        assert m["find"] != m["replace"], m["id"]
        assert m["tests"], m["id"]
        assert os.path.exists(os.path.join(ROOT, m["file"])), m["file"]
        layers[m["file"].split("/")[0]] = layers.get(m["file"].split("/")[0], 0) + 1
    for layer in ("reference", "sim", "experiments", "gpu"):
        assert layers.get(layer, 0) >= 3, layers


def test_bad_input_exits_2_with_a_clear_message():
    p = subprocess.run([sys.executable, RUNNER, "--only", "no-such-mutant", "--check"],
                       capture_output=True, text=True)
    assert p.returncode == 2
    assert "unknown mutant ids: no-such-mutant" in p.stderr
    p = subprocess.run([sys.executable, RUNNER, "--build", "/nonexistent", "--only",
                        "ref-decode-scale-twice"], capture_output=True, text=True)
    assert p.returncode == 2
    assert "not a configured Ninja build directory" in p.stderr


def test_check_reports_whether_every_patch_applies():
    p = subprocess.run([sys.executable, RUNNER, "--kind", "all", "--check"],
                       capture_output=True, text=True)
    # stale mutants are listed by name; the count line is always there
    assert "patches apply" in p.stdout
    assert p.returncode in (0, 1)
    if p.returncode == 1:
        assert "stale " in p.stdout


def test_packed_mutants_run_in_parallel_and_keep_the_manifest_order(tmp_path):
    # Three fake packed "gpu_tests": one fails a test (killed), one passes (survived), one
    # skips everything (not-run, never "survived"); run 3 at a time, results in manifest order.
    scripts = {
        "m-killed": 'echo "[  FAILED  ] Suite.Case"; exit 1',
        "m-survived": 'sleep 0.5; echo "[  PASSED  ] 2 tests."; exit 0',
        "m-skipped": 'echo "[  PASSED  ] 0 tests."; exit 0',
    }
    packed = tmp_path / "gpu_mutants"
    manifest = []
    for mid, body in scripts.items():
        d = packed / "mutants" / mid
        d.mkdir(parents=True)
        exe = d / "gpu_tests"
        exe.write_text("#!/bin/sh\n" + body + "\n")
        exe.chmod(0o755)
        manifest.append({"id": mid, "file": "gpu/x.cu", "what": mid, "result": "packed",
                         "tests": [["gpu_tests", "Suite.*"]]})
    (packed / "manifest.json").write_text(__import__("json").dumps(manifest))
    out = tmp_path / "res.json"
    p = subprocess.run([sys.executable, RUNNER, "--run-packed", str(packed), "--bin",
                        str(tmp_path), "--no-baseline", "--jobs", "3", "--json", str(out),
                        "--logs", str(tmp_path / "logs")], capture_output=True, text=True,
                       cwd=str(tmp_path))
    res = __import__("json").loads(out.read_text())
    assert [r["id"] for r in res] == list(scripts), p.stdout
    assert [r["result"] for r in res] == ["killed", "survived", "not-run"], p.stdout
    assert res[0]["killed_by"] == "gpu_tests: Suite.Case"
    assert p.returncode == 1  # a survivor fails the run


def test_the_gpu_stage_runs_every_gpu_mutants_tests_unmutated_first():
    # tests/gpu_stage.sh runs the packed GPU mutants with --no-baseline: its own gpu_tests run
    # is their baseline, so its filter must hold every pattern a GPU mutant is judged by (else
    # a test that fails without any mutant would count as a kill).
    import fnmatch
    import re
    with open(os.path.join(ROOT, "tests", "gpu_stage.sh")) as f:
        stage = f.read()
    pats = [p for line in re.findall(r'^FILTER\+?="([^"]*)"', stage, re.M)
            for p in line.split(":") if p]
    assert pats
    for m in load_runner().mutant_list.MUTANTS:
        if m["kind"] != "gpu":
            continue
        for _, flt in m["tests"]:
            for p in flt.split(":"):
                # a mutant's pattern is covered when the stage runs every test it names
                assert any(fnmatch.fnmatch(p.replace("*", "Z"), q) for q in pats), (m["id"], p)

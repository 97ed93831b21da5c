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

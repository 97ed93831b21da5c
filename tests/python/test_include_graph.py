"""cmake/include_graph.py --check: the layering rules hold on this tree, and each rule catches
a planted violation (an upward include per layer, an include cycle between folders of
experiments/, a kernel header or a CUDA #if in the driver outside its CUDA backend; the Python
bindings, which bind the kernels themselves, are exempt)."""
import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "cmake"))
import include_graph  # noqa: E402


def test_this_tree_obeys_the_layering(capsys):
    rc = include_graph.main([ROOT, "--check"])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "0 layering violations" in out


def make_tree(tmp_path, files):
    """A minimal source tree: the four layers, a clean include in each, plus `files`."""
    base = {
        "reference/core/error.h": "#pragma once\n",
        "reference/formats/formats.h": '#include "reference/core/error.h"\n',
        "sim/alloc/block_allocator.h": '#include "reference/core/error.h"\n',
        "gpu/quant/append.cu": '#include "reference/formats/formats.h"\n',
        "gpu/runtime/executor.cu": '#include "gpu/quant/append.h"\n#include "sim/alloc/block_allocator.h"\n',
        "experiments/bench/bench.h": '#include "reference/core/error.h"\n',
        "experiments/kinds/kind.cpp": '#include "experiments/bench/bench.h"\n#include "sim/alloc/block_allocator.h"\n',
        "experiments/cuda/kind_device.cpp": '#include "experiments/bench/bench.h"\n#include "gpu/quant/append.h"\n',
        "experiments/python/bindings/gpu.cpp": '#if KVLAB_HAVE_CUDA\n#include "gpu/quant/append.h"\n#endif\n',
    }
    base.update(files)
    for rel, text in base.items():
        p = tmp_path / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    return str(tmp_path)


def violations(tmp_path, files):
    return include_graph.violations(include_graph.scan(make_tree(tmp_path, files)))


def test_a_clean_tree_has_no_violation(tmp_path):
    assert violations(tmp_path, {}) == []


@pytest.mark.parametrize("path,text,expect", [
    ("reference/quant/append.h", '#include "sim/alloc/block_allocator.h"\n', "reference/ includes nothing outside"),
    ("reference/quant/append.h", '#include "gpu/quant/append.h"\n', "reference/ includes nothing outside"),
    ("sim/engine/engine.cpp", '#include "gpu/quant/append.h"\n', "sim/ includes nothing from gpu/"),
    ("gpu/step/step.cu", '#include "sim/alloc/block_allocator.h"\n', "outside gpu/runtime/ includes nothing from sim/"),
    ("gpu/step/step.cu", '#include "gpu/runtime/executor.h"\n', "includes nothing from gpu/runtime/"),
    ("sim/engine/engine.cpp", '#include "experiments/bench/bench.h"\n', "only experiments/ includes experiments/"),
    ("gpu/quant/q.cu", '#include "analysis/style.h"\n', "nothing includes analysis/"),
    ("experiments/kinds/other.cpp", '#include "gpu/quant/append.h"\n', "only experiments/cuda/ includes gpu/"),
    ("experiments/run/runner.cpp", '#include "experiments/bench/bench.h"\n#if defined(KVLAB_HAVE_CUDA)\n#endif\n',
     "tests KVLAB_HAVE_CUDA"),
])
def test_each_rule_catches_its_violation(tmp_path, path, text, expect):
    bad = violations(tmp_path, {path: text})
    assert len(bad) == 1 and expect in bad[0], bad
    assert bad[0].startswith(path), bad


def test_a_cycle_between_driver_folders_is_caught(tmp_path):
    bad = violations(tmp_path, {"experiments/bench/registry.h": '#include "experiments/kinds/kinds.h"\n'})
    assert len(bad) == 1 and "include cycle between experiments/bench, experiments/kinds" in bad[0], bad


def test_the_check_exits_1_on_a_violation(tmp_path, capsys):
    root = make_tree(tmp_path, {"sim/engine/engine.cpp": '#include "gpu/quant/append.h"\n'})
    assert include_graph.main([root, "--check"]) == 1
    assert "1 layering violations" in capsys.readouterr().out
    assert include_graph.main([str(tmp_path / "nowhere"), "--check"]) == 2

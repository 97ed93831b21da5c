"""One spelling per format: the analysis side's alias table is the C++ one
(reference/layout/layout_names.cpp), the figure style has one colour key per format and none for
an older spelling, old result files are read with canonical names, and the driver writes the
canonical name when a config uses an older one."""
import os
import re

import h5py
import numpy as np

from analysis import style
from analysis.load import FORMAT_ALIASES, VARIANT_ALIASES, load

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def cpp_aliases():
    text = open(os.path.join(ROOT, "reference", "layout", "layout_names.cpp")).read()
    body = text[text.index("format_name_aliases()"):]
    body = body[:body.index("return v;")]
    return dict(re.findall(r'\{"([a-z0-9_]+)",\s*"([a-z0-9_]+)"\}', body))


def test_the_alias_tables_agree():
    cpp = cpp_aliases()
    assert len(cpp) >= 6, cpp
    assert FORMAT_ALIASES == cpp
    variant_src = open(os.path.join(ROOT, "reference", "dsv4", "variant_names.cpp")).read()
    for old, new in VARIANT_ALIASES.items():
        assert f'"{old}"' in variant_src and f'"{new}"' in variant_src


def test_one_style_key_per_format():
    for alias, canonical in FORMAT_ALIASES.items():
        assert alias not in style.FORMAT_COLORS and alias not in style.FORMAT_MARKERS, alias
        assert style.format_color(alias) == style.format_color(canonical)
        assert style.format_marker(alias) == style.format_marker(canonical)
    # Different formats keep different colours (fp4_e2m1 shares NVFP4's: the element it stores).
    kv = ["bf16", "fp16", "fp8_e4m3", "fp8_e4m3_pt", "fp8_e5m2", "nvfp4", "mxfp4"]
    assert len({style.format_color(f) for f in kv}) == len(kv)


def write_old_file(path, column, values):
    with h5py.File(path, "w") as f:
        f.attrs["kvlab_schema"] = "kvlab.results"
        f.attrs["schema_version"] = np.int64(1)
        g = f.create_group("index")
        g.attrs["columns"] = ["kind", column]
        g.create_dataset("kind", data=np.array(["k"] * len(values), dtype=h5py.string_dtype()))
        g.create_dataset(column, data=np.array(values, dtype=h5py.string_dtype()))


def test_old_files_are_read_with_canonical_names(tmp_path):
    cases = {"kv_format": (["fp8_e4m3_per_token", "bf16"], ["fp8_e4m3_pt", "bf16"]),
             "scheme": (["fp8_e4m3_per_tensor", "fp8_e5m2_per_tensor", "mxfp4"], ["fp8_e4m3", "fp8_e5m2", "mxfp4"]),
             "format": (["e4m3", "e5m2", "e2m1", "fp16"], ["fp8_e4m3", "fp8_e5m2", "fp4_e2m1", "fp16"]),
             "variant": (["seed004", "public_v4"], ["per_token_scales", "public_v4"])}
    for column, (old, new) in cases.items():
        p = tmp_path / f"{column}.h5"
        write_old_file(p, column, old)
        assert list(load(str(p)).index[column]) == new, column


def test_the_driver_writes_canonical_names(run, tmp_path):
    cfg = tmp_path / "aliases.ini"
    cfg.write_text("name = aliases\n"
                   "[q]\nkind = quant_error\nscheme = fp8_e4m3_per_token, fp8_e5m2_per_tensor\ntokens = 16\n"
                   "[f]\nkind = format_error\nformat = e4m3, e2m1\ntokens = 16\nhead_dim = 32\n"
                   "[c]\nkind = capacity\nkv_format = fp8_e4m3_per_tensor\n")
    out = tmp_path / "aliases.h5"
    r = run("sweep", cfg, "--out", out, "--progress", "none", "--no-fsync")
    assert r.returncode == 0, r.stdout + r.stderr
    with h5py.File(out, "r") as f:
        idx = {c: list(f["index"][c].asstr()[()]) for c in ("kind", "scheme", "format", "kv_format")}
    rows = list(zip(idx["kind"], idx["scheme"], idx["format"], idx["kv_format"]))
    assert {s for k, s, _, _ in rows if k == "quant_error"} == {"fp8_e4m3_pt", "fp8_e5m2"}
    assert {fm for k, _, fm, _ in rows if k == "format_error"} == {"fp8_e4m3", "fp4_e2m1"}
    assert {kf for k, _, _, kf in rows if k == "capacity"} == {"fp8_e4m3"}

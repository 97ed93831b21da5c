"""Loading kvlab result files (schema "kvlab.results", version 1; see
experiments/results/result_file.h for the layout).

Only h5py, numpy and pandas: the HDF5 file is the whole interface to the C++ side.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field

import h5py
import numpy as np
import pandas as pd

SCHEMA_NAME = "kvlab.results"
SCHEMA_VERSION = 1
# The column a merged index (load_many) adds: the file each row came from.
FILE_COLUMN = "_file"

# One spelling per format (reference/layout/layout_names.h): files written before the names
# were unified hold older spellings, mapped here, as a file is read, to the canonical name.
# FORMAT_ALIASES is format_name_aliases() of reference/layout/layout_names.cpp
# (tests/python/test_names.py checks that they agree).
FORMAT_ALIASES = {
    "fp8_e4m3_per_tensor": "fp8_e4m3",
    "e4m3": "fp8_e4m3",
    "fp8_e4m3_per_token": "fp8_e4m3_pt",
    "fp8_e5m2_per_tensor": "fp8_e5m2",
    "e5m2": "fp8_e5m2",
    "e2m1": "fp4_e2m1",
}
# The DSV4 storage bundle's older name (reference/dsv4/variant_names.h).
VARIANT_ALIASES = {"seed004": "per_token_scales"}
# Index columns that hold format names (kv_format, quant_error's scheme, format_error's format)
# or DSV4 bundle names.
_NAME_COLUMNS = {"kv_format": FORMAT_ALIASES, "scheme": FORMAT_ALIASES, "format": FORMAT_ALIASES,
                 "variant": VARIANT_ALIASES}


def canonical_format(name):
    """The canonical spelling of a format name (any other value unchanged)."""
    return FORMAT_ALIASES.get(name, name) if isinstance(name, str) else name


def canonical_names(index: pd.DataFrame) -> pd.DataFrame:
    """index with every format / variant name column in its canonical spelling."""
    for col, aliases in _NAME_COLUMNS.items():
        if col in index.columns and index[col].dtype == object:
            index[col] = index[col].map(lambda v, a=aliases: a.get(v, v) if isinstance(v, str) else v)
    return index


class ResultFileError(Exception):
    """The file cannot be used: missing, not HDF5, another schema, interrupted commit."""


def _text(v):
    if isinstance(v, bytes):
        return v.decode("utf-8")
    if isinstance(v, np.ndarray) and v.dtype.kind in "SO":
        return [_text(x) for x in v.tolist()]
    if isinstance(v, np.generic):
        return v.item()
    return v


def read_table(group: h5py.Group) -> pd.DataFrame:
    """A kvlab table (a group of equal-length 1-D columns, order in attribute 'columns')."""
    cols = _text(group.attrs["columns"]) if "columns" in group.attrs else []
    if isinstance(cols, str):
        cols = [cols]
    data = {}
    for c in cols:
        d = group[c]
        if h5py.check_string_dtype(d.dtype) is not None:
            data[c] = pd.Series(d.asstr()[()], dtype=object)
        else:
            data[c] = d[()]
    return pd.DataFrame(data)


@dataclass
class Results:
    path: str
    attrs: dict
    index: pd.DataFrame
    runs: pd.DataFrame = field(default_factory=pd.DataFrame)

    def ok(self, kind: str) -> pd.DataFrame:
        """Rows of one bench with status ok."""
        if self.index.empty:
            return self.index
        return self.index[(self.index["kind"] == kind) & (self.index["status"] == "ok")].copy()

    def kinds(self) -> list[str]:
        return sorted(set(self.index["kind"])) if not self.index.empty else []

    def trace(self, row: pd.Series, name: str):
        """A point's trace: a DataFrame for tables, a numpy array otherwise. A row of a merged
        index (load_many) names its own file in FILE_COLUMN."""
        path = row.get(FILE_COLUMN, None) if hasattr(row, "get") else None
        with h5py.File(path if isinstance(path, str) and path else self.path, "r") as f:
            obj = f[row["group"]][name]
            if isinstance(obj, h5py.Group):
                return read_table(obj)
            return obj[()]

    @property
    def read_ceiling(self) -> float:
        return float(self.attrs.get("read_ceiling_bytes_per_s", 0.0) or 0.0)

    @property
    def copy_ceiling(self) -> float:
        return float(self.attrs.get("copy_ceiling_bytes_per_s", 0.0) or 0.0)


def load(path: str) -> Results:
    if not os.path.exists(path):
        raise ResultFileError(f"{path}: no such file")
    if os.path.exists(path + ".rollback"):
        raise ResultFileError(
            f"{path} has an interrupted commit ({path}.rollback): run `kvlab recover {path}` first")
    try:
        f = h5py.File(path, "r")
    except OSError as e:
        raise ResultFileError(f"{path} is not a readable HDF5 file: {e}") from None
    with f:
        attrs = {k: _text(v) for k, v in f.attrs.items()}
        if attrs.get("kvlab_schema") != SCHEMA_NAME:
            raise ResultFileError(f"{path} is not a kvlab result file (kvlab_schema attribute missing)")
        if attrs.get("schema_version") != SCHEMA_VERSION:
            raise ResultFileError(
                f"{path} has schema_version {attrs.get('schema_version')}; this analysis reads {SCHEMA_VERSION}")
        index = canonical_names(read_table(f["index"]))
        runs = read_table(f["runs"]) if "runs" in f else pd.DataFrame()
    return Results(path=path, attrs=attrs, index=index, runs=runs)


def _device_of(attrs: dict) -> str:
    if str(attrs.get("device_present", "1")).strip() in ("0", "False", "false"):
        return ""
    return str(attrs.get("device_name", "") or "").strip()


def load_many(paths: list[str]) -> Results:
    """Several result files of one device as one Results: the rows of all of them (each with
    its file in FILE_COLUMN, so traces still resolve), the provenance of the first, completed
    by the others where the first lacks a value (e.g. the ceilings of a peers file). Files
    measured on different devices are refused: their numbers do not belong on one axis."""
    if not paths:
        raise ResultFileError("no result file given")
    results = [load(p) for p in paths]
    if len(results) == 1:
        return results[0]
    devices = {r.path: _device_of(r.attrs) for r in results}
    named = {d for d in devices.values() if d}
    if len(named) > 1:
        raise ResultFileError("the result files were measured on different devices (" +
                              "; ".join(f"{p}: {d}" for p, d in devices.items() if d) +
                              "): draw them separately")
    attrs = dict(results[0].attrs)
    for r in results[1:]:
        for k, v in r.attrs.items():
            if k not in attrs or attrs[k] in ("", 0, 0.0, "0", "0.0", None):
                attrs[k] = v
    if named and not _device_of(attrs):
        # A GPU file merged into a CPU-only first file: the measured rows' device is the GPU's.
        src = next(r for r in results if _device_of(r.attrs))
        for k in ("device_name", "device_present", "device_peak_bytes_per_s", "read_ceiling_bytes_per_s",
                  "copy_ceiling_bytes_per_s"):
            if k in src.attrs:
                attrs[k] = src.attrs[k]
    index = pd.concat([r.index.assign(**{FILE_COLUMN: r.path}) for r in results], ignore_index=True)
    runs = pd.concat([r.runs for r in results if not r.runs.empty], ignore_index=True) \
        if any(not r.runs.empty for r in results) else pd.DataFrame()
    return Results(path=results[0].path, attrs=attrs, index=index, runs=runs)

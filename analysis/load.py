"""Loading kvlab result files (schema "kvlab.results", versions 1 and 2; see
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
SCHEMA_VERSION = 2
# Versions this loader reads: 1 (no identity, no checksums) and 2 (analysis/result_integrity.py
# verifies those).
READABLE_SCHEMA_VERSIONS = (1, 2)
# The column a merged index (load_many) adds: the file each row came from.
FILE_COLUMN = "_file"


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


def _open_shared(path: str, timeout_s: float = 10.0):
    """h5py.File(path, "r"), waiting while a kvlab writer holds the file's lock for the few
    milliseconds it writes a commit in place (experiments/h5/durable.h): a reader then gets
    "unable to lock file" from HDF5, never a torn file."""
    import time
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return h5py.File(path, "r")
        except OSError as e:
            if "unable to lock file" in str(e) and time.monotonic() < deadline:
                time.sleep(0.02)
                continue
            raise ResultFileError(f"{path} is not a readable HDF5 file: {e}") from None


def load(path: str) -> Results:
    if not os.path.exists(path):
        raise ResultFileError(f"{path}: no such file")
    if os.path.exists(path + ".rollback"):
        raise ResultFileError(
            f"{path} has an interrupted commit ({path}.rollback): run `kvlab recover {path}` first")
    f = _open_shared(path)
    with f:
        attrs = {k: _text(v) for k, v in f.attrs.items()}
        if attrs.get("kvlab_schema") != SCHEMA_NAME:
            raise ResultFileError(f"{path} is not a kvlab result file (kvlab_schema attribute missing)")
        if attrs.get("schema_version") not in READABLE_SCHEMA_VERSIONS:
            raise ResultFileError(
                f"{path} has schema_version {attrs.get('schema_version')}; this analysis reads "
                f"{', '.join(map(str, READABLE_SCHEMA_VERSIONS))}")
        index = read_table(f["index"])
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

"""kvlab result files (HDF5, schema "kvlab.results"; experiments/results/result_file.h) as
tidy pandas DataFrames.

    import kvlab
    r = kvlab.load("results/default.h5")          # or a list of files: shards, peers
    df = r["decode_attention"]                      # one row per point of that kind
    df = kvlab.load("results/default.h5")["quant_error"]          # the one-liner

r[kind] has the kind's own columns only: point identity (point, key, study, status, reason,
seconds, group; plus file and device when several files were loaded), its axes in their
declared order, then its metrics and labels. Integer axes are int64, missing values are
NaN (never ""), and df.attrs carries "kind", "axes", "metrics", "units" (column -> unit),
"docs" (column -> the writer's description) and "provenance" (the first file's root
attributes: git commit, device, ceilings, config text, ...). r.index is every row of every
kind; r.table(kind, status=None) keeps skipped and failed rows; r.trace(row, name) reads a
point's bulk trace (a DataFrame for tables, a numpy array otherwise).

pandas.read_hdf cannot read these files: it reads only what pandas itself wrote (PyTables
layout), and kvlab writes plain HDF5 (one dataset per column, readable by h5py, h5dump and
any HDF5 library). Use kvlab.load, or `python -m kvlab export FILE --csv DIR` (or
--parquet) for plain files.

Only h5py, numpy and pandas: no compiled kvlab code is needed to read results.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field

import h5py
import numpy as np
import pandas as pd

SCHEMA_NAME = "kvlab.results"
# The schema versions this reader knows (a newer file is refused: its layout may differ).
# 1: no identity, no checksums; 2: sweep identity, run_id / sweep_seed per row and CRC-32
# checksums (verified by analysis/result_integrity.py and `kvlab check`).
SCHEMA_VERSIONS = (1, 2)
FILE_COLUMN = "file"
DEVICE_COLUMN = "device"
# Columns every row has, before the kind's own.
IDENTITY = ["point", "key", "study", "kind", "status", "reason", "seconds", "group"]


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


def read_table(group: h5py.Group, missing_as_nan: bool = False) -> pd.DataFrame:
    """A kvlab table (a group of equal-length 1-D columns, their order in attribute
    'columns'). missing_as_nan: empty strings become NaN."""
    cols = _text(group.attrs["columns"]) if "columns" in group.attrs else []
    if isinstance(cols, str):
        cols = [cols]
    data = {}
    for c in cols:
        d = group[c]
        if h5py.check_string_dtype(d.dtype) is not None:
            s = pd.Series(d.asstr()[()], dtype=object)
            data[c] = s.replace("", np.nan) if missing_as_nan else s
        else:
            data[c] = d[()]
    return pd.DataFrame(data)


def _column_meta(group: h5py.Group) -> dict:
    meta = {}
    for c in group:
        a = group[c].attrs
        meta[c] = {"unit": _text(a.get("unit", "")) or "", "doc": _text(a.get("doc", "")) or ""}
    return meta


def _kind_axes(f: h5py.File, index: pd.DataFrame) -> dict:
    """kind -> [(axis, is_integer)] in declared order: the names from a point's key
    ("study/kind:a=1,b=x"), the types from its group's typed attributes."""
    out = {}
    if index.empty or "kind" not in index.columns:
        return out
    for kind, rows in index.groupby("kind", sort=False):
        row = rows.iloc[0]
        key = str(row.get("key", "") or "")
        names = [kv.split("=", 1)[0] for kv in key.split(":", 1)[1].split(",")] if ":" in key else []
        attrs = {}
        g = row.get("group", None)
        if isinstance(g, str) and g in f:
            attrs = f[g].attrs
        out[kind] = [(n, n in attrs and np.asarray(attrs[n]).dtype.kind in "iu") for n in names if n]
    return out


@dataclass
class ResultSet:
    """One or several result files read as one: see the module docstring."""
    path: str
    attrs: dict
    index: pd.DataFrame
    runs: pd.DataFrame = field(default_factory=pd.DataFrame)
    columns: dict = field(default_factory=dict)   # column -> {"unit", "doc"}
    axes: dict = field(default_factory=dict)      # kind -> [(axis, is_integer)]
    paths: list = field(default_factory=list)

    def kinds(self) -> list:
        return sorted(set(self.index["kind"].dropna())) if "kind" in self.index.columns else []

    def __contains__(self, kind) -> bool:
        return kind in self.kinds()

    def __getitem__(self, kind: str) -> pd.DataFrame:
        """The tidy table of one kind, every status (see table())."""
        if kind not in self.kinds():
            raise KeyError(f"no {kind!r} points in {', '.join(self.paths or [self.path])} "
                           f"(kinds: {', '.join(self.kinds()) or 'none'})")
        return self.table(kind, status=None)

    def keys(self):
        return self.kinds()

    def table(self, kind: str, status: str | None = "ok") -> pd.DataFrame:
        """Rows of one kind (only those with `status` unless it is None), with the kind's own
        columns only, integer axes as int64, and units / docs / provenance in df.attrs."""
        idx = self.index
        if idx.empty or "kind" not in idx.columns:
            return pd.DataFrame()
        d = idx[idx["kind"] == kind]
        if status is not None:
            d = d[d["status"] == status]
        axes = [a for a, _ in self.axes.get(kind, [])]
        ident = [c for c in IDENTITY + [FILE_COLUMN, DEVICE_COLUMN] if c in d.columns]
        rest = [c for c in d.columns if c not in ident and c not in axes and d[c].notna().any()]
        d = d[ident + [a for a in axes if a in d.columns] + rest].reset_index(drop=True)
        d = self._typed(d, kind)
        d.attrs = {
            "kind": kind,
            "axes": [a for a in axes if a in d.columns],
            "metrics": [c for c in rest if c in d.columns],
            "units": {c: self.columns[c]["unit"] for c in d.columns if self.columns.get(c, {}).get("unit")},
            "docs": {c: self.columns[c]["doc"] for c in d.columns if self.columns.get(c, {}).get("doc")},
            "provenance": dict(self.attrs),
            "files": list(self.paths or [self.path]),
        }
        return d

    def _typed(self, d: pd.DataFrame, kind: str) -> pd.DataFrame:
        if "point" in d.columns and d["point"].dtype.kind == "f" and d["point"].notna().all():
            d["point"] = d["point"].astype(np.int64)
        for a, is_int in self.axes.get(kind, []):
            if is_int and a in d.columns and d[a].notna().all() and d[a].dtype.kind == "f":
                d[a] = d[a].astype(np.int64)
        return d

    def ok(self, kind: str) -> pd.DataFrame:
        """Rows of one kind with status ok, every column of the index (integer axes as int64)."""
        if self.index.empty:
            return self.index
        d = self.index[(self.index["kind"] == kind) & (self.index["status"] == "ok")].copy()
        return self._typed(d, kind)

    def trace(self, row, name: str):
        """A point's trace: a DataFrame for tables, a numpy array otherwise. A row of several
        files names its own file in the `file` column."""
        path = row.get(FILE_COLUMN, None) if hasattr(row, "get") else None
        with h5py.File(path if isinstance(path, str) and path else self.path, "r") as f:
            obj = f[row["group"]][name]
            if isinstance(obj, h5py.Group):
                return read_table(obj)
            return obj[()]

    def unit(self, column: str) -> str:
        return self.columns.get(column, {}).get("unit", "")

    @property
    def read_ceiling(self) -> float:
        return float(self.attrs.get("read_ceiling_bytes_per_s", 0.0) or 0.0)

    @property
    def copy_ceiling(self) -> float:
        return float(self.attrs.get("copy_ceiling_bytes_per_s", 0.0) or 0.0)


def _device_of(attrs: dict) -> str:
    if str(attrs.get("device_present", "1")).strip() in ("0", "False", "false"):
        return ""
    return str(attrs.get("device_name", "") or "").strip()


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
# Index columns that hold format names (kv_format, quant_error's and real_kv_error's scheme,
# format_error's format, model_quality's k_format / v_format) or DSV4 bundle names.
_NAME_COLUMNS = {"kv_format": FORMAT_ALIASES, "scheme": FORMAT_ALIASES, "format": FORMAT_ALIASES,
                 "k_format": FORMAT_ALIASES, "v_format": FORMAT_ALIASES,
                 "variant": VARIANT_ALIASES}


def canonical_format(name):
    """The canonical spelling of a format name (any other value unchanged)."""
    return FORMAT_ALIASES.get(name, name) if isinstance(name, str) else name


def _canonical_names(index: pd.DataFrame) -> pd.DataFrame:
    """index with every format / variant name column in its canonical spelling."""
    for col, aliases in _NAME_COLUMNS.items():
        if col in index.columns and index[col].dtype == object:
            index[col] = index[col].map(lambda v, a=aliases: a.get(v, v) if isinstance(v, str) else v)
    return index


def _load_one(path: str) -> ResultSet:
    path = os.fspath(path)
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
        if attrs.get("schema_version") not in SCHEMA_VERSIONS:
            raise ResultFileError(f"{path} has schema_version {attrs.get('schema_version')}; this kvlab reads "
                                  f"{', '.join(map(str, SCHEMA_VERSIONS))}")
        if "index" not in f:
            raise ResultFileError(f"{path} has no /index table")
        index = _canonical_names(read_table(f["index"], missing_as_nan=True))
        columns = _column_meta(f["index"])
        axes = _kind_axes(f, index)
        runs = read_table(f["runs"], missing_as_nan=True) if "runs" in f else pd.DataFrame()
    r = ResultSet(path=path, attrs=attrs, index=index, runs=runs, columns=columns, axes=axes, paths=[path])
    r.index = _int_columns(r.index, r.axes)
    return r


def _int_columns(index: pd.DataFrame, axes: dict) -> pd.DataFrame:
    """The point number and integer axes as int64 in the whole index where no row lacks them."""
    if "point" in index.columns and index["point"].dtype.kind == "f" and index["point"].notna().all():
        index["point"] = index["point"].astype(np.int64)
    for kind_axes in axes.values():
        for a, is_int in kind_axes:
            if is_int and a in index.columns and index[a].dtype.kind == "f" and index[a].notna().all():
                index[a] = index[a].astype(np.int64)
    return index


def combine(sets: list) -> ResultSet:
    """Several loaded files as one ResultSet (see load)."""
    if len(sets) == 1:
        return sets[0]
    attrs = dict(sets[0].attrs)
    for s in sets[1:]:
        for k, v in s.attrs.items():
            if k not in attrs or attrs[k] in ("", 0, 0.0, "0", "0.0", None):
                attrs[k] = v
    index = pd.concat([s.index.assign(**{FILE_COLUMN: s.path, DEVICE_COLUMN: _device_of(s.attrs) or np.nan})
                       for s in sets], ignore_index=True)
    nonempty = [s.runs.assign(**{FILE_COLUMN: s.path}) for s in sets if not s.runs.empty]
    runs = pd.concat(nonempty, ignore_index=True) if nonempty else pd.DataFrame()
    columns, axes = {}, {}
    for s in sets:
        for c, m in s.columns.items():
            columns.setdefault(c, m)
        for k, a in s.axes.items():
            axes.setdefault(k, a)
    r = ResultSet(path=sets[0].path, attrs=attrs, index=index, runs=runs, columns=columns, axes=axes,
                  paths=[s.path for s in sets])
    r.index = _int_columns(r.index, r.axes)
    return r


def load_each(paths) -> list:
    """Each file on its own (a ResultSet per path)."""
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    paths = [os.fspath(p) for p in paths]
    if not paths:
        raise ResultFileError("no result file given")
    return [_load_one(p) for p in paths]


def load(paths, *, kind: str | None = None):
    """Read kvlab result file(s) (a path, or a list: shards, a sweep and its peers).

    Returns a ResultSet (r[kind] is one kind's tidy DataFrame), or with kind= that DataFrame
    directly. Several files become one table with their `file` (and `device`) per row; the
    provenance is the first file's, completed by the others where it lacks a value.
    Raises ResultFileError for a missing file, another schema or an interrupted commit."""
    r = combine(load_each(paths))
    return r[kind] if kind is not None else r

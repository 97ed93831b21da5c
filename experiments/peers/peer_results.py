"""peer_results: peer rows into a kvlab result file, and kvlab sweep files read back.

write_result_file() is the one writer of result files on the Python side: the layout of
experiments/results/result_file.h (schema "kvlab.results" version 2): root provenance
attributes, an /index table (one row per point: point, key, study, kind, status, reason,
seconds, group, then axes, metrics and labels), one /points/NNNNNN group per row (the row's
cells as attributes, its samples as the `samples_us` array) and a /runs table, sealed with
schema 2's integrity data by analysis/result_integrity.py (run_id / sweep_seed / row_crc
columns, the /sweep identity, a checksum per point group), so `kvlab check` verifies these
files and `kvlab merge` accepts them. analysis.load reads them like the ones `kvlab sweep` writes.
"""
from __future__ import annotations

import datetime as _dt
import math
import os
import socket
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCHEMA_NAME = "kvlab.results"
SCHEMA_VERSION = 1
BASE_COLUMNS = ["point", "key", "study", "kind", "status", "reason", "seconds", "group"]
# Provenance of the device a peer file copies from the kvlab file it was measured with.
DEVICE_ATTRS = ("device_name", "device_present", "device_count", "device_sm_count", "device_l2_bytes",
                "device_peak_bytes_per_s", "device_sm_clock_khz", "device_mem_clock_khz", "device_mem_bus_bits",
                "read_ceiling_bytes_per_s", "copy_ceiling_bytes_per_s", "git_commit", "git_dirty")


def utc_now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def point_key(study: str, kind: str, axes: list, row: dict) -> str:
    """experiments/bench Point::key(): "study/kind:a=1,b=x" in axis order."""
    return f"{study}/{kind}:" + ",".join(f"{a}={_canon(row.get(a, ''))}" for a in axes)


def _canon(v) -> str:
    if isinstance(v, float) and v == int(v):
        return str(int(v))
    return str(v)


def write_result_file(path: str, rows: list, attrs: dict, axes: list, numeric_axes: set, metrics: list,
                      labels: list, run: dict | None = None, seal: bool = True, seed: int = 0) -> None:
    """Writes rows (dicts: study, kind, status, reason, seconds, each axis, metric and label,
    optionally samples_us) as a kvlab result file at path (replaced atomically: a killed
    writer leaves the old file or none). attrs: root attributes (provenance); run: the
    /runs row (started_utc, argv, ...). seal: add schema 2's integrity data (seed: the
    sweep_seed it records); False leaves a schema 1 file (readable, not verifiable)."""
    import h5py
    tmp = path + ".tmp"
    if os.path.exists(tmp):
        os.remove(tmp)
    str_t = h5py.string_dtype("utf-8")
    cols = {c: [] for c in BASE_COLUMNS + list(axes) + list(metrics) + list(labels)}
    for i, r in enumerate(rows):
        cols["point"].append(i)
        cols["key"].append(point_key(r["study"], r["kind"], axes, r))
        cols["study"].append(str(r["study"]))
        cols["kind"].append(str(r["kind"]))
        cols["status"].append(str(r.get("status", "ok")))
        cols["reason"].append(str(r.get("reason", "") or ""))
        cols["seconds"].append(float(r.get("seconds", math.nan)))
        cols["group"].append(f"/points/{i:06d}")
        for a in axes:
            cols[a].append(float(r.get(a, math.nan)) if a in numeric_axes else _canon(r.get(a, "")))
        for m in metrics:
            v = r.get(m, math.nan)
            cols[m].append(float(v) if v is not None and v != "" else math.nan)
        for lb in labels:
            cols[lb].append(str(r.get(lb, "") or ""))
    numeric = {"point", "seconds"} | set(numeric_axes) | set(metrics)
    with h5py.File(tmp, "w") as f:
        a = f.attrs
        a["kvlab_schema"] = SCHEMA_NAME
        a["schema_version"] = np.int64(SCHEMA_VERSION)
        a["created_utc"] = utc_now()
        a["points_planned"] = np.int64(len(rows))
        a["shard"] = "0/1"
        a["host"] = socket.gethostname()
        for k, v in attrs.items():
            a[k] = v
        g = f.create_group("index")
        g.attrs.create("columns", data=list(cols), dtype=str_t)
        g.attrs["doc"] = "one row per finished point"
        g.attrs["kvlab_table"] = np.int64(1)
        for c, vals in cols.items():
            if c in numeric:
                g.create_dataset(c, data=np.asarray(vals, dtype=np.int64 if c == "point" else np.float64),
                                 maxshape=(None,), chunks=True)
            else:
                g.create_dataset(c, data=np.asarray(vals, dtype=object), dtype=str_t, maxshape=(None,), chunks=True)
        pts = f.create_group("points")
        for i, r in enumerate(rows):
            pg = pts.create_group(f"{i:06d}")
            for c in cols:
                v = cols[c][i]
                pg.attrs[c] = v if isinstance(v, str) else (np.int64(v) if c == "point" else np.float64(v))
            if r.get("samples_us"):
                d = pg.create_dataset("samples_us", data=np.asarray(r["samples_us"], dtype=np.float64))
                d.attrs["doc"] = "every timed sample (us per call)"
        run = dict(run or {})
        run.setdefault("finished_utc", utc_now())
        run.setdefault("points_run", len(rows))
        run.setdefault("points_failed", sum(r.get("status") == "failed" for r in rows))
        run.setdefault("host", socket.gethostname())
        run.setdefault("pid", os.getpid())
        rg = f.create_group("runs")
        rg.attrs.create("columns", data=list(run), dtype=str_t)
        rg.attrs["kvlab_table"] = np.int64(1)
        for c, v in run.items():
            if isinstance(v, str):
                rg.create_dataset(c, data=np.asarray([v], dtype=object), dtype=str_t, maxshape=(None,), chunks=True)
            else:
                rg.create_dataset(c, data=np.asarray([v], dtype=np.float64), maxshape=(None,), chunks=True)
    if seal:
        if ROOT not in sys.path:
            sys.path.insert(0, ROOT)
        from analysis import result_integrity
        rep = result_integrity.seal(tmp, seed=seed, timing=str(attrs.get("peer_timing", "off")))
        if not rep.ok:
            raise RuntimeError(f"{path}: the sealed file does not verify: {rep.problems[:3]}")
    os.replace(tmp, path)


def load_results(path: str):
    """analysis.load.load (the repository's loader)."""
    if ROOT not in sys.path:
        sys.path.insert(0, ROOT)
    from analysis.load import load
    return load(path)


def device_attrs(res) -> dict:
    """The device provenance of a kvlab result file, to copy into a peer file."""
    out = {}
    for k in DEVICE_ATTRS:
        if k in res.attrs:
            v = res.attrs[k]
            out[k] = v if isinstance(v, str) else (np.float64(v) if isinstance(v, float) else np.int64(v))
    return out

"""The integrity data of kvlab result files (schema 2), computed and verified in Python.

The rules and their byte encoding are those of experiments/results/result_file.h (C++:
experiments/results/integrity.h, identity.h); this module computes the same numbers, so a file
written from Python (a peer writer such as experiments/peers/decode_peers.py) carries the same
integrity data as one written by `kvlab sweep`, and `kvlab check` / `kvlab merge` accept it.

    python3 -m analysis.result_integrity check FILE...   # exit 0 intact, 1 damaged, 2 bad input
    python3 -m analysis.result_integrity seal FILE [--seed N] [--timing TEXT] [--run-id ID]
        # give a file written by Python (schema 1 layout: /index, /runs, optional /points)
        # schema 2's integrity data in place: run_id / sweep_seed / row_crc columns, the
        # /sweep identity, content_crc of every point group, attrs_crc; then it verifies.

API: row_checksum(cells), group_checksum(group), attrs_checksum(obj, skip),
points_fingerprint(keys), identity_digest(...), verify(path) -> Report, seal(path, ...).
Only h5py and numpy.
"""
from __future__ import annotations

import argparse
import os
import struct
import sys
import zlib
from dataclasses import dataclass, field

import h5py
import numpy as np

SCHEMA_NAME = "kvlab.results"
SCHEMA_VERSION = 2
ROW_CRC, CONTENT_CRC, ATTRS_CRC = "row_crc", "content_crc", "attrs_crc"
FILL_NAN_BITS = 0x7FF8000000000000


# ---- the byte stream ------------------------------------------------------------------------
class _Stream:
    def __init__(self):
        self.crc = 0

    def raw(self, b: bytes):
        self.crc = zlib.crc32(b, self.crc)

    def byte(self, c: str):
        self.raw(c.encode("ascii"))

    def name(self, s: str):
        self.raw(s.encode("utf-8") + b"\0")

    def u32(self, v: int):
        self.raw(struct.pack("<I", v))

    def u64(self, v: int):
        self.raw(struct.pack("<Q", v))

    def f64(self, v: float):
        self.raw(struct.pack("<d", float(v)))

    def i64(self, v: int):
        self.raw(struct.pack("<q", int(v)))

    def text(self, b: bytes):
        self.u32(len(b))
        self.raw(b)


def _as_bytes(v) -> bytes:
    if isinstance(v, bytes):
        return v
    if isinstance(v, np.bytes_):
        return bytes(v).rstrip(b"\0")
    return str(v).encode("utf-8")


def _is_fill_nan(v: float) -> bool:
    return int(np.array(v, dtype=np.float64).view(np.uint64)) == FILL_NAN_BITS


def _is_string_dtype(dt) -> bool:
    return h5py.check_string_dtype(dt) is not None or dt.kind in "SUO"


# ---- the rules --------------------------------------------------------------------------------
def row_checksum(cells: dict) -> int:
    """row_crc of one table row given as {column: value} (text as str/bytes, numbers as
    int/float): every cell in column-name byte order except row_crc and group, skipping ""
    and the fill NaN; text as 's' + length + bytes, numbers as 'n' + float64."""
    s = _Stream()
    for name in sorted(cells, key=lambda n: n.encode("utf-8")):
        if name in (ROW_CRC, "group"):
            continue
        v = cells[name]
        if isinstance(v, (bytes, str, np.bytes_)):
            b = _as_bytes(v)
            if not b:
                continue
            s.name(name)
            s.byte("s")
            s.text(b)
        else:
            x = float(v)
            if _is_fill_nan(x):
                continue
            s.name(name)
            s.byte("n")
            s.f64(x)
    return s.crc


def _encode_values(s: _Stream, dt, values):
    flat = values.ravel(order="C") if isinstance(values, np.ndarray) else values
    if _is_string_dtype(dt):
        s.byte("s")
        s.u64(len(flat))
        for x in flat:
            s.text(_as_bytes(x))
    elif dt.kind in "iub":
        s.byte("i")
        s.u64(len(flat))
        for x in np.asarray(flat, dtype=np.int64):
            s.i64(x)
    elif dt.kind == "f":
        s.byte("f")
        s.u64(len(flat))
        for x in np.asarray(flat, dtype=np.float64):
            s.f64(x)
    else:
        raise ValueError(f"unsupported HDF5 type {dt} in a checksummed object")


def _encode_attrs(s: _Stream, obj, skip: str = ""):
    for name in sorted(obj.attrs.keys(), key=lambda n: n.encode("utf-8")):
        if name == skip:
            continue
        s.byte("a")
        s.name(name)
        dt = obj.attrs.get_id(name).dtype
        v = obj.attrs[name]
        if isinstance(v, h5py.Empty):
            values = []
        elif isinstance(v, np.ndarray):
            values = v
        else:
            values = [v]
        _encode_values(s, dt, values)


def _encode_group(s: _Stream, g, skip: str = ""):
    _encode_attrs(s, g, skip)
    for child in sorted(g.keys(), key=lambda n: n.encode("utf-8")):
        obj = g[child]
        if isinstance(obj, h5py.Group):
            s.byte("G")
            s.name(child)
            _encode_group(s, obj)
            s.byte("E")
            continue
        s.byte("D")
        s.name(child)
        shape = obj.shape or ()
        s.u32(len(shape))
        for d in shape:
            s.u64(d)
        _encode_attrs(s, obj)
        data = obj[()] if obj.size else np.empty(shape, dtype=obj.dtype)
        _encode_values(s, obj.dtype, np.asarray(data))


def group_checksum(g) -> int:
    """content_crc of a group: its attributes (content_crc excluded), datasets and subgroups."""
    s = _Stream()
    _encode_group(s, g, CONTENT_CRC)
    return s.crc


def attrs_checksum(obj, skip: str = ATTRS_CRC) -> int:
    """The checksum of an object's attributes (the root's attrs_crc)."""
    s = _Stream()
    _encode_attrs(s, obj, skip)
    return s.crc


def _fnv1a64(text: str) -> int:
    h = 1469598103934665603
    for b in text.encode("utf-8"):
        h ^= b
        h = (h * 1099511628211) & 0xFFFFFFFFFFFFFFFF
    return h


def points_fingerprint(keys) -> str:
    """FNV-1a 64 over every point key followed by a newline, in sweep order (16 hex digits)."""
    return "%016x" % _fnv1a64("".join(k + "\n" for k in keys))


def identity_digest(points_fp: str, point_count: int, seed: int, timing: str, kinds: str) -> str:
    text = (f"kvlab.sweep_identity.v1\npoints {points_fp} {point_count}\nseed {seed}\n"
            f"timing {timing}\nkinds {kinds}\n")
    return "%016x" % _fnv1a64(text)


# ---- reading tables ---------------------------------------------------------------------------
def _columns(g) -> list:
    cols = g.attrs.get("columns", [])
    if isinstance(cols, h5py.Empty):
        return []
    if isinstance(cols, (str, bytes)):
        cols = [cols]
    return [c.decode() if isinstance(c, bytes) else str(c) for c in cols]


def _table(g) -> dict:
    out = {}
    for c in _columns(g):
        d = g[c]
        out[c] = (d.dtype, d[()])
    return out


def _row_cells(table: dict, r: int) -> dict:
    cells = {}
    for c, (dt, data) in table.items():
        v = data[r]
        cells[c] = _as_bytes(v) if _is_string_dtype(dt) else (float(v) if dt.kind == "f" else int(v))
    return cells


# ---- verification -----------------------------------------------------------------------------
@dataclass
class Report:
    path: str
    schema: int = 0
    rows: int = 0
    rows_verified: int = 0
    groups_verified: int = 0
    problems: list = field(default_factory=list)
    notes: list = field(default_factory=list)
    identity: str = ""

    @property
    def ok(self) -> bool:
        return not self.problems


def _verify_table(f, name: str, rep: Report):
    g = f[name]
    table = _table(g)
    if ROW_CRC not in table:
        rep.problems.append(f"/{name} has no row_crc column: its rows cannot be verified")
        return
    keys = table.get("key")
    n = len(next(iter(table.values()))[1]) if table else 0
    for r in range(n):
        want = row_checksum(_row_cells(table, r))
        have = int(table[ROW_CRC][1][r])
        rep.rows_verified += 1
        if have != want:
            k = f" ({_as_bytes(keys[1][r]).decode()})" if keys is not None else ""
            rep.problems.append(f"/{name} row {r}{k}: row_crc {have:08x} but the row's cells give {want:08x}")


def _verify_group(g, what: str, rep: Report):
    rep.groups_verified += 1
    if CONTENT_CRC not in g.attrs:
        rep.problems.append(f"{what} has no content_crc: it cannot be verified")
        return
    have, want = int(g.attrs[CONTENT_CRC]), group_checksum(g)
    if have != want:
        rep.problems.append(f"{what}: content_crc {have:08x} but its contents give {want:08x}")


def verify(path: str) -> Report:
    """Everything `kvlab check` verifies, in Python. Never raises for damage: see .problems."""
    rep = Report(path=path)
    if os.path.exists(path + ".rollback") or os.path.exists(path + ".commit"):
        rep.problems.append("an interrupted commit or a killed writer's leftover is next to it: "
                            f"run `kvlab recover {path}`")
        return rep
    try:
        f = h5py.File(path, "r")
    except OSError as e:
        rep.problems.append(f"cannot be opened ({e})")
        return rep
    with f:
        try:
            if f.attrs.get("kvlab_schema") != SCHEMA_NAME:
                rep.problems.append("not a kvlab result file (no kvlab_schema attribute)")
                return rep
            rep.schema = int(f.attrs.get("schema_version", 0))
            index = _table(f["index"])
            keys = [_as_bytes(k).decode() for k in index["key"][1]]
            groups = [_as_bytes(g).decode() for g in index["group"][1]] if "group" in index else [""] * len(keys)
            rep.rows = len(keys)
            seen = set()
            for r, k in enumerate(keys):
                if k in seen:
                    rep.problems.append(f"/index row {r}: point {k} appears twice")
                seen.add(k)
            if rep.schema < 2:
                rep.notes.append(f"schema {rep.schema} (written before checksums): the values cannot be verified")
                return rep
            if ATTRS_CRC not in f.attrs:
                rep.problems.append("the root attributes have no attrs_crc")
            elif int(f.attrs[ATTRS_CRC]) != attrs_checksum(f):
                rep.problems.append("the root attributes (provenance, config text) do not match their attrs_crc")
            if "sweep" not in f:
                rep.problems.append("/sweep (the sweep's identity) is missing")
            else:
                _verify_group(f["sweep"], "/sweep", rep)
                rep.identity = str(f["sweep"].attrs.get("identity", ""))
            _verify_table(f, "index", rep)
            named = set()
            for r, g in enumerate(groups):
                if not g:
                    continue
                named.add(g)
                if g not in f or not isinstance(f[g], h5py.Group):
                    rep.problems.append(f"/index row {r} ({keys[r]}) names missing group {g}")
                    continue
                _verify_group(f[g], f"{g} ({keys[r]})", rep)
            if "points" in f:
                for child in f["points"].keys():
                    if "/points/" + child not in named:
                        rep.problems.append(f"/points/{child} is not named by any /index row")
            for t in ("runs", "inputs"):
                if t in f:
                    _verify_table(f, t, rep)
        except (OSError, KeyError, ValueError) as e:
            rep.problems.append(f"cannot be read ({type(e).__name__}: {e})")
    return rep


# ---- sealing a file written by Python ------------------------------------------------------------
def _set_column(g, name: str, data: np.ndarray, dtype=None):
    if name in g:
        del g[name]
    kw = {"dtype": dtype} if dtype is not None else {}
    g.create_dataset(name, data=data, maxshape=(None,), chunks=True, **kw)
    cols = _columns(g)
    if name not in cols:
        cols.append(name)
        g.attrs.create("columns", data=cols, dtype=h5py.string_dtype("utf-8"))


def seal(path: str, *, seed: int = 0, timing: str = "off", kinds: str | None = None,
         run_id: str | None = None, keys: list | None = None) -> Report:
    """Gives a result file written from Python the integrity data of schema 2, in place, and
    verifies it. The index gets run_id / sweep_seed columns where it lacks them (`run_id`,
    `seed`), the file a /sweep identity (its own point keys unless `keys` lists the sweep's;
    kinds "name=1,..." of the index unless given; `timing` as the run's rules, "off" for none),
    every row a row_crc, every point group a content_crc, the root an attrs_crc."""
    import datetime as _dt
    str_t = h5py.string_dtype("utf-8")
    if run_id is None:
        run_id = _dt.datetime.utcnow().strftime("%Y%m%dT%H%M%SZ") + "-python"
    with h5py.File(path, "r+") as f:
        if f.attrs.get("kvlab_schema") != SCHEMA_NAME:
            raise ValueError(f"{path} is not a kvlab result file")
        idx = f["index"]
        n = len(idx["key"])
        if "run_id" not in _columns(idx):
            _set_column(idx, "run_id", np.array([run_id] * n, dtype=object), str_t)
        if "sweep_seed" not in _columns(idx):
            _set_column(idx, "sweep_seed", np.full(n, seed, dtype=np.int64))
        if "group" not in _columns(idx):
            _set_column(idx, "group", np.array([""] * n, dtype=object), str_t)
        table = _table(idx)
        _set_column(idx, ROW_CRC, np.array([row_checksum(_row_cells(table, r)) for r in range(n)],
                                           dtype=np.int64))
        if "runs" in f:
            runs = f["runs"]
            rt = _table(runs)
            m = len(next(iter(rt.values()))[1]) if rt else 0
            if ROW_CRC in rt:
                del rt[ROW_CRC]
            _set_column(runs, ROW_CRC, np.array([row_checksum(_row_cells(rt, r)) for r in range(m)],
                                                dtype=np.int64))
        for g in table.get("group", (None, []))[1]:
            g = _as_bytes(g).decode()
            if g and g in f:
                f[g].attrs[CONTENT_CRC] = np.int64(group_checksum(f[g]))
        own = [_as_bytes(k).decode() for k in table["key"][1]]
        sweep_keys = list(keys) if keys is not None else own
        if kinds is None:
            kinds = ",".join(f"{k}=1" for k in sorted({_as_bytes(k).decode() for k in table["kind"][1]}))
        fp = points_fingerprint(sweep_keys)
        if "sweep" in f:
            del f["sweep"]
        sw = f.create_group("sweep")
        sw.attrs["doc"] = "the sweep's identity: every point key, the seed, the timing rules and the kind versions"
        sw.attrs["identity"] = identity_digest(fp, len(sweep_keys), seed, timing, kinds)
        sw.attrs["points_fingerprint"] = fp
        sw.attrs["point_count"] = np.int64(len(sweep_keys))
        sw.attrs["seed"] = np.int64(seed)
        sw.attrs["timing"] = timing
        sw.attrs["kinds"] = kinds
        d = sw.create_dataset("keys", data=np.array(sweep_keys, dtype=object), dtype=str_t)
        d.attrs["doc"] = "every point key of the whole sweep, in sweep order"
        sw.attrs[CONTENT_CRC] = np.int64(group_checksum(sw))
        f.attrs["schema_version"] = np.int64(SCHEMA_VERSION)
        f.attrs["sweep_fingerprint"] = fp
        f.attrs[ATTRS_CRC] = np.int64(attrs_checksum(f))
    return verify(path)


def _main(argv) -> int:
    ap = argparse.ArgumentParser(prog="python3 -m analysis.result_integrity", description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("check", help="verify result files")
    c.add_argument("files", nargs="+")
    s = sub.add_parser("seal", help="add schema 2's integrity data to a file written by Python")
    s.add_argument("file")
    s.add_argument("--seed", type=int, default=0)
    s.add_argument("--timing", default="off")
    s.add_argument("--run-id")
    a = ap.parse_args(argv)
    files = a.files if a.cmd == "check" else [a.file]
    for p in files:
        if not os.path.isfile(p):
            print(f"{p}: no such file", file=sys.stderr)
            return 2
    ok = True
    for p in files:
        rep = seal(p, seed=a.seed, timing=a.timing, run_id=a.run_id) if a.cmd == "seal" else verify(p)
        status = "intact" if rep.ok and not rep.notes else ("readable, NOT VERIFIED" if rep.ok else "DAMAGED")
        print(f"{p}: {status} (schema {rep.schema}, {rep.rows} points, {rep.rows_verified} rows and "
              f"{rep.groups_verified} groups verified{', identity ' + rep.identity if rep.identity else ''})")
        for x in rep.problems[:20]:
            print("  " + x)
        for x in rep.notes:
            print("  note: " + x)
        ok &= rep.ok
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))

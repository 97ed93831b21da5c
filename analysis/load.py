"""Loading kvlab result files for analysis/: kvlab.load (experiments/python/kvlab/results.py)
is the reader; this module keeps analysis's names for it and its one policy of its own:
files measured on different devices are not drawn on one axis (load_many).
"""
from __future__ import annotations

from kvlab.results import FILE_COLUMN, SCHEMA_NAME, SCHEMA_VERSIONS, ResultFileError, read_table  # noqa: F401
from kvlab.results import FORMAT_ALIASES, VARIANT_ALIASES, canonical_format  # noqa: F401
from kvlab.results import ResultSet as Results  # noqa: F401
from kvlab.results import _device_of, combine, load_each
from kvlab.results import load as _load

SCHEMA_VERSION = SCHEMA_VERSIONS[-1]


def load(path: str) -> Results:
    """One result file (kvlab.load)."""
    return _load(path)


def load_many(paths: list[str]) -> Results:
    """Several result files of one device as one Results: the rows of all of them (each with
    its file in FILE_COLUMN, so traces still resolve), the provenance of the first, completed
    by the others where the first lacks a value (e.g. the ceilings of a peers file). Files
    measured on different devices are refused: their numbers do not belong on one axis."""
    sets = load_each(paths)
    if len(sets) == 1:
        return sets[0]
    devices = {s.path: _device_of(s.attrs) for s in sets}
    named = {d for d in devices.values() if d}
    if len(named) > 1:
        raise ResultFileError("the result files were measured on different devices (" +
                              "; ".join(f"{p}: {d}" for p, d in devices.items() if d) +
                              "): draw them separately")
    r = combine(sets)
    if named and not _device_of(sets[0].attrs):
        # A GPU file merged into a CPU-only first file: the measured rows' device is the GPU's.
        src = next(s.attrs for s in sets if _device_of(s.attrs))
        for k in ("device_name", "device_present", "device_peak_bytes_per_s", "read_ceiling_bytes_per_s",
                  "copy_ceiling_bytes_per_s"):
            if k in src:
                r.attrs[k] = src[k]
    return r

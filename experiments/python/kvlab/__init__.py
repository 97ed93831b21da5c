"""kvlab from Python: the reference, the number formats and the GPU kernels of kvlab on numpy
arrays and DLPack tensors (PyTorch, CuPy, ...), and kvlab's HDF5 result files as pandas
DataFrames.

    import kvlab
    df = kvlab.load("results/default.h5")["decode_attention"]   # one tidy table per kind
    kvlab.ops.decode_attention(q, k_cache, v_cache, block_table, seq_lens)   # CUDA tensors
    kvlab.ref.decode_attention(q, k_cache, v_cache, block_table, seq_lens)   # numpy arrays
    kvlab.formats.encode(x, "fp8_e4m3")                                      # bit-exact codes

Modules: kvlab.ops (GPU kernels), kvlab.bench (gpu/bench's C++ timer), kvlab.ref (CPU
reference), kvlab.formats (number formats), kvlab.dsv4 (the DeepSeek-V4-style substrate's cache views), kvlab.paged (paged
cache shapes and block tables), kvlab.results (kvlab.load), kvlab.export
(`python -m kvlab export`). Only kvlab.load and kvlab.export work without the compiled
extension module; the others import it on first use.
"""
from __future__ import annotations

import importlib

from kvlab.results import ResultFileError, ResultSet, load  # noqa: F401

__version__ = "0.1.0"

_SUBMODULES = ("ops", "ref", "formats", "dsv4", "paged", "export", "results", "bench")
_ERRORS = ("Error", "InvalidArgument", "Unsupported")


def __getattr__(name):
    if name in _SUBMODULES:
        return importlib.import_module(f"kvlab.{name}")
    if name in _ERRORS:
        from kvlab._native import native
        return getattr(native(), name)
    raise AttributeError(f"module 'kvlab' has no attribute {name!r}")


def __dir__():
    return sorted(list(globals()) + list(_SUBMODULES) + list(_ERRORS))

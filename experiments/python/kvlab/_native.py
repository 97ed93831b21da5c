"""The compiled extension module kvlab._kvlab, imported on first use with an error that says
how to get it."""
from __future__ import annotations

_module = None


def native():
    global _module
    if _module is None:
        try:
            from kvlab import _kvlab
        except ImportError as e:
            raise ImportError(
                "kvlab's extension module (kvlab._kvlab) is not built or not importable here: "
                "`pip install .` from the kvlab checkout builds it, or build the CMake target _kvlab "
                f"and put <build>/python on PYTHONPATH ({e})") from e
        _module = _kvlab
    return _module


def gpu():
    m = native()
    if not m.has_cuda:
        raise ImportError("this kvlab extension was built without CUDA: kvlab.ops needs a build with nvcc "
                          "(KVLAB_CUDA=ON); kvlab.ref and kvlab.formats work without it")
    return m.gpu

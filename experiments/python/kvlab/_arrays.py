"""Array plumbing shared by kvlab.ref, kvlab.ops and kvlab.dsv4: which library an array
comes from, allocating outputs with that same library (so a torch caller gets torch
tensors back, a numpy caller numpy arrays), the DLPack exchange and the caller's stream.

No array library is imported unless the caller's arrays come from it: kvlab depends on
numpy only.
"""
from __future__ import annotations

import numpy as np

# Names of dtypes as kvlab's C++ side says them, per library dtype name.
_TORCH_DTYPES = {"bf16": "bfloat16", "f16": "float16", "f32": "float32", "f64": "float64", "i32": "int32",
                 "i64": "int64", "u8": "uint8", "u16": "uint16"}
_NUMPY_DTYPES = {"bf16": np.uint16, "f16": np.float16, "f32": np.float32, "f64": np.float64, "i32": np.int32,
                 "i64": np.int64, "u8": np.uint8, "u16": np.uint16}


def library(x) -> str:
    """'torch', 'cupy', 'numpy' or 'other' (any object with __dlpack__)."""
    mod = type(x).__module__.split(".")[0]
    if mod in ("torch", "cupy", "numpy"):
        return mod
    return "other"


def is_cuda(x) -> bool:
    lib = library(x)
    if lib == "torch":
        return x.is_cuda
    if lib == "cupy":
        return True
    if lib == "numpy":
        return False
    dev = getattr(x, "__dlpack_device__", None)
    return bool(dev) and dev()[0] in (2, 13)  # kDLCUDA, kDLCUDAManaged


def empty(like, shape, kind: str):
    """An uninitialized array of `kind` (bf16, f16, f32, f64, i32, i64, u8, u16) from the
    library and device of `like`. numpy has no bfloat16: BF16 outputs are uint16 bits there
    (kvlab.formats.decode(..., 'bf16') turns them into float32)."""
    lib = library(like)
    shape = tuple(int(s) for s in shape)
    if lib == "torch":
        import torch
        return torch.empty(shape, dtype=getattr(torch, _TORCH_DTYPES[kind]), device=like.device)
    if lib == "cupy":
        import cupy
        if kind == "bf16":
            raise TypeError("cupy has no bfloat16: pass out= (uint16 bits) for a BF16 result")
        with cupy.cuda.Device(like.device.id):
            return cupy.empty(shape, dtype=_NUMPY_DTYPES[kind])
    if lib == "numpy":
        return np.empty(shape, dtype=_NUMPY_DTYPES[kind])
    raise TypeError(f"{type(like).__name__}: pass out= (kvlab allocates outputs only with numpy, torch or cupy)")


def empty_like(like, shape=None):
    """An uninitialized array with the library, device and dtype of `like` (its shape unless
    `shape` is given): a 16-bit output holding the values of a 16-bit input comes back in the
    caller's own container (torch bfloat16 stays bfloat16; numpy int16 or uint16 bits stay
    int16 or uint16)."""
    lib = library(like)
    shape = tuple(int(s) for s in (like.shape if shape is None else shape))
    if lib == "torch":
        import torch
        return torch.empty(shape, dtype=like.dtype, device=like.device)
    if lib == "cupy":
        import cupy
        with cupy.cuda.Device(like.device.id):
            return cupy.empty(shape, dtype=like.dtype)
    if lib == "numpy":
        return np.empty(shape, dtype=like.dtype)
    raise TypeError(f"{type(like).__name__}: pass out= (kvlab allocates outputs only with numpy, torch or cupy)")


def kind_of(x) -> str:
    """The kvlab kind of an array's dtype (bf16 for bfloat16, ...), '' when it has none."""
    name = str(getattr(x, "dtype", "")).replace("torch.", "")
    return {"bfloat16": "bf16", "float16": "f16", "float32": "f32", "float64": "f64", "int32": "i32",
            "int64": "i64", "uint8": "u8", "uint16": "u16"}.get(name, "")


def stream_of(arrays, stream):
    """The integer cudaStream_t a kvlab.ops call launches on: `stream` when given (an int,
    or an object with .cuda_stream (torch) or .ptr (cupy)); else the current stream of the
    first torch (or cupy) array's device; else 0, the legacy default stream."""
    if stream is not None:
        for attr in ("cuda_stream", "ptr"):
            if hasattr(stream, attr):
                return int(getattr(stream, attr))
        return int(stream)
    for a in arrays:
        lib = library(a)
        if lib == "torch" and a.is_cuda:
            import torch
            return int(torch.cuda.current_stream(a.device).cuda_stream)
        if lib == "cupy":
            import cupy
            return int(cupy.cuda.get_current_stream().ptr)
    return 0


def exchange(x, stream: int):
    """The DLPack capsule of a CUDA array for a launch on `stream`: the producer orders its
    pending work before `stream` (DLPack's stream argument; torch skips this when `stream` is
    its current stream, so nothing is added to a CUDA-graph capture). Host arrays and None
    pass through."""
    if x is None or not hasattr(x, "__dlpack__") or not is_cuda(x):
        return x
    code = 1 if stream == 0 else stream  # DLPack: 1 = the legacy default stream
    if library(x) == "torch":
        import torch
        if stream == int(torch.cuda.current_stream(x.device).cuda_stream):
            code = -1  # the launch stream is torch's own: no synchronization needed
    try:
        return x.__dlpack__(stream=code)
    except TypeError:  # producers predating the stream argument
        return x.__dlpack__()


def host(x):
    """A host array for kvlab.ref / kvlab.formats: numpy arrays and CPU tensors as they are,
    other sequences through numpy."""
    if x is None or hasattr(x, "__dlpack__"):
        return x
    return np.asarray(x)

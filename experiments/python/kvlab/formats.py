"""Bit-exact encode and decode of kvlab's number formats on numpy arrays, through the same
C++ functions the reference and the GPU kernels use (reference/formats/formats.h).

| format    | codes        | facts                                                        |
|-----------|--------------|--------------------------------------------------------------|
| fp8_e4m3  | uint8        | OCP "fn": bias 7, max 448 (0x7E), no Inf, NaN 0x7F / 0xFF     |
| fp8_e5m2  | uint8        | bias 15, max 57344, Inf 0x7C                                  |
| fp4_e2m1  | uint8 (4-bit)| ±{0, .5, 1, 1.5, 2, 3, 4, 6}, always saturating, NaN -> +6    |
| bf16      | uint16       | the top half of a float32                                     |
| fp16      | uint16       | IEEE binary16                                                 |
| ue8m0     | uint8        | scales 2^(c-127), 0xFF = NaN, no zero (decode only; codes from |
|           |              | ue8m0_from_exponent)                                          |
Encoding rounds to nearest even. saturation="satfinite" clamps overflow (and ±Inf) to ±max
finite; "nonsaturating" gives ±Inf where the format has it and NaN where it does not (the OCP
non-saturating cast). The short names e4m3, e5m2 and e2m1 are accepted too.

    codes = kvlab.formats.encode(np.float32([0.3, 500.0]), "fp8_e4m3")   # uint8 [0x2A, 0x7E]
    kvlab.formats.decode(codes, "fp8_e4m3")                              # float32 [0.3125, 448]
"""
from __future__ import annotations

import numpy as np

from kvlab._native import native

FORMATS = ("fp8_e4m3", "fp8_e5m2", "fp4_e2m1", "bf16", "fp16", "ue8m0")
_WIDE = {"bf16", "fp16"}


def _float32(x) -> np.ndarray:
    if isinstance(x, np.ndarray):
        if x.dtype != np.float32:
            raise TypeError(f"encode takes float32 values, got {x.dtype}: the encoders are defined on float32, "
                            "and converting wider values first would round twice (convert explicitly if you "
                            "mean it)")
        return np.ascontiguousarray(x)
    return np.ascontiguousarray(np.asarray(x, dtype=np.float32))


def encode(x, format: str, saturation: str = "satfinite") -> np.ndarray:
    """Codes of float32 values x (same shape): uint16 for bf16 / fp16, uint8 otherwise (FP4:
    one code per byte, low nibble; pack_fp4 packs them)."""
    x = _float32(x)
    out = np.empty(x.shape, dtype=np.uint16 if format in _WIDE else np.uint8)
    native().formats.encode(x, out, format, saturation)
    return out


def decode(codes, format: str) -> np.ndarray:
    """float32 values of codes (same shape), exactly. Codes are unsigned or signed integers of
    the format's width (int16 bits of a torch bfloat16 tensor's .view(torch.int16) decode as
    their bit pattern); other dtypes are converted by value."""
    want = np.dtype(np.uint16 if format in _WIDE else np.uint8)
    codes = np.asarray(codes)
    if codes.dtype.kind in "iu" and codes.dtype.itemsize == want.itemsize:
        codes = codes.view(want)
    codes = np.ascontiguousarray(np.asarray(codes, dtype=want))
    out = np.empty(codes.shape, dtype=np.float32)
    native().formats.decode(codes, out, format)
    return out


def roundtrip(x, format: str, saturation: str = "satfinite") -> np.ndarray:
    """decode(encode(x)): x rounded onto the format's grid."""
    return decode(encode(x, format, saturation), format)


def ue8m0_from_exponent(e) -> np.ndarray:
    """UE8M0 codes of 2^e for integer exponents e in [-127, 127]."""
    e = np.ascontiguousarray(np.asarray(e, dtype=np.int32))
    out = np.empty(e.shape, dtype=np.uint8)
    native().formats.ue8m0_from_exponent(e, out)
    return out


def pack_fp4(codes) -> np.ndarray:
    """Two E2M1 codes per byte along the last axis (first element in the low nibble)."""
    codes = np.ascontiguousarray(np.asarray(codes, dtype=np.uint8))
    if codes.ndim == 0 or codes.shape[-1] % 2:
        raise ValueError(f"pack_fp4: the last axis must hold an even number of codes, got shape {codes.shape}")
    out = np.empty(codes.shape[:-1] + (codes.shape[-1] // 2,), dtype=np.uint8)
    native().formats.pack_fp4(codes, out)
    return out


def unpack_fp4(packed) -> np.ndarray:
    """The E2M1 codes of packed bytes along the last axis (twice as long)."""
    packed = np.ascontiguousarray(np.asarray(packed, dtype=np.uint8))
    out = np.empty(packed.shape[:-1] + (2 * packed.shape[-1],) if packed.ndim else (2,), dtype=np.uint8)
    native().formats.unpack_fp4(packed, out)
    return out


def max_finite(format: str) -> float:
    """The largest finite value of the format."""
    return native().formats.max_finite(format)

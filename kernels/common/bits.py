"""Low-precision number formats as raw bit patterns: device functions and
their NumPy twins.

Kernels receive bf16 / FP8 / FP4 data as unsigned integer arrays (NumPy has
no such dtypes) and convert them through ``cvt`` (the hardware's
instructions, whose simulator twins are the device functions below,
``launch.device_inline``; E2M1's encoder, which has no instruction before
sm_100, kernels call here); input makers and references use the host twin
of the same name with ``_np`` appended, which works on whole arrays.

Formats (sign bit first; ``e`` exponent field, ``m`` mantissa field)

=========  ======================  =====  ==================================
format     layout                  bias   notes
=========  ======================  =====  ==================================
bf16       s eeeeeeee mmmmmmm      127    upper half of a float32
e4m3 (fn)  s eeee mmm              7      no inf; 0x7f/0xff NaN; max 448;
                                          subnormal m * 2**-9
e2m1       s ee m                  1      0, .5, 1, 1.5, 2, 3, 4, 6 and
                                          their negatives; no inf or NaN
=========  ======================  =====  ==================================

Encoders take the value as float32 (as a kernel holds it) and round to
nearest, ties to even (the code with mantissa LSB 0); small values round to a
zero of the input's sign.

* ``f32_to_bf16``: NaN -> quiet NaN with the input's sign, overflow -> inf.
* ``f32_to_e4m3``: saturating (like ``cvt.rn.satfinite``): above 448 or inf
  -> +-448 (0x7e/0xfe); NaN -> 0x7f.
* ``f32_to_e2m1``: saturating at +-6 (0x7/0xf); NaN -> 0x7 (the format has
  no NaN: a loud value).

``tests/kernels/common/test_bits_ml_dtypes.py`` checks all of this against
``ml_dtypes``; it differs only where said above: FP8 overflow saturates
(``ml_dtypes`` gives NaN), NaN -> 0x7f whatever its sign for E4M3 and 0x7
for E2M1 (``ml_dtypes``: a signed NaN, a zero), and bf16 NaN payloads.

NVFP4 (linear layout, blocks never straddle rows; row length a multiple of
16): element ``i`` of a row is nibble ``i % 2`` (low nibble first) of byte
``packed[i // 2]``; the 16 elements ``16b .. 16b+15`` share the e4m3 scale
code ``scales[b]``; one float32 ``tensor_scale`` covers the tensor::

    value(i) = (e2m1(nibble i) * e4m3(scales[i // 16])) * tensor_scale

in float32, in that order (the first product is exact, so the value is
rounded once). The scales of real NVFP4 GEMMs are often swizzled; a kernel
that wants that layout converts on the host.

Device functions are pure arithmetic on sign / exponent / mantissa (no
bitcasts, tables or arrays), so the same source compiles for the CUDA target
and runs in the simulator. ``bits_to_f32``/``f32_to_bits`` give float32 bit
patterns that way; NaN payloads are not kept (a quiet NaN with the sign), and
subnormals need a kernel compiled without flush-to-zero (no ``fastmath``).
"""

from __future__ import annotations

import math

import numpy as np
from numba import cuda

from .launch import device_inline

E4M3_MAX = 448.0
E2M1_MAX = 6.0
E4M3_NAN = 0x7F
NVFP4_BLOCK = 16
# Every constant a device function compares or multiplies with is a float32:
# a Python float is a float64 to Numba, and one float64 operand makes the
# whole expression FP64 (1/64 of the FP32 rate on an H200; the sm_90 compile
# test counts .f64 instructions). All are powers of two or small integers,
# exact in float32.
_F0 = np.float32(0.0)
_F_HALF = np.float32(0.5)
_F1 = np.float32(1.0)
_F2 = np.float32(2.0)
_F4 = np.float32(4.0)
_F6 = np.float32(E2M1_MAX)
_F16 = np.float32(16.0)
_F448 = np.float32(E4M3_MAX)
_F512 = np.float32(512.0)  # 2**9: e4m3 subnormal steps
_TWO_M6 = np.float32(2.0**-6)  # smallest e4m3 normal
_TWO_M9 = np.float32(2.0**-9)  # e4m3 subnormal step
_TWO_M10 = np.float32(2.0**-10)
_TWO_M149 = np.float32(2.0**-149)  # smallest float32 subnormal
_TWO_M126 = np.float32(2.0**-126)  # smallest float32 normal
_TWO_P24 = np.float32(2.0**24)
_TWO_P75 = np.float32(2.0**75)
_TWO_P74 = np.float32(2.0**74)
_F_INF = np.float32(math.inf)
_F_NAN = np.float32(math.nan)

# --- device functions --------------------------------------------------------


@device_inline
def _rne(v):
    """Round a non-negative float32 to the nearest integer, ties to even."""
    fl = np.float32(math.floor(v))  # float32 throughout: no FP64 on the way
    r = v - fl
    f = int(fl)
    if r > _F_HALF or (r == _F_HALF and (f & 1) == 1):
        f += 1
    return f


@device_inline
def _negative(x):
    # True for -0.0 too, and for NaNs with the sign bit set.
    return math.copysign(_F1, x) < _F0


@device_inline
def bits_to_f32(u):
    """float32 with bit pattern ``u`` (uint32)."""
    w = int(u)
    e = (w >> 23) & 0xFF
    m = w & 0x7FFFFF
    if e == 0xFF:
        v = _F_INF if m == 0 else _F_NAN
    elif e == 0:
        v = np.float32(m) * _TWO_M149  # exact, no ldexp on subnormals
    else:
        v = np.float32(math.ldexp(np.float32(m | 0x800000), e - 150))
    if (w >> 31) & 1:
        v = -v
    return v


@device_inline
def f32_to_bits(x):
    """Bit pattern (uint32) of ``x`` as float32."""
    xf = np.float32(x)  # a new name: rebinding x would widen its type
    s = 0x80000000 if _negative(xf) else 0
    if math.isnan(xf):
        return np.uint32(s | 0x7FC00000)
    a = abs(xf)
    if math.isinf(a):
        return np.uint32(s | 0x7F800000)
    if a == _F0:
        return np.uint32(s)
    if a < _TWO_M126:  # subnormal: a * 2**149 is an exact integer < 2**23
        return np.uint32(s | int(a * _TWO_P75 * _TWO_P74))
    m, e = math.frexp(a)  # a = m * 2**e, 0.5 <= m < 1
    return np.uint32(s | ((e + 126) << 23) | (int(m * _TWO_P24) - 0x800000))


@device_inline
def bf16_to_f32(b):
    """float32 value of bf16 bits ``b`` (uint16)."""
    return bits_to_f32(int(b) << 16)


@device_inline
def f32_to_bf16(x):
    """bf16 bits (uint16) of float32 ``x``, round to nearest even."""
    u = np.int64(f32_to_bits(x))
    if (u & 0x7FFFFFFF) > 0x7F800000:  # NaN: keep sign, make it quiet
        return np.uint16((u >> 16) | 0x40)
    u += 0x7FFF + ((u >> 16) & 1)  # carries into the exponent when needed
    return np.uint16((u >> 16) & 0xFFFF)


# The two decoders of a code to its value: the host's and the simulator
# twins' (``cvt.e4m3x2_to_f32x2``'s), not device code's, which converts by
# ``cvt`` (a branch and an ``I2F.S64`` a code here; ``test_cvt`` holds every
# kernels module to it). They stay on Numba's inlining, as they did while
# kernels called them (compiled on their own and inlined by NVVM, their
# branches left ptxas spilling in the MoE per-row kernels).
@cuda.jit(device=True, inline="always")
def e4m3_to_f32(c):
    """float32 value of an FP8 E4M3 (fn) code ``c`` (uint8)."""
    ci = np.int32(c)
    mag = ci & 0x7F
    e = mag >> 3
    m = mag & 7
    if mag == 0x7F:
        v = _F_NAN
    elif e == 0:
        v = np.float32(m) * _TWO_M9
    else:
        # (8 + m) * 2**(e - 10); (8 + m) << e < 2**24 is exact in float32
        v = np.float32((8 + m) << e) * _TWO_M10
    if ci & 0x80:
        v = -v
    return v


@device_inline
def f32_to_e4m3(x):
    """FP8 E4M3 (fn) code (uint8) of float32 ``x``: RNE, saturating."""
    xf = np.float32(x)
    if math.isnan(xf):
        return np.uint8(0x7F)
    s = 0x80 if _negative(xf) else 0
    a = abs(xf)
    if a >= _F448:
        return np.uint8(s | 0x7E)
    if a < _TWO_M6:  # subnormal step 2**-9 (8 -> 0x08, min normal)
        return np.uint8(s | _rne(a * _F512))
    m, e = math.frexp(a)  # exponent e - 1 in [-6, 8]
    q = _rne(m * _F16)  # 8..16; 16 carries into the exponent field
    return np.uint8(s | (((e + 6) << 3) + q - 8))


@cuda.jit(device=True, inline="always")
def e2m1_to_f32(n):
    """float32 value of an FP4 E2M1 nibble ``n`` (low 4 bits used)."""
    ni = np.int32(n)
    mag = ni & 7
    if mag < 2:
        v = np.float32(mag) * _F_HALF
    else:
        # (2 + m) * 2**(e - 2) for exponent field e in 1..3
        v = np.float32((2 + (mag & 1)) << (mag >> 1)) * np.float32(0.25)
    if ni & 8:
        v = -v
    return v


@device_inline
def f32_to_e2m1(x):
    """FP4 E2M1 nibble (uint8, 0..15) of float32 ``x``: RNE, saturating at 6."""
    xf = np.float32(x)
    if math.isnan(xf):
        return np.uint8(0x7)
    s = 8 if _negative(xf) else 0
    a = abs(xf)
    if a >= _F6:
        return np.uint8(s | 7)
    if a < _F1:  # step 0.5 (2 -> code 2, 1.0)
        return np.uint8(s | _rne(a * _F2))
    m, e = math.frexp(a)  # exponent e - 1 in 0..2
    q = _rne(m * _F4)  # 2..4
    return np.uint8(s | ((e << 1) + q - 2))


@device_inline
def nvfp4_at(packed, scales, tensor_scale, i):
    """Element ``i`` of an NVFP4 row: ``packed`` uint8 (two nibbles a byte,
    low first), ``scales`` uint8 e4m3 codes (one per 16 elements)."""
    b = np.int32(packed[i >> 1])  # signed: uint64 and int64 would unify to float64
    n = (b >> 4) if (i & 1) else (b & 0xF)
    return (e2m1_to_f32(n) * e4m3_to_f32(scales[i >> 4])) * np.float32(tensor_scale)


# --- host twins (NumPy, whole arrays) ----------------------------------------


def _e4m3_table() -> np.ndarray:
    c = np.arange(256)
    e, m = (c >> 3) & 0xF, c & 7
    mag = np.where(e == 0, m * 2.0**-9, (8 + m) * np.exp2(e - 10.0))
    mag = np.where((c & 0x7F) == 0x7F, np.nan, mag)
    return np.where(c & 0x80, -mag, mag).astype(np.float32)


# Value of every code, from the format's definition.
E4M3_VALUES = _e4m3_table()
E2M1_VALUES = np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.0, -0.5, -1, -1.5, -2, -3, -4, -6], dtype=np.float32)


def bits_to_f32_np(u) -> np.ndarray:
    return np.asarray(u, dtype=np.uint32).view(np.float32)  # same itemsize: any strides


def f32_to_bits_np(x) -> np.ndarray:
    return np.asarray(x, dtype=np.float32).view(np.uint32)


def bf16_to_f32_np(b) -> np.ndarray:
    return bits_to_f32_np(np.asarray(b, dtype=np.uint16).astype(np.uint32) << 16)


def f32_to_bf16_np(x) -> np.ndarray:
    u = f32_to_bits_np(x).astype(np.uint64)  # room for the rounding carry
    nan = (u & 0x7FFFFFFF) > 0x7F800000
    r = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
    return np.where(nan, (u >> 16) | 0x40, r).astype(np.uint16)


def e4m3_to_f32_np(c) -> np.ndarray:
    return E4M3_VALUES[np.asarray(c, dtype=np.uint8)]


def e2m1_to_f32_np(n) -> np.ndarray:
    return E2M1_VALUES[np.asarray(n, dtype=np.uint8) & 0xF]


def _signbit_code(x: np.ndarray, bit: int) -> np.ndarray:
    return np.where(np.signbit(x), bit, 0).astype(np.int64)


def f32_to_e4m3_np(x) -> np.ndarray:
    x = np.asarray(x, dtype=np.float32)
    with np.errstate(invalid="ignore"):  # NaN inputs (handled below)
        a = np.abs(x).astype(np.float64)
        m, e = np.frexp(a)
        sub = np.rint(a * 512.0)
        norm = ((e.astype(np.int64) + 6) << 3) + np.rint(m * 16.0) - 8
        code = np.where(a < 2.0**-6, sub, norm)
        code = np.where(a >= E4M3_MAX, 0x7E, code)
    code = np.where(np.isnan(a), 0, code).astype(np.int64) | _signbit_code(x, 0x80)
    return np.where(np.isnan(x), E4M3_NAN, code).astype(np.uint8)


def f32_to_e2m1_np(x) -> np.ndarray:
    x = np.asarray(x, dtype=np.float32)
    with np.errstate(invalid="ignore"):  # NaN inputs (handled below)
        a = np.abs(x).astype(np.float64)
        m, e = np.frexp(a)
        code = np.where(a < 1.0, np.rint(a * 2.0), (e.astype(np.int64) << 1) + np.rint(m * 4.0) - 2)
        code = np.where(a >= E2M1_MAX, 7, code)
    code = np.where(np.isnan(a), 0, code).astype(np.int64) | _signbit_code(x, 8)
    return np.where(np.isnan(x), 7, code).astype(np.uint8)


def nvfp4_decode_np(packed, scales, tensor_scale) -> np.ndarray:
    """float32[..., K] from ``packed`` uint8[..., K/2] and ``scales``
    uint8[..., K/16], same float32 operation order as :func:`nvfp4_at`."""
    packed = np.asarray(packed, dtype=np.uint8)
    nib = np.stack([packed & 0xF, packed >> 4], axis=-1).reshape(*packed.shape[:-1], -1)
    block = np.repeat(e4m3_to_f32_np(scales), NVFP4_BLOCK, axis=-1)
    if block.shape != nib.shape:
        raise ValueError(f"scales {np.shape(scales)} do not cover packed {packed.shape}")
    return (e2m1_to_f32_np(nib) * block) * np.float32(tensor_scale)


def nvfp4_encode_np(x, tensor_scale: float | None = None):
    """Quantize float ``x[..., K]`` (K a multiple of 16) to NVFP4.

    Returns ``(packed uint8[..., K/2], scales uint8[..., K/16], tensor_scale
    float32)``. The default tensor scale maps the tensor's absolute maximum to
    448 * 6, so block scales use e4m3's range; each block's scale is its
    absolute maximum / 6, rounded to e4m3."""
    x = np.asarray(x, dtype=np.float32)
    k = x.shape[-1]
    if k == 0 or k % NVFP4_BLOCK:
        raise ValueError(f"NVFP4 needs the last dimension a positive multiple of 16, got {k}")
    if tensor_scale is None:
        amax = float(np.max(np.abs(x))) if x.size else 0.0
        tensor_scale = amax / (E4M3_MAX * E2M1_MAX) if amax > 0 else 1.0
    ts = np.float32(tensor_scale)
    blocks = x.reshape(*x.shape[:-1], k // NVFP4_BLOCK, NVFP4_BLOCK)
    scales = f32_to_e4m3_np(np.abs(blocks).max(axis=-1) / E2M1_MAX / ts)
    step = (e4m3_to_f32_np(scales) * ts)[..., None]
    with np.errstate(divide="ignore", invalid="ignore"):
        q = np.where(step > 0, blocks / step, 0.0)
    nib = f32_to_e2m1_np(q).reshape(*x.shape[:-1], k // 2, 2)
    packed = (nib[..., 0] | (nib[..., 1] << 4)).astype(np.uint8)
    return packed, scales, ts

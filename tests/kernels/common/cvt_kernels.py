"""One small kernel per conversion of ``leverctl_kernels.common.cvt``, made
for whichever binding the process has: the simulator twins in
``test_cvt.py``, the native instructions in ``test_cvt_ptx.py``'s compile
process. Imported lazily by both, since the binding is fixed when ``cvt`` is
first imported (import this module only after that choice)."""

from __future__ import annotations

# At module level: the simulator gives a kernel its own `cuda` through the
# kernel's module globals, which a name local to the factory would escape.
from numba import cuda

from leverctl_kernels.common import cvt as C


def _one(conv):
    """``out[i] = conv(x[i])``."""

    @cuda.jit
    def k(x, out):
        i = cuda.grid(1)
        if i < out.size:
            out[i] = conv(x[i])

    return k


def _pair(conv):
    """``out[i] = conv(x[2i], x[2i + 1])``: a paired encoder, lower element first."""

    @cuda.jit
    def k(x, out):
        i = cuda.grid(1)
        if i < out.size:
            out[i] = conv(x[2 * i], x[2 * i + 1])

    return k


def _decode_pair(fn):
    """A kernel writing ``fn(c[i])``'s two values to ``out[2i]``, ``out[2i + 1]``."""

    @cuda.jit
    def k(c, out):
        i = cuda.grid(1)
        if i < c.size:
            lo, hi = fn(c[i])
            out[2 * i] = lo
            out[2 * i + 1] = hi

    return k


def conversion_kernels() -> dict:
    e4m3x2_to_f32x2 = _decode_pair(C.e4m3x2_to_f32x2)
    return {
        "f16x2_to_f32x2": _decode_pair(C.f16x2_to_f32x2),
        "f32_to_bf16": _one(C.f32_to_bf16),
        "f32x2_to_bf16x2": _pair(C.f32x2_to_bf16x2),
        "f32x2_to_f16x2": _pair(C.f32x2_to_f16x2),
        "bf16_to_f32": _one(C.bf16_to_f32),
        "f32x2_to_e4m3x2": _pair(C.f32x2_to_e4m3x2),
        "e4m3x2_to_f32x2": e4m3x2_to_f32x2,
        "f32_bits": _one(C.f32_bits),
        "bits_f32": _one(C.bits_f32),
        "e2m1_to_f32": _one(C.e2m1_to_f32),
        "e4m3_to_f32": _one(C.e4m3_to_f32),
        "f32_to_e4m3": _one(C.f32_to_e4m3),
    }

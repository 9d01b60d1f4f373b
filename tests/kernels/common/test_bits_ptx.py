"""The format device functions of ``common/bits.py`` compile for sm_90 without a
single FP64 instruction (``ptx_harness``): each device function is compiled
inside a one-line kernel, as a kernel would inline it. A float64 literal or a
``math`` call typed as float64 inside one of them puts FP64 arithmetic into every
kernel that decodes a weight, at 1/64 of the FP32 rate on an H200.
"""

from __future__ import annotations

import pytest
from ptx_harness import check_ptx, check_ptxas, compiled  # noqa: F401 (compiled: the fixture)

THREADS = 128


PROBE = "fp64_probe"  # deliberately FP64: proves the count sees it


def _mapper(fn):
    from numba import cuda

    @cuda.jit
    def k(x, out):
        i = cuda.grid(1)
        if i < x.size:
            out[i] = fn(x[i])

    return k


def jobs():
    """(name, dispatcher, signature, threads per block); runs in the compile
    process."""
    import numpy as np
    from numba import cuda, types

    from leverctl_kernels.common import bits as B

    f32, u8, u16, u32 = types.float32, types.uint8, types.uint16, types.uint32

    @cuda.jit
    def nvfp4_rows(packed, scales, ts, out):
        i = cuda.grid(1)
        if i < out.size:
            out[i] = B.nvfp4_at(packed, scales, ts, i)

    maps = [
        ("f32_to_e4m3", B.f32_to_e4m3, f32, u8),
        ("f32_to_e2m1", B.f32_to_e2m1, f32, u8),
        ("f32_to_bf16", B.f32_to_bf16, f32, u16),
        ("f32_to_bits", B.f32_to_bits, f32, u32),
        ("bits_to_f32", B.bits_to_f32, u32, f32),
        ("bf16_to_f32", B.bf16_to_f32, u16, f32),
        ("e4m3_to_f32", B.e4m3_to_f32, u8, f32),
        ("e2m1_to_f32", B.e2m1_to_f32, u8, f32),
    ]
    out = [(name, _mapper(fn), (src[::1], dst[::1]), THREADS) for name, fn, src, dst in maps]
    out.append(("nvfp4_at", nvfp4_rows, (u8[::1], u8[::1], f32, f32[::1]), THREADS))

    @cuda.jit(device=True, inline=True)
    def scale_with_a_python_float(x):
        return np.float32(x * 0.1)  # a Python float is a float64 to Numba

    out.append((PROBE, _mapper(scale_with_a_python_float), (f32[::1], f32[::1]), THREADS))
    return out


def _formats(compiled: dict) -> dict:
    return {**compiled, "kernels": {n: r for n, r in compiled["kernels"].items() if n != PROBE}}


def test_every_format_function_compiles_for_sm90_without_fp64(compiled):
    assert len(_formats(compiled)["kernels"]) == 9
    check_ptx(_formats(compiled), fp64=False)


def test_a_device_function_that_multiplies_by_a_python_float_is_counted_as_fp64(compiled):
    assert compiled["kernels"][PROBE]["f64"] > 0
    with pytest.raises(AssertionError, match="fp64 instructions"):
        check_ptx(compiled, fp64=False)


def test_format_functions_need_no_stack_or_spills(compiled):
    check_ptxas(_formats(compiled))

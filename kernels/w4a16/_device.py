"""Helpers shared by the W4A16 family's GEMV kernels: the host side of a
launch, and the SiLU-multiply staging of the fused FFN decode kernel (in
the activation layouts of ``common.int4_device``).
"""

from __future__ import annotations

import math

from numba import cuda, float32, uint32

from ..common import cvt
from ..common.int4_device import put8_f32, slot, word_at, xscale
from ..common.launch import device_inline
from ..common.smem import smem_addr
from ..common.vload import ldg_v4


def launcher(make, launch_config, n: int, k: int, *cfg):
    """``launch(*args)`` running ``make(*cfg)`` for an ``n x k`` weight at
    ``launch_config(n, *cfg)``."""
    if k % 8:
        raise ValueError(f"k={k}: the W4A16 layout needs k a multiple of 8")
    kern = make(*cfg)
    grid, block = launch_config(n, *cfg)

    def launch(*args):
        kern[grid, block](*args)

    return launch


def path_build(make_launch, names):
    """A path variant's ``build(shape, **cfg)``: ``make_launch(n, k, **cfg)``
    run on the buffers ``names`` (in the kernel's argument order)."""

    def build(shape, **cfg):
        run = make_launch(shape["n"], shape["k"], **cfg)

        def launch(bufs):
            run(*[bufs[name] for name in names])

        return launch

    return build


@cuda.jit(device=True)
def silu_f32(g):
    return g / (float32(1.0) + math.exp(-g))


@cuda.jit(device=True)
def stage_silu_mul_grouped(xs, gate, up, c0, k, tid, nthreads, kchunk):
    """``silu(gate) * up``, computed in fp32, staged as
    ``int4_device.stage_x_grouped`` stages ``x`` (pre-scaled, one input a
    thread at a time)."""
    for e in range(tid, min(kchunk, k - c0), nthreads):
        xs[slot(e)] = silu_f32(float32(gate[c0 + e])) * float32(up[c0 + e]) * xscale(e)


@device_inline
def _silu_pair(g, u):
    ga, gb = cvt.f16x2_to_f32x2(g)
    ua, ub = cvt.f16x2_to_f32x2(u)
    return silu_f32(ga) * ua, silu_f32(gb) * ub


@device_inline
def _put8_silu(at, g0, g1, g2, g3, u0, u1, u2, u3):
    """``silu(gate) * up`` of the eight fp16 in words ``g0..g3`` and
    ``u0..u3`` (one packed word's inputs), each value as
    :func:`stage_silu_mul_grouped` computes it (fp16 to fp32 is exact),
    stored as ``int4_device.put8_f32`` stores them."""
    v0, v1 = _silu_pair(g0, u0)
    v2, v3 = _silu_pair(g1, u1)
    v4, v5 = _silu_pair(g2, u2)
    v6, v7 = _silu_pair(g3, u3)
    put8_f32(at, v0, v1, v2, v3, v4, v5, v6, v7)


@cuda.jit(device=True)
def stage_silu_mul_grouped_v4(xs, gate, up, c0, k, tid, nthreads, kchunk):
    """:func:`stage_silu_mul_grouped` with 16-byte loads (``gate`` and
    ``up`` fp16, both starting on 16 bytes, ``c0`` a multiple of 8), as
    ``int4_device.stage_x_grouped_v4`` stages ``x``: eight inputs of each a
    load, a thread's first two chunks of both (four loads) issued before
    any is stored, the chunk's last ``< 8`` inputs one at a time. Every
    block stages the chunk (the 2-byte loads it replaces used a quarter of
    each sector per instruction pair and four times the instructions)."""
    lim = min(kchunk, k - c0)
    nv = lim >> 3
    xb = smem_addr(xs)
    v0 = tid
    v1 = tid + nthreads
    z = uint32(0)
    a0 = a1 = a2 = a3 = b0 = b1 = b2 = b3 = z
    c_0 = c_1 = c_2 = c_3 = d0 = d1 = d2 = d3 = z
    if v0 < nv:
        a0, a1, a2, a3 = ldg_v4(gate, c0 + 8 * v0)
        b0, b1, b2, b3 = ldg_v4(up, c0 + 8 * v0)
    if v1 < nv:
        c_0, c_1, c_2, c_3 = ldg_v4(gate, c0 + 8 * v1)
        d0, d1, d2, d3 = ldg_v4(up, c0 + 8 * v1)
    if v0 < nv:
        _put8_silu(word_at(xb, v0), a0, a1, a2, a3, b0, b1, b2, b3)
    if v1 < nv:
        _put8_silu(word_at(xb, v1), c_0, c_1, c_2, c_3, d0, d1, d2, d3)
    if kchunk > 16 * nthreads:  # constants: at the kernels' 2048 and 128 threads, no loop at all
        for v in range(tid + 2 * nthreads, nv, nthreads):
            e0, e1, e2, e3 = ldg_v4(gate, c0 + 8 * v)
            f0, f1, f2, f3 = ldg_v4(up, c0 + 8 * v)
            _put8_silu(word_at(xb, v), e0, e1, e2, e3, f0, f1, f2, f3)
    for e in range(8 * nv + tid, lim, nthreads):
        xs[slot(e)] = silu_f32(float32(gate[c0 + e])) * float32(up[c0 + e]) * xscale(e)

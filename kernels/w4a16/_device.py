"""Helpers shared by the W4A16 family's GEMV kernels: the host side of a
launch, and the SiLU-multiply staging of the fused FFN decode kernel (in
the activation layouts of ``common.int4_device``).
"""

from __future__ import annotations

import math

from numba import cuda, float32, uint32


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
def stage_silu_mul(xs, gate, up, c0, k, tid, nthreads, kchunk, stride):
    """Like :func:`stage_x`, staging ``silu(gate) * up`` computed in fp32."""
    for e in range(tid, min(kchunk, k - c0), nthreads):
        xs[uint32((e & 7) * stride + (e >> 3))] = silu_f32(float32(gate[c0 + e])) * float32(up[c0 + e])


@cuda.jit(device=True)
def stage_silu_mul_grouped(xs, gate, up, c0, k, tid, nthreads, kchunk, stride):
    """:func:`stage_silu_mul` in the grouped layout (``int4_device.group_layout``)."""
    for e in range(tid, min(kchunk, k - c0), nthreads):
        xs[uint32((e & 31) * stride + (e >> 5))] = silu_f32(float32(gate[c0 + e])) * float32(up[c0 + e])

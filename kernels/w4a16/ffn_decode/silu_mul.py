"""SiLU-multiply for the split FFN decode: ``h = silu(gate) * up``.

``gate``, ``up``, ``h``: fp16 vectors (or any same-shape 1-D arrays); the
arithmetic is fp32 (``silu(g) = g / (1 + exp(-g))``) and ``h`` is rounded to
fp16 on the store, as the engine's split path does before the down GEMV.

Launch: ``THREADS`` (256) threads per block, a grid-stride loop over
elements, the grid capped at the resident block count. Consecutive threads
touch consecutive elements: every access is coalesced. Memory-bound:
``3 * 2`` bytes per element.
"""

from __future__ import annotations

from functools import lru_cache

from numba import cuda, float32

from ...common import launch as L
from .._device import silu_f32
from .._warp_rows import MAX_RESIDENT_BLOCKS

THREADS = 256
# Floating-point operations counted per element: exp, add, divide, multiply.
FLOPS_PER_ELEMENT = 4


@lru_cache(maxsize=None)
def make_silu_mul():
    @cuda.jit
    def silu_mul(h, gate, up):
        n = h.shape[0]
        i = cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x
        step = cuda.gridDim.x * cuda.blockDim.x
        while i < n:
            h[i] = silu_f32(float32(gate[i])) * float32(up[i])
            i += step

    return silu_mul


def launch_config(n: int):
    blocks, threads = L.grid_1d(n, THREADS, max_blocks=MAX_RESIDENT_BLOCKS)
    return (blocks,), (threads,)


def make_launch(n: int):
    """``launch(h, gate, up)`` for vectors of ``n`` elements."""
    kern = make_silu_mul()
    grid, block = launch_config(n)

    def launch(h, gate, up):
        kern[grid, block](h, gate, up)

    return launch

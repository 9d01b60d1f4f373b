"""W4A16 decode GEMV, one warp per output row (``gemv_sw`` on).

``y[n] = W[n, k] x[k]``: ``qweight uint32[n, k/8]``, ``scales fp16[n, k/128]``
(layout in ``leverctl_kernels.common.int4``), ``x fp16[k]``; ``y`` is fp16,
accumulated in fp32.

Launch: ``WARPS`` warps per block (default 4, 128 threads), warp ``w`` of
the block owning row ``blockIdx.x * WARPS + w``; blocks stride over row
groups, the grid capped at the resident block count::

    block b, row group rb = b*WARPS (+ gridDim*WARPS per pass)
      warp 0 -> row rb+0:  lane 0  words 0-3, 128-131, ...    } 32 lanes read
      warp 1 -> row rb+1:  lane 1  words 4-7, 132-135, ...    } 32 x 16 B: four
      ...                  ...                                } 128 B lines per
      warp 3 -> row rb+3:  lane 31 words 124-127, ...         } step, fully used

(16-byte loads, two per lane in flight, where ``k % 32 == 0``; one word per
lane and step otherwise: see ``_warp_rows``.) For every K-chunk
(``KCHUNK`` inputs, 9 KiB of fp32 shared memory) the block stages ``x`` in
shared memory (32 inputs a group, padded to 36 floats, pre-scaled per
nibble position: conflict-free 16-byte stores and reads; see
``common.int4_device``), then each lane multiplies its packed words by it:
8 int4 values times 8 staged activations per word (two ``LDS.128``, one
AND, FADD and FFMA a value), summed in fp32 and scaled once per load by
the row's group scale. When ``k <= KCHUNK`` the activations are staged
once per block and reused for every row group it visits. One shuffle-down
reduction per row; lane 0 writes ``y[row]``.

The kernel is memory-bound: per row it reads ``k/2`` bytes of weights with
coalesced 128-bit loads and ``2*k/128`` bytes of scales (eight distinct
scales per warp step); ``x`` comes from L2 once per block.

The body is ``_warp_rows``'s, shared with the dual GEMV and the fused
SiLU-multiply + down GEMV.
"""

from __future__ import annotations

from functools import lru_cache

from numba import cuda

from .._device import launcher, path_build
from .._warp_rows import DEFAULT_KCHUNK, DEFAULT_WARPS, launch_config, make_warp_rows


@lru_cache(maxsize=None)
def make_gemv_sw(WARPS: int = DEFAULT_WARPS, KCHUNK: int = DEFAULT_KCHUNK, TAIL_FAULT: int = 0):
    """Compile the one-warp-per-row GEMV for a block of ``WARPS`` warps and a
    shared-memory chunk of ``KCHUNK`` activations (``TAIL_FAULT``: a planted
    fault, for tests; see ``_warp_rows``)."""
    rows = make_warp_rows(WARPS, KCHUNK, False, False, TAIL_FAULT)

    @cuda.jit
    def gemv_sw(y, qweight, scales, x):
        rows((y,), (qweight, scales), (x,))

    return gemv_sw


def make_launch(n: int, k: int, *, WARPS: int = DEFAULT_WARPS, KCHUNK: int = DEFAULT_KCHUNK):
    """``launch(y, qweight, scales, x)`` for an ``n x k`` weight."""
    return launcher(make_gemv_sw, launch_config, n, k, WARPS, KCHUNK)


build = path_build(make_launch, ("y", "qweight", "scales", "x"))

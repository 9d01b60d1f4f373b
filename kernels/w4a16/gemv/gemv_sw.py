"""W4A16 decode GEMV, one warp per output row (``gemv_sw`` on).

``y[n] = W[n, k] x[k]``: ``qweight uint32[n, k/8]``, ``scales fp16[n, k/128]``
(layout in ``leverctl_kernels.common.int4``), ``x fp16[k]``; ``y`` is fp16,
accumulated in fp32.

Launch: ``WARPS`` warps per block (default 4, 128 threads), warp ``w`` of
the block owning row ``blockIdx.x * WARPS + w``; blocks stride over row
groups, the grid capped at the resident block count::

    block b, row group rb = b*WARPS (+ gridDim*WARPS per pass)
      warp 0 -> row rb+0:  lane 0  word 0, 32, 64, ...   } 32 lanes read 32
      warp 1 -> row rb+1:  lane 1  word 1, 33, 65, ...   } consecutive words:
      ...                  ...                           } one 128 B line per
      warp 3 -> row rb+3:  lane 31 word 31, 63, ...      } step, fully used

For every K-chunk (``KCHUNK`` inputs, 8 KiB of fp32 shared memory) the block
stages ``x`` in shared memory (transposed by nibble, conflict-free reads;
see ``common.int4_device``), then each lane multiplies its packed words by it: 8 int4
values times 8 staged activations, summed in fp32 and scaled once per word
by the row's group scale. When ``k <= KCHUNK`` the activations are staged
once per block and reused for every row group it visits. One shuffle-down
reduction per row; lane 0 writes ``y[row]``.

The kernel is memory-bound: per row it reads ``k/2`` bytes of weights with
coalesced 32-bit loads and ``2*k/128`` bytes of scales (two distinct scales
per warp step, served from L1); ``x`` comes from L2 once per block.

The body is ``_warp_rows``'s, shared with the dual GEMV and the fused
SiLU-multiply + down GEMV.
"""

from __future__ import annotations

from functools import lru_cache

from numba import cuda

from .._device import launcher, path_build
from .._warp_rows import DEFAULT_KCHUNK, DEFAULT_WARPS, launch_config, make_warp_rows


@lru_cache(maxsize=None)
def make_gemv_sw(WARPS: int = DEFAULT_WARPS, KCHUNK: int = DEFAULT_KCHUNK):
    """Compile the one-warp-per-row GEMV for a block of ``WARPS`` warps and a
    shared-memory chunk of ``KCHUNK`` activations."""
    rows = make_warp_rows(WARPS, KCHUNK, False, False)

    @cuda.jit
    def gemv_sw(y, qweight, scales, x):
        rows((y,), (qweight, scales), (x,))

    return gemv_sw


def make_launch(n: int, k: int, *, WARPS: int = DEFAULT_WARPS, KCHUNK: int = DEFAULT_KCHUNK):
    """``launch(y, qweight, scales, x)`` for an ``n x k`` weight."""
    return launcher(make_gemv_sw, launch_config, n, k, WARPS, KCHUNK)


build = path_build(make_launch, ("y", "qweight", "scales", "x"))

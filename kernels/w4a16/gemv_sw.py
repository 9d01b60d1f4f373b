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
see ``_device``), then each lane multiplies its packed words by it: 8 int4
values times 8 staged activations, summed in fp32 and scaled once per word
by the row's group scale. When ``k <= KCHUNK`` the activations are staged
once per block and reused for every row group it visits. One shuffle-down
reduction per row; lane 0 writes ``y[row]``.

The kernel is memory-bound: per row it reads ``k/2`` bytes of weights with
coalesced 32-bit loads and ``2*k/128`` bytes of scales (two distinct scales
per warp step, served from L1); ``x`` comes from L2 once per block.
"""
from __future__ import annotations

from functools import lru_cache

from numba import cuda, float32

from ..common import launch as L
from ._device import dot_word, stage_x, warp_sum

DEFAULT_WARPS = 4
DEFAULT_KCHUNK = 2048
# Grid cap for the row-group stride: 132 SMs (H200) x 16 resident 128-thread
# blocks; more blocks would only queue.
MAX_RESIDENT_BLOCKS = 132 * 16


def _check_config(WARPS: int, KCHUNK: int) -> None:
    L.check_block(WARPS * L.WARP_SIZE, warps=True)
    if KCHUNK < 256 or KCHUNK % 256:
        raise ValueError(f"KCHUNK={KCHUNK}: a positive multiple of 256 inputs")


@lru_cache(maxsize=None)
def make_gemv_sw(WARPS: int = DEFAULT_WARPS, KCHUNK: int = DEFAULT_KCHUNK):
    """Compile the one-warp-per-row GEMV for a block of ``WARPS`` warps and a
    shared-memory chunk of ``KCHUNK`` activations."""
    _check_config(WARPS, KCHUNK)
    NT = WARPS * 32
    KWC = KCHUNK // 8  # packed words per chunk
    STRIDE = KWC + 1
    XS = 8 * STRIDE

    @cuda.jit
    def gemv_sw(y, qweight, scales, x):
        n = qweight.shape[0]
        kw = qweight.shape[1]
        k = x.shape[0]
        xs = cuda.shared.array(XS, dtype=float32)
        tid = cuda.threadIdx.x
        lane = tid & 31
        warp = tid >> 5
        nchunks = (k + KCHUNK - 1) // KCHUNK
        staged = False
        rb = cuda.blockIdx.x * WARPS
        while rb < n:  # block-uniform: every thread reaches the barriers
            row = rb + warp
            acc = float32(0.0)
            for c in range(nchunks):
                c0 = c * KCHUNK
                if nchunks > 1 or not staged:
                    cuda.syncthreads()  # previous chunk fully consumed
                    stage_x(xs, x, c0, k, tid, NT, KCHUNK, STRIDE)
                    cuda.syncthreads()
                    staged = True
                if row < n:
                    w0 = c * KWC
                    w1 = min(kw, w0 + KWC)
                    for gw in range(w0 + lane, w1, 32):
                        acc += float32(scales[row, gw >> 4]) * dot_word(
                            qweight[row, gw], xs, gw - w0, STRIDE
                        )
            if row < n:  # warp-uniform
                acc = warp_sum(acc)
                if lane == 0:
                    y[row] = acc
            rb += cuda.gridDim.x * WARPS

    return gemv_sw


def launch_config(n: int, WARPS: int = DEFAULT_WARPS, KCHUNK: int = DEFAULT_KCHUNK):
    grid = L.check_grid(min(L.blocks_for(n, WARPS), MAX_RESIDENT_BLOCKS))
    block = (L.check_block(WARPS * L.WARP_SIZE, warps=True),)
    L.check_shared(4 * 8 * (KCHUNK // 8 + 1))
    return grid, block


def make_launch(n: int, k: int, *, WARPS: int = DEFAULT_WARPS, KCHUNK: int = DEFAULT_KCHUNK):
    """``launch(y, qweight, scales, x)`` for an ``n x k`` weight."""
    if k % 8:
        raise ValueError(f"k={k}: the W4A16 layout needs k a multiple of 8")
    kern = make_gemv_sw(WARPS, KCHUNK)
    grid, block = launch_config(n, WARPS, KCHUNK)

    def launch(y, qweight, scales, x):
        kern[grid, block](y, qweight, scales, x)

    return launch


def build(shape, *, WARPS: int = DEFAULT_WARPS, KCHUNK: int = DEFAULT_KCHUNK):
    run = make_launch(shape["n"], shape["k"], WARPS=WARPS, KCHUNK=KCHUNK)

    def launch(bufs):
        run(bufs["y"], bufs["qweight"], bufs["scales"], bufs["x"])

    return launch


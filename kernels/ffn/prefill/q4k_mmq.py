"""Q4_K MMQ: the dense-FFN GEMM on GGUF Q4_K weights, as llama.cpp's MMQ
does it. Activations are quantised to int8 per block of 32 (``q8``: a
scale ``d8`` and ``s8 = d8 * sum(q)`` per block); each 32-value sub-block of
a Q4_K super-block contributes, for activation block ``b`` of row ``r`` and
weight sub-block ``b`` of column ``n``::

    d8[r, b] * (d * sc)[n, b] * dot(q8, q4)  -  (dmin * m)[n, b] * s8[r, b]

with ``dot`` the exact integer dot product of the int8 activations and the
4-bit values (0..15), on ``mma.sync.aligned.m16n8k32`` s8 (``common/mma``).

Tiles: the project's mma.sync mainloop (``common/gemm/mma_sync.py``) with
the MMQ plug-ins (``common/gemm/mmq.py``): two warpgroups per 64 x 64 tile (one a column half);
the int8 activations copied by ``cp.async``, the weights' 4-bit values
unpacked to bytes in value order by the Q4_K stager, into
128-byte-swizzled stages of 128 values (four sub-blocks, half a
super-block), three in flight (49 KiB), read by ``ldmatrix``; each 32-value
step's s32 dot products folded into the f32 sums with the formula above,
its sub-block's ``d * sc`` and ``dmin * m`` decoded from the block's fp16
``d``, ``dmin`` and 12 scale bytes in ``common.q4k``'s layout (the
super-block's 16-byte header, one load; the 4-bit values too, 16 bytes a
load). Rows past
``m`` and columns past ``n`` are staged as zeros and not stored.
``k % 256 == 0``.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
from numba import cuda

from ...common import q4k
from ...common import wgmma_gemm as P
from ...common.gemm import mma_sync as MS
from ...common.gemm import mmq
from . import q8_blocks

BN = 64
WGS = WN = 2  # warpgroups a block, both along the tile's columns (``common/gemm/pipeline.py``)
THREADS = 128 * WGS
MIN_BLOCKS = 2  # the launch bound: two blocks' registers an SM (stages and scale tables fit twice)
QK = q4k.QK_K
SUBS = QK // q4k.SUB  # 8 sub-blocks of 32


def make_q4k_mmq(SUBS_USED: int = SUBS):
    """Compile the kernel (the mainloop's ``(c, aq32, blocks32, blocks32,
    ones_m, ones_n, one, ds8, one)``: the blocks as uint32 twice, the
    weights' stager's operand and the scale tables'). ``SUBS_USED`` (tests only): below 8
    the last sub-blocks of every super-block are skipped, a broken variant
    the check must reject."""
    return MS.make_kernel(
        "s8", WGS, BN, b_kind=mmq.Q4K, step_fold=mmq.make_q4k_fold(SUBS_USED), wn=WN, min_blocks=MIN_BLOCKS
    )


@lru_cache(maxsize=None)
def kernel():
    return make_q4k_mmq()


def supports(k: int) -> str:
    if k <= 0 or k % QK:
        return f"k={k} is not a multiple of the Q4_K super-block ({QK})"
    return ""


def build(shape, kern=None):
    m, n, k = shape["m"], shape["n"], shape["k"]
    why = supports(k)
    if why:
        raise ValueError(f"q4k_mmq: {why}")
    run = MS.make_launch(m, n, k, kern or kernel())
    quant = q8_blocks.launcher()
    aq = cuda.device_array((m, k), dtype=np.int8)
    ds8 = cuda.device_array((m, k // q8_blocks.BLOCK), dtype=np.uint64)  # each block's d8, s8 pair
    rs, cs, one = P.ones(m), P.ones(n), P.ones(1)

    def launch(bufs):
        quant(aq, ds8, bufs["a"])
        w32 = bufs["w_q4k"].view(np.uint32)  # the stager's chunks and the headers, 16 bytes a load
        run(bufs["c"], aq.view(np.uint32), w32, w32, rs, cs, one, ds8, one)

    launch.workspace = {"aq": aq, "ds8": ds8}
    launch.tensor_cores = "mma.sync"
    launch.tc_dtype = "s8"
    return launch

"""NVFP4 MMQ (``ffn_nvfp4_mmq``, ``ffn_nvfp4_mmq_down``): the dense-FFN GEMM
with NVFP4 weights and NVFP4 activations multiplied in integer arithmetic
from the packed codes, as an MMQ kernel does, not decoded to floats.

An E2M1 value times 2 is an exact small integer (0, 1, 2, 3, 4, 6, 8, 12
and their negatives), so a 16-value NVFP4 block of either operand is 16
int8 values and one E4M3 scale. Per 16-value block ``b`` of row ``r`` and
column ``n`` the integer dot product ``dot = sum 2a * 2w`` is exact (at most
16 x 144 = 2304), and::

    c[r, n] = fp16( (ts_a * ts_w) * sum_b  dot[r, n, b] * (sa[r, b] * sw[n, b] / 4) )

Every term of the sum is exact in float32 (``sa * sw``, two E4M3 values,
has at most 8 significant bits, ``dot`` at most 12; the 1/4 is a power of
two): only the float32 sum over K's blocks and the final tensor-scale
product round. Activations are quantised per GEMM by ``nvfp4_act`` (the
W4A4 arm's encoder).

Tensor cores: ``mma.sync.aligned.m16n8k32`` s8 (``IMMA`` in SASS), on the
project's mma.sync mainloop (``common/gemm/mma_sync.py``) with the MMQ
plug-ins (``common/gemm/mmq.py``): a K of 32 would span two NVFP4 blocks
whose scales differ, so both operands are staged with each block's 16
doubled values in the lower half of a 32-byte K step and zeros in the
upper (half of each MMA multiplies zeros: the price of 16-wide scales on a
32-wide integer MMA), and each step's s32 sums are folded into f32 with its
block's two scales. Two warpgroups per 64 x 64 tile (one a column half), both operands decoded
from their packed codes by the stager into 128-byte-swizzled stages (four
blocks each), three in flight (49 KiB), read by ``ldmatrix``. Rows past
``m``, columns past ``n`` and blocks past ``k`` are staged as zeros and not
stored. ``k % 16 == 0``.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
from numba import cuda

from ...common import bits, nvfp4_act
from ...common import wgmma_gemm as P
from ...common.gemm import mma_sync as MS
from ...common.gemm import mmq

BN = 64
WGS = WN = 2  # warpgroups a block, both along the tile's columns (``common/gemm/pipeline.py``)
THREADS = 128 * WGS
MIN_BLOCKS = 2  # the launch bound: two blocks' registers an SM (stages and scale tables fit twice)
BLOCK = bits.NVFP4_BLOCK  # 16
DOUBLED_VALUES = mmq.DOUBLED_VALUES


def make_nvfp4_mmq(HALVES: int = 2, SCALE_PER_32: bool = False):
    """Compile the kernel (the mainloop's ``(c, pa32, pw32, sw, ones_m,
    ones_n, ts_w, sa, ts_a)``). Tests only: ``HALVES=1`` drops every odd
    block of 16 (half of K); ``SCALE_PER_32`` folds both blocks of each 32
    with the even block's scales. Both are broken variants the checks must
    reject."""
    stage_b = mmq.stager(THREADS, drop_odd=True) if HALVES == 1 else None
    return MS.make_kernel(
        "s8",
        WGS,
        BN,
        wn=WN,
        a_kind=mmq.KIND,
        b_kind=mmq.KIND,
        stage_b=stage_b,
        step_fold=mmq.make_step_fold(scale_per_32=SCALE_PER_32),
        min_blocks=MIN_BLOCKS,
    )


@lru_cache(maxsize=None)
def kernel():
    return make_nvfp4_mmq()


def supports(k: int) -> str:
    if k <= 0 or k % BLOCK:
        return f"k={k} is not a positive multiple of {BLOCK} (an NVFP4 block)"
    return ""


def build(shape, kern=None):
    m, n, k = shape["m"], shape["n"], shape["k"]
    why = supports(k)
    if why:
        raise ValueError(f"nvfp4_mmq: {why}")
    run = MS.make_launch(m, n, 2 * k, kern or kernel())  # K as staged: two bytes per value
    quant = nvfp4_act.launcher()
    packed = cuda.device_array((m, k // 2), dtype=np.uint8)
    scales = cuda.device_array((m, k // BLOCK), dtype=np.uint8)
    ts = cuda.device_array(1, dtype=np.float32)
    rowmax = cuda.device_array(m, dtype=np.float32)
    rs, cs = P.ones(m), P.ones(n)

    def launch(bufs):
        quant(packed, scales, ts, rowmax, bufs["a"])
        w = bufs["w_fp4"].view(np.uint32)
        run(bufs["c"], packed.view(np.uint32), w, bufs["w_fp4_scales"], rs, cs, bufs["w_fp4_ts"], scales, ts)

    launch.workspace = {"packed": packed, "scales": scales, "ts": ts, "rowmax": rowmax}
    launch.tensor_cores = "mma.sync"
    launch.tc_dtype = "s8"
    return launch

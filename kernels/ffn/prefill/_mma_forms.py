"""The mma.sync forms of the arms built on Hopper's wgmma (``bf16_v1``,
``bf16_v2``, ``w4a4``), for GPUs without it (sm_80, and sm_100 and later:
``common/tc.py``'s choice), so those arms run there too.

They run on the mma.sync mainloop (``common/gemm/mma_sync.py``): the
wgmma kernels' stagers (int4 -> bf16, NVFP4 -> bf16, exact or rounded once
as there) into the same 128-byte-swizzled stages of 64 k, three in flight,
each warp its 16 rows of the tile as ``BN / 8`` ``mma.sync`` m16n8k16 bf16
per k16 from ``ldmatrix``, f32 accumulators, fp16 out. The tiles are the arm's own (v1: one
warpgroup's 64 rows x 128 columns; v2: 128 x 64). The arithmetic is the
wgmma form's: products exact, sums in f32 (in another order), one rounding
to fp16.

W4A4's activations are NVFP4 too, and the projection GEMM copies its A
operand as bf16: here the encoded activations are first decoded to bf16
(exact, without the tensor scale; ``nvfp4_act.make_decode_bf16``, which
also writes the product of the two tensor scales for the epilogue), a
fourth launch and ``2 m k`` bytes more traffic than the wgmma form, which
decodes both operands while staging.

FP8 M64 has no such form: ``mma.sync`` with E4M3 inputs exists only from
sm_89 and on sm_90 runs through FP16 (``tests/kernels/tc_claims.py``), and
sm_80 has none; the FP8 arm stays wgmma only, and its build refuses other
devices, saying so.
"""

from __future__ import annotations

import numpy as np
from numba import cuda

from ...common import bits, nvfp4_act
from ...common import launch as L
from ...common import wgmma_gemm as P
from ...common.gemm import mma_sync as G

FORM = "mma.sync"


def kernel(b_kind: str, wgs: int, bn: int):
    return G.kernel("bf16", wgs, bn, b_kind=b_kind)


def build_bf16(shape, wgs: int, bn: int, kern=None):
    """``bf16_v1`` / ``bf16_v2`` on mma.sync: bf16 activations, int4
    weights (fp16 scales per 128) to bf16 as staged."""
    m, n, k = shape["m"], shape["n"], shape["k"]
    run = G.make_launch(m, n, k, kern or kernel("int4_bf16", wgs, bn))  # refuses k % 16 != 0
    rs, cs, ts = P.ones(m), P.ones(n), P.ones(1)

    def launch(bufs):
        run(bufs["c"], bufs["a_bf16"].view(np.uint32), bufs["qweight"], bufs["scales"], rs, cs, ts)

    launch.tensor_cores, launch.tc_dtype = FORM, "bf16"
    return launch


def build_w4a4(shape, wgs: int, bn: int, kern=None):
    """``w4a4`` on mma.sync: activations encoded to NVFP4 (as the wgmma
    form), decoded to bf16, then the NVFP4 weights decoded to bf16 as
    staged; the two tensor scales in the epilogue."""
    m, n, k = shape["m"], shape["n"], shape["k"]
    if k <= 0 or k % bits.NVFP4_BLOCK:
        raise ValueError(f"w4a4: k={k} is not a positive multiple of {bits.NVFP4_BLOCK} (an NVFP4 block)")
    run = G.make_launch(m, n, k, kern or kernel("nvfp4_bf16", wgs, bn))
    quant = nvfp4_act.launcher()
    decode = nvfp4_act.make_decode_bf16()
    threads = L.check_block(nvfp4_act.THREADS)
    grid = L.check_grid(L.blocks_for(m, nvfp4_act.ROWS))
    packed = cuda.device_array((m, k // 2), dtype=np.uint8)
    scales = cuda.device_array((m, k // bits.NVFP4_BLOCK), dtype=np.uint8)
    ts = cuda.device_array(1, dtype=np.float32)
    rowmax = cuda.device_array(m, dtype=np.float32)
    a_bf16 = cuda.device_array((m, k), dtype=np.uint16)
    t = cuda.device_array(1, dtype=np.float32)
    rs, cs = P.ones(m), P.ones(n)

    def launch(bufs):
        quant(packed, scales, ts, rowmax, bufs["a"])
        decode[grid, threads](a_bf16.view(np.uint32), t, packed.view(np.uint32), scales, ts, bufs["w_fp4_ts"])
        run(bufs["c"], a_bf16.view(np.uint32), bufs["w_fp4"].view(np.uint32), bufs["w_fp4_scales"], rs, cs, t)

    launch.workspace = {"packed": packed, "scales": scales, "ts": ts, "rowmax": rowmax, "a_bf16": a_bf16, "t": t}
    launch.tensor_cores, launch.tc_dtype = FORM, "bf16"
    return launch

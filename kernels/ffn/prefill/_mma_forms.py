"""The mma.sync forms of the bf16 arms built on Hopper's wgmma (``bf16_v1``,
``bf16_v2``; ``w4a4`` builds its own from the same mainloops), for GPUs without it (sm_80, and sm_100 and later:
``common/tc.py``'s choice), so those arms run there too.

They run on the mma.sync mainloop (``common/gemm/mma_sync.py``): the
wgmma kernels' stagers (int4 -> bf16, NVFP4 -> bf16, exact or rounded once
as there) into the same 128-byte-swizzled stages of 64 k, three in flight,
each warp its 16 rows of the tile as ``BN / 8`` ``mma.sync`` m16n8k16 bf16
per k16 from ``ldmatrix``, f32 accumulators, fp16 out. The tiles are the arm's own (v1: 64
rows x 128 columns, two warpgroups on its column halves; v2: 128 x 64). The arithmetic is the
wgmma form's: products exact, sums in f32 (in another order), one rounding
to fp16.

FP8 M64 has no such form: ``mma.sync`` with E4M3 inputs exists only from
sm_89 and on sm_90 runs through FP16 (``tests/kernels/tc_claims.py``), and
sm_80 has none; the FP8 arm stays wgmma only, and its build refuses other
devices, saying so.
"""

from __future__ import annotations

import numpy as np

from ...common import wgmma_gemm as P
from ...common.gemm import mma_sync as G

FORM = "mma.sync"


def kernel(b_kind: str, wgs: int, bn: int, wn: int = 1):
    return G.kernel("bf16", wgs, bn, b_kind=b_kind, wn=wn)


def build_bf16(shape, wgs: int, bn: int, kern=None, wn: int = 1):
    """``bf16_v1`` / ``bf16_v2`` on mma.sync: bf16 activations, int4
    weights (fp16 scales per 128) to bf16 as staged."""
    m, n, k = shape["m"], shape["n"], shape["k"]
    run = G.make_launch(m, n, k, kern or kernel("int4_bf16", wgs, bn, wn))  # refuses k % 16 != 0
    rs, cs, ts = P.ones(m), P.ones(n), P.ones(1)

    def launch(bufs):
        run(bufs["c"], bufs["a_bf16"].view(np.uint32), bufs["qweight"], bufs["scales"], rs, cs, ts)

    launch.tensor_cores, launch.tc_dtype = FORM, "bf16"
    return launch

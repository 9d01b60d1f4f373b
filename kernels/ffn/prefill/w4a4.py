"""W4A4 (``fp4_prefill``): NVFP4 weights and NVFP4 activations, the
activations quantised per GEMM (``nvfp4_act``: an E4M3 scale per 16 values
and one float32 tensor scale for the whole activation tensor).

sm_90 has no FP4 tensor cores, so both operands are decoded while they are
staged, exactly: an E2M1 value (two significant bits) times its E4M3 block
scale (four) has at most six significant bits and lies within 2^-10 ..
2688, so it is a bf16 value; the GEMM is then a bf16 one on the project's
mainloop (``common/gemm/``): 64 x 128 tiles, two warpgroups a tile (one a
column half), both operands through the ``nvfp4_bf16`` stager into
128-byte-swizzled stages of 64 k (four in flight on wgmma, 97 KiB; three on
mma.sync, 73 KiB), wgmma m64n64k16 bf16 or ``mma.sync`` m16n8k16 bf16 from
``ldmatrix``, f32
accumulators (products exact, sums f32), and the two tensor scales
multiply the result once, at the store::

    c[r, n] = fp16( (ts_w * ts_a) * sum_k  a4[r, k] * sa[r, k / 16] * w4[n, k] * sw[n, k / 16] )

A 16-byte chunk of a staged row is 8 consecutive k: one 32-bit word of
either operand's packed nibbles (element ``8w + j`` in nibble ``j``) and
one block scale. ``k % 16 == 0``.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
from numba import cuda

from ...common import bits, nvfp4_act, tc
from ...common import wgmma_gemm as P
from ...common.gemm import mma_sync as MS
from ...common.gemm import wgmma_async as G

BN = 128
WGS = WN = 2  # warpgroups a block, both along the tile's columns (``common/gemm/pipeline.py``)
STAGES = 4  # wgmma; mma.sync takes mma_sync.STAGES
KIND = "nvfp4_bf16"  # both operands: E2M1 x E4M3 block scale, exact in bf16


def make_gemm(form: str = tc.WGMMA, bn: int = BN, fault: str = ""):
    """Compile the kernel (the mainloop's ``(c, pa32, pw32, sw, ones_m,
    ones_n, ts_w, sa, ts_a)``) on ``form``; ``fault`` (the mainloop's
    ``FAULTS``, tests only) plants a bug the check must see."""
    if tc.check_form(form) == tc.WGMMA:
        # two blocks an SM (128 registers): unbounded, ptxas 13.5 takes 130, one block an SM
        kern = G.make_kernel("bf16", WGS, bn, STAGES, b_kind=KIND, a_kind=KIND, fault=fault, wn=WN, min_blocks=2)
    else:
        kern = MS.make_kernel("bf16", WGS, bn, b_kind=KIND, a_kind=KIND, fault=fault, wn=WN)
    kern.tile_n = bn
    return kern


@lru_cache(maxsize=None)
def kernel(form: str = tc.WGMMA, bn: int = BN):
    return make_gemm(form, bn)


def supports(k: int) -> str:
    if k <= 0 or k % bits.NVFP4_BLOCK:
        return f"k={k} is not a positive multiple of {bits.NVFP4_BLOCK} (an NVFP4 block)"
    return ""


def build(shape, kern=None, form: str | None = None):
    """On wgmma (Hopper, and the simulator) or, on a GPU without it,
    mma.sync from the same stages (``form``: tests pass it)."""
    form = tc.check_form(form or (kern.form if kern is not None else tc.current()))
    m, n, k = shape["m"], shape["n"], shape["k"]
    why = supports(k)
    if why:
        raise ValueError(f"w4a4: {why}")
    kern = kern or kernel(form)
    run = G.make_launch(m, n, k, kern)
    quant = nvfp4_act.launcher()
    packed = cuda.device_array((m, k // 2), dtype=np.uint8)
    scales = cuda.device_array((m, k // bits.NVFP4_BLOCK), dtype=np.uint8)
    ts = cuda.device_array(1, dtype=np.float32)
    rowmax = cuda.device_array(m, dtype=np.float32)
    rs, cs = P.ones(m), P.ones(n)

    def launch(bufs):
        quant(packed, scales, ts, rowmax, bufs["a"])
        w = bufs["w_fp4"].view(np.uint32)
        run(bufs["c"], packed.view(np.uint32), w, bufs["w_fp4_scales"], rs, cs, bufs["w_fp4_ts"], scales, ts)

    launch.workspace = {"packed": packed, "scales": scales, "ts": ts, "rowmax": rowmax}
    launch.tensor_cores = kern.form
    launch.tc_dtype = "bf16"
    return launch


build.forms = tc.FORMS


def launches(shape) -> int:
    """Encode (two launches) and the GEMM, on either form."""
    return 3

"""``attention.proj_bf16_tc`` variant ``fp8_e4m3`` (Atlas's default): the
activations crushed to FP8 E4M3 with one saturating scale per token
(``_proj_prep.quant_e4m3_rows``; the per-token scale is this project's
choice), the NVFP4 weights staged as E4M3 (``e2m1 x scale x 2^-3`` rounded
to nearest), 64 x 128 tiles on two warpgroups (one a column half, wgmma
m64n64k32 e4m3 each) with f32 accumulators; the token's scale,
the tensor scale and the 2^3 in the epilogue; float32 out.

Two launches: the crush, then the GEMM. The crush's codes and scales are
device scratch (``launch.workspace``). Its error, against the float64
product of the unquantised activations, is the FP8 perturbation that
bf16_tc_proj removes (the records' error fields).
"""

from __future__ import annotations

import numpy as np
from numba import cuda

from ...common import wgmma_gemm as P
from ...common.gemm import wgmma_async as G
from .. import _proj_prep

NAME = "fp8_e4m3"
SUMMARY = "activations crushed to FP8 E4M3 per token, NVFP4 weights as E4M3, wgmma e4m3 64 x 128 tiles"
# two warpgroups along BN; registers for two blocks an SM (its 99 KiB of stages let two reside)
TILE = dict(dtype="e4m3", b_kind="nvfp4_e4m3", wgs=2, bn=128, wn=2, min_blocks=2)
STAGES = 4  # the asynchronous mainloop (common/gemm/wgmma_async.py), four stages of 128 bytes of K
LAUNCHES = 2


def build(shape, kern=None, quant=None):
    P.require_wgmma(NAME)
    m, n, k = shape["m"], shape["n"], shape["k"]
    kern = kern or G.kernel_for(TILE, STAGES, "wgmma")
    run = G.make_launch(m, n, k, kern)
    crush = _proj_prep.quant_launch(m, k, quant)
    xq = cuda.device_array((m, k), np.uint8)
    xs = cuda.device_array(m, np.float32)
    cs = P.ones(n)

    def launch(bufs):
        crush(xq, xs, bufs["x"])
        run(bufs["y"], xq.view(np.uint32), bufs["w_packed"].view(np.uint32), bufs["w_scales"], xs, cs, bufs["w_ts"])

    launch.tensor_cores, launch.tc_dtype = "wgmma", "e4m3"
    launch.workspace = {"x_e4m3": xq, "x_scale": xs}
    return launch

"""``attention.proj_bf16_tc`` variant ``bf16_tc`` (Atlas, bf16_tc_proj on):
the NVFP4 projection weights dequantised to BF16 as they are staged (exact:
E2M1 x E4M3 fits BF16) and the bf16 activations as they are, through
wgmma m64n128k16 bf16 with f32 accumulators; the per-tensor scale in the
epilogue; float32 out. The only error is fp32 accumulation.
"""
from __future__ import annotations

import numpy as np

from . import _proj_wgmma as P

NAME = "bf16_tc"
SUMMARY = "NVFP4 weights dequantised to BF16, bf16 activations, wgmma bf16 64 x 128 tiles"
TILE = dict(dtype="bf16", b_kind="nvfp4_bf16", wgs=1, bn=128, chunks=8)


def build(shape, kern=None):
    P.require_wgmma(NAME)
    m, n, k = shape["m"], shape["n"], shape["k"]
    kern = kern or P.kernel(*TILE.values())
    run = P.make_launch(m, n, k, kern)
    rs, cs = P.ones(m), P.ones(n)

    def launch(bufs):
        run(bufs["y"], bufs["x"].view(np.uint32), bufs["w_packed"].view(np.uint32), bufs["w_scales"],
            rs, cs, bufs["w_ts"])

    launch.tensor_cores, launch.tc_dtype = "wgmma", "bf16"
    return launch

"""``attention.proj_bf16_tc_w4a16`` variant ``bf16_n128`` (Metrale,
bf16_tc_proj on): the W4A16 BF16 tensor-core GEMM with 128 x 128 tiles
(two warpgroups, each 64 rows of tokens, sharing a 128-column weight
tile; K stages of 32, two in flight, 32 KiB of shared memory). The int4
weights are dequantised to BF16 as they are staged (``(q - 8) x fp16
scale`` rounded to BF16: up to 2^-9 relative per weight, the error this
path adds besides fp32 accumulation and the fp16 output); bf16
activations as they are. Without wgmma each warp runs its 16 rows on
mma.sync m16n8k16 bf16 from the same staged tiles.
"""

from __future__ import annotations

import numpy as np

from ...common import tc
from ...common import wgmma_gemm as P

NAME = "bf16_n128"
SUMMARY = "W4A16 BF16 tensor-core GEMM, 128 x 128 tiles (two warpgroups), wgmma bf16"
TILE = dict(dtype="bf16", b_kind="int4_bf16", wgs=2, bn=128, chunks=4)


def build(shape, kern=None, form: str | None = None):
    """On wgmma (Hopper, and the simulator) or, elsewhere, mma.sync
    m16n8k16 bf16 on the same staged tiles (``form``: tests pass it)."""
    form = tc.check_form(form or (kern.form if kern is not None else tc.current()))
    m, n, k = shape["m"], shape["n"], shape["k"]
    kern = kern or P.kernel(*TILE.values(), form=form)
    run = P.make_launch(m, n, k, kern)
    rs, cs, ts = P.ones(m), P.ones(n), P.ones(1)

    def launch(bufs):
        run(bufs["y"], bufs["x"].view(np.uint32), bufs["qweight"], bufs["scales"], rs, cs, ts)

    launch.tensor_cores, launch.tc_dtype = kern.form, "bf16"
    return launch


build.forms = tc.FORMS

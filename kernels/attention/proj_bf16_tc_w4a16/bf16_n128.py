"""``attention.proj_bf16_tc_w4a16`` variant ``bf16_n128`` (Metrale,
bf16_tc_proj on): the W4A16 BF16 tensor-core GEMM with 128 x 128 tiles
(two warpgroups, each 64 rows of tokens, sharing a 128-column weight
tile; on wgmma four K stages of 64 in 129 KiB of dynamic shared memory,
the activations copied by TMA, the weights staged from registers
into 128-byte-swizzled tiles, ``common/gemm/wgmma_async.py``; the mma.sync
form, ``common/gemm/mma_sync.py``, three of the same stages in 97 KiB, read
by ``ldmatrix``). The int4
weights are dequantised to BF16 as they are staged (``(q - 8) x fp16
scale`` rounded to BF16: up to 2^-9 relative per weight, the error this
path adds besides fp32 accumulation and the fp16 output); bf16
activations as they are. Without wgmma each warp runs its 16 rows on
mma.sync m16n8k16 bf16 from the same staged tiles.
"""

from __future__ import annotations

import numpy as np

from ...common import tc
from ...common.gemm import wgmma_async as G

NAME = "bf16_n128"
SUMMARY = "W4A16 BF16 tensor-core GEMM, 128 x 128 tiles (two warpgroups), wgmma bf16"
TILE = dict(dtype="bf16", b_kind="int4_bf16", wgs=2, bn=128)  # either form: type, warpgroups, BN, B stager
STAGES = 4  # wgmma: the asynchronous mainloop, four stages of 128 bytes of K (129 KiB)


def build(shape, kern=None, form: str | None = None):
    """On wgmma (Hopper, and the simulator) or, elsewhere, mma.sync
    m16n8k16 bf16 on the same staged tiles (``form``: tests pass it)."""
    form = tc.check_form(form or (kern.form if kern is not None else tc.current()))
    m, n, k = shape["m"], shape["n"], shape["k"]
    kern = kern or G.kernel_for(TILE, STAGES, form)
    run = G.unscaled(G.make_launch(m, n, k, kern), m, n)

    def launch(bufs):
        run(bufs["y"], bufs["x"].view(np.uint32), bufs["qweight"], bufs["scales"])

    launch.tensor_cores, launch.tc_dtype = kern.form, "bf16"
    return launch


build.forms = tc.FORMS

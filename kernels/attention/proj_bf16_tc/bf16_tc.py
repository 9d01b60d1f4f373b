"""``attention.proj_bf16_tc`` variant ``bf16_tc`` (Atlas, bf16_tc_proj on):
the NVFP4 projection weights dequantised to BF16 as they are staged (exact:
E2M1 x E4M3 fits BF16) and the bf16 activations as they are, 64 x 128
tiles on two warpgroups, one a column half, each through wgmma m64n64k16
bf16 (without wgmma: mma.sync m16n8k16 bf16, each warp its 16 rows and its
warpgroup's columns of the same staged tiles) with f32 accumulators; the
per-tensor scale in the epilogue; float32 out. The only error is fp32 accumulation.
On wgmma the activations are copied by TMA (``cp.async`` on mma.sync) and
the weights staged from registers into four 128-byte-swizzled stages
(``common/gemm/wgmma_async.py``).
"""

from __future__ import annotations

import numpy as np

from ...common import tc
from ...common import wgmma_gemm as P
from ...common.gemm import wgmma_async as G

NAME = "bf16_tc"
SUMMARY = "NVFP4 weights dequantised to BF16, bf16 activations, wgmma bf16 64 x 128 tiles"
# either form: type, warpgroups (wn of them along BN), BN, B stager
TILE = dict(dtype="bf16", b_kind="nvfp4_bf16", wgs=2, bn=128, wn=2)
STAGES = 4  # wgmma: the asynchronous mainloop, four stages of 128 bytes of K


def build(shape, kern=None, form: str | None = None):
    """On wgmma (Hopper, and the simulator) or, elsewhere, mma.sync
    m16n8k16 bf16 on the same staged tiles (``form``: tests pass it)."""
    form = tc.check_form(form or (kern.form if kern is not None else tc.current()))
    m, n, k = shape["m"], shape["n"], shape["k"]
    kern = kern or G.kernel_for(TILE, STAGES, form)
    run = G.make_launch(m, n, k, kern)
    rs, cs = P.ones(m), P.ones(n)

    def launch(bufs):
        run(
            bufs["y"],
            bufs["x"].view(np.uint32),
            bufs["w_packed"].view(np.uint32),
            bufs["w_scales"],
            rs,
            cs,
            bufs["w_ts"],
        )

    launch.tensor_cores, launch.tc_dtype = kern.form, "bf16"
    return launch


build.forms = tc.FORMS

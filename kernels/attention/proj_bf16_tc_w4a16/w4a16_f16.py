"""``attention.proj_bf16_tc_w4a16`` variant ``w4a16_f16`` (Metrale's
default projection path). The seed names only the lever's kernel; for the
default this project runs its own fp16-activation W4A16 tensor-core GEMM
(``w4a16/gemm_tc.py``, default tiles: wgmma 64 x 128 on Hopper, mma.sync
elsewhere) after converting the bf16 activations to fp16
(``_proj_prep.bf16_to_f16``). Its error: weights rounded to fp16 (2^-11),
fp32 accumulation, fp16 output.
"""

from __future__ import annotations

import numpy as np
from numba import cuda

from ...common import tc
from ...w4a16.gemm import gemm_tc
from .. import _proj_prep

NAME = "w4a16_f16"
SUMMARY = "bf16 activations converted to fp16, then the W4A16 fp16 tensor-core GEMM (default tiles)"
LAUNCHES = 2


def build(shape, form: str | None = None):
    m, k = shape["m"], shape["k"]
    gemm = gemm_tc.build("default", shape, form)
    convert = _proj_prep.convert_launch(m, k)
    x16 = cuda.device_array((m, k), np.float16)

    def launch(bufs):
        convert(x16, bufs["x"])
        gemm({"c": bufs["y"], "a": x16, "qweight": bufs["qweight"], "scales": bufs["scales"]})

    launch.tensor_cores, launch.tc_dtype = gemm.tensor_cores, gemm.tc_dtype
    launch.workspace = {"x_f16": x16}
    return launch


build.forms = tc.FORMS

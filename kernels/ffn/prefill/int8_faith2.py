"""int8 faith2: the int8 arm's first tiling. Activations requantised to int8
per row (``common.rowquant``), then ``_int8_mma``'s s8 tensor-core GEMM with
blocks of two warps (32 rows x 16 columns) and K stages of 32."""

from __future__ import annotations

from ...common import rowquant as _rowquant
from . import _int8_mma

WARPS_M, WARPS_N, K_STEPS = 2, 1, 1


def build_with(shape, warps_m: int, warps_n: int, k_steps: int, k_limit: int = 0):
    import numpy as np
    from numba import cuda

    m, k = shape["m"], shape["k"]
    requant = _rowquant.launcher("int8")
    gemm = _int8_mma.launcher(warps_m, warps_n, k_steps, k_limit)
    aq = cuda.device_array((m, k), dtype=np.int8)
    sa = cuda.device_array(m, dtype=np.float32)

    def launch(bufs):
        requant(aq, sa, bufs["a"])
        gemm(bufs["c"], aq, sa, bufs["w_i8"], bufs["s_i8"])

    launch.workspace = {"aq": aq, "sa": sa}
    launch.tensor_cores = "mma.sync"
    launch.tc_dtype = "s8"
    return launch


def build(shape):
    return build_with(shape, WARPS_M, WARPS_N, K_STEPS)

"""int8 faith2: the int8 arm's first tiling. Activations requantised to int8
per row (``common.rowquant``), then the s8 GEMM on the project's mma.sync
mainloop (``common/gemm/mma_sync.py``): 64 x 64 tiles, two warpgroups a
tile (one a column half, 16 x 32 of it a warp), both int8 operands copied
by ``cp.async`` into 128-byte-swizzled stages of 128 k (three in flight,
49 KiB), read by ``ldmatrix`` into ``mma.sync.m16n8k32`` s8 with s32
accumulators, and the epilogue ``c = fp16((acc * sa[row]) * sw[col])``.

Integer sums are exact and the products of 127 x 127 over any real ``k``
stay far inside s32 (12288 x 16129 < 2^28), so every tiling and K order
gives the same ``acc``, and the epilogue is the same float32 expression:
faith5's outputs are bitwise these (the tests hold it). ``k % 16 == 0``
(a row of int8 starts on 16 bytes for the asynchronous copies)."""

from __future__ import annotations

from ...common import rowquant as _rowquant

WGS, BN, WN = 2, 64, 2  # two warpgroups, both along the 64 columns


def kernel(wgs: int, bn: int, fault: str = "", wn: int = 1):
    from ...common.gemm import mma_sync as MS

    return MS.make_kernel("s8", wgs, bn, fault=fault, wn=wn) if fault else MS.kernel("s8", wgs, bn, wn=wn)


def build_with(shape, wgs: int, bn: int, fault: str = "", wn: int = 1):
    """The requantisation and the GEMM on ``wgs`` warpgroups (``wn`` of
    them along the columns) x ``bn`` columns; ``fault`` (the mainloop's
    ``FAULTS``, tests only) plants a bug the check must see."""
    import numpy as np
    from numba import cuda

    from ...common import wgmma_gemm as P
    from ...common.gemm import mma_sync as MS

    m, n, k = shape["m"], shape["n"], shape["k"]
    requant = _rowquant.launcher("int8")
    gemm = MS.make_launch(m, n, k, kernel(wgs, bn, fault, wn))  # refuses k % 16 != 0
    aq = cuda.device_array((m, k), dtype=np.int8)
    sa = cuda.device_array(m, dtype=np.float32)
    ts = P.ones(1)

    def launch(bufs):
        requant(aq, sa, bufs["a"])
        w = bufs["w_i8"]
        gemm(bufs["c"], aq.view(np.uint32), w.view(np.uint32), w, sa, bufs["s_i8"], ts)

    launch.workspace = {"aq": aq, "sa": sa}
    launch.tensor_cores = "mma.sync"
    launch.tc_dtype = "s8"
    return launch


def build(shape):
    return build_with(shape, WGS, BN, wn=WN)

"""The wgmma (sm_90a) mainloop: ``pipeline.py``'s stages read by
``wgmma.mma_async`` through mode-1 (128-byte swizzle) descriptors, one
warpgroup per 64 rows of A, the accumulators tied to the wait
(``wgmma.wait_acc``), the copied operands by TMA (:data:`COPY`). Per
stage: ``fence.proxy.async`` before the barrier that publishes it (the
register stores of a staged operand, and ``cp.async`` copies, are
generic-proxy writes; the tensor cores read through the async proxy), then
``wgmma.fence``, four instructions (k16 bf16/f16, k32 E4M3) per stage,
``commit``, and the wait after a register-staged B's stores.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from .. import swizzle as sw
from .. import wgmma as wg
from .. import wgmma_gemm as P
from ..launch import device_inline
from . import pipeline as PL
from .pipeline import CHUNKS, FAULTS, KSUB, STAGE_KBYTES, STEP, make_launch, shared_bytes, tile_rows  # noqa: F401

BM = wg.M
DTYPES = ("bf16", "f16", "e4m3")
# How this form's copied operands (those that need no transform, not
# gathered) reach shared memory when a kernel names no way: by TMA, one
# instruction a stage's tile, the warps' registers and issue slots left to
# the MMAs and the stagers (``pipeline.COPIES``; ``use_copy`` changes it for
# the kernels built after it: ``scripts/gemm-tile-ab.py`` names it instead).
COPY = "tma"
_copy = [COPY]


def use_copy(copy: str) -> None:
    """Build the kernels that name no copy from now on with ``copy``
    (``tma`` or ``cp.async``). Called before a process builds its first
    kernel, it sets every variant's way; a variant's kernel built already
    stays in its family's own cache as it was."""
    if copy not in PL.COPIES:
        raise ValueError(f"copies by {copy!r}: one of {', '.join(PL.COPIES)}")
    _copy[0] = copy


def copy_for(a_kind: str, b_kind: str, copy: str | None = None) -> str:
    """The way a kernel's copied operands travel: ``copy``, else the form's
    (:func:`use_copy`); ``cp.async`` where nothing is copied (both operands
    staged from registers: no copy to make)."""
    copy = copy or _copy[0]
    return copy if "copy" in (a_kind, b_kind) else "cp.async"


class Form:
    """How the wgmma mainloop reads a stage (``pipeline.make_kernel``'s ``form``)."""

    name = "wgmma"
    publish = wg.fence_proxy_async

    @staticmethod
    def zeros(bn: int):
        return wg.zeros(bn)

    @staticmethod
    def t_mul(b_kind: str):
        return np.float32(1.0 / float(P.E4M3_FOLD) if b_kind == "nvfp4_e4m3" else 1.0)

    @staticmethod
    def consume(dtype: str, bn: int, dropped: int, swizzle: bool = True):
        """``consume(at_a, at_b, acc)``: the stage's K on this warpgroup's 64
        rows of A (at byte ``at_a`` of the shared window) and ``bn`` rows of
        B (at ``at_b``)."""
        if not swizzle:
            raise ValueError("wgmma reads its stages through 128-byte-swizzle descriptors")
        mma = wg.op(dtype, bn)
        if dtype == "e4m3":

            @device_inline
            def step(da, db, acc):
                return mma(da, db, acc, 1, 1, 1)
        else:

            @device_inline
            def step(da, db, acc):
                return mma(da, db, acc, 1, 1, 1, 0, 0)

        @device_inline
        def consume(at_a, at_b, acc):
            wg.wgmma_fence()
            for j in range(KSUB):
                if j != dropped:
                    da = wg.make_desc(at_a + j * STEP, 16, sw.SBO, wg.SWIZZLE_128B)
                    db = wg.make_desc(at_b + j * STEP, 16, sw.SBO, wg.SWIZZLE_128B)
                    acc = step(da, db, acc)
            wg.wgmma_commit_group()
            return acc

        return consume

    @staticmethod
    @device_inline
    def settle(acc):
        return wg.wait_acc(0, acc)


def make_kernel(
    dtype: str,
    wgs: int,
    bn: int,
    stages: int,
    swap: bool = False,
    b_kind: str = "copy",
    fault: str = "",
    stage_b=None,
    fold=None,
    a_kind: str = "copy",
    wn: int = 1,
    min_blocks: int = 1,
    copy: str | None = None,
):
    """``kernel(y, a32, b32, bsc, rs, cs, ts, asc, ts_a)``, launched by
    :func:`make_launch`. ``copy`` (:func:`copy_for`): the operands that
    need no transform go by TMA (``tma``; the kernel then takes their
    tensor maps last, ``kernel(..., ts_a, tm)``, which the launch makes)
    or by ``cp.async``. With ``b_kind`` other than ``copy``, B goes
    through ``wgmma_gemm``'s stager of that kind (a transform on the way
    in: NVFP4 or int4 weights with their scales ``bsc``), writing the same
    swizzled layout from registers while the tensor cores work; ``a_kind``
    likewise for A (its scales ``asc``; W4A4's NVFP4 activations), which
    is otherwise copied asynchronously. The epilogue multiplies by
    ``rs[row] * cs[col] * ts[0] * ts_a[0]``.
    ``fault`` and ``stage_b`` (a stager of one's own) are for the tests
    that plant a bug (:data:`FAULTS`, a wrong block scale).

    ``fold`` is the per-stage hook: ``fold(total, stage, bsc, n, n0, kt)``
    returns the running f32 sums with the stage's accumulators (started
    from zero each stage) folded in, after the stage's MMAs are waited
    for; the epilogue then stores ``total``. A ``fold`` that is an object
    with ``side_bytes``, ``stager`` and ``fold(bn)`` reads its scales from
    per-stage tables in shared memory instead (``pipeline.side_stager``:
    put by its stager an iteration ahead, as the operands are). The FP8
    arm folds with each column's group scale from such a table (a stage
    is one scale group), as DeepGEMM promotes its FP8 sums to FP32
    CUDA-core registers: the tensor cores' FP8 accumulator is narrower
    than FP32.

    ``wn`` of the ``wgs`` warpgroups lie along BN (``pipeline``'s
    geometry): ``wgs = wn = 2`` is one 64-row tile on two consumer
    warpgroups, each issuing m64 x ``BN / 2`` instructions on its half.
    ``min_blocks`` is the launch bound's resident blocks an SM: ptxas keeps
    the registers within what that many blocks can have (an arm whose
    shared memory lets two blocks reside asks for two)."""
    PL.check(dtype, bn, stages, b_kind, fault, DTYPES, a_kind, wgs, wn)
    wg.check_shape(dtype, bn // wn)
    return PL.make_kernel(
        Form,
        dtype,
        wgs,
        bn,
        stages,
        swap,
        b_kind,
        fault,
        stage_b,
        fold,
        a_kind,
        wn=wn,
        min_blocks=min_blocks,
        copy=copy_for(a_kind, b_kind, copy),
    )


_kernel = lru_cache(maxsize=None)(make_kernel)  # compiled once per geometry and way of copying


def kernel(*args, copy: str | None = None, **kw):
    """:func:`make_kernel`, built once per set of arguments (``copy``
    resolved first: a kernel built before :func:`use_copy` is not reused
    after it)."""
    return _kernel(*args, copy=copy or _copy[0], **kw)


def unscaled(run, rows_a: int, rows_b: int):
    """``launch(y, a32, b32, bsc)``: ``run`` (a launch of this module's or of
    ``wgmma_gemm``'s) for a GEMM whose epilogue has no scale to apply; its
    ``rs``, ``cs`` and ``ts`` are ones, which multiply exactly."""
    rs, cs, ts = P.ones(rows_a), P.ones(rows_b), P.ones(1)

    def launch(y, a32, b32, bsc):
        run(y, a32, b32, bsc, rs, cs, ts)

    return launch


def kernel_for(tile: dict, stages: int, form: str):
    """A projection variant's kernel on ``form``: this module's, ``stages``
    deep, on wgmma; ``mma_sync``'s (its own stage count) on mma.sync; the
    tile's type, warpgroups, BN, B stager and ``swap`` either way."""
    from .. import tc
    from . import mma_sync

    geo = (tile["dtype"], tile["wgs"], tile["bn"])
    swap, b_kind, wn = tile.get("swap", False), tile.get("b_kind", "copy"), tile.get("wn", 1)
    if tc.check_form(form) == tc.WGMMA:  # (its launch bound: the tile's ``min_blocks``, where it names one)
        return kernel(*geo, stages, swap, b_kind=b_kind, wn=wn, min_blocks=tile.get("min_blocks", 1))
    return mma_sync.kernel(*geo, mma_sync.STAGES, swap, b_kind, wn=wn)


def token_tile_build(name: str, tile: dict):
    """``build(shape, kern=None)`` of an FP8 projection variant whose tokens
    sit on wgmma's N side (``y^T = W x^T``, ``tile["swap"]``): the m16 and
    m32 tilings differ only in ``tile`` (:func:`kernel`'s arguments)."""

    def build(shape, kern=None):
        P.require_wgmma(name)
        m, n, k = shape["m"], shape["n"], shape["k"]
        run = make_launch(n, m, k, kern or kernel(**tile))
        ts = P.ones(1)

        def launch(bufs):
            run(
                bufs["y"],
                bufs["w8"].view(np.uint32),
                bufs["x8"].view(np.uint32),
                bufs["w_scale"],
                bufs["w_scale"],
                bufs["x_scale"],
                ts,
            )

        launch.tensor_cores, launch.tc_dtype = "wgmma", "e4m3"
        return launch

    return build

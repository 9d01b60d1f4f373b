"""The mma.sync (sm_80 and later) mainloop: ``pipeline.py``'s stages --
``cp.async`` copies into 128-byte-swizzled K-major tiles, several in
flight -- read with ``ldmatrix`` and multiplied by ``mma.sync``, for GPUs
without wgmma (``common/tc.py``'s choice) and the integer GEMMs.

Each warp of a warpgroup takes 16 of its 64 rows and all ``BN`` columns,
so the accumulators are a tuple in wgmma's layout (``wgmma.acc_elem``) and
the epilogues are the wgmma loop's. Per 32 bytes of K (one m16n8k16
bf16/f16 or m16n8k32 s8 step) a warp issues:

* one ``ldmatrix.x4`` for its A fragment: lane ``L`` points at row
  ``L % 16`` of its 16, K bytes ``16 (L >> 4)`` (matrices 0..3 = a0..a3);
* ``BN / 16`` ``ldmatrix.x4`` for B: lane ``L`` at B row ``L % 8 + 8 (L >>
  4)`` of each 16, K bytes ``16 ((L >> 3) & 1)`` (matrices: b0, b1 of the
  first 8 columns, then of the next 8); the 16-row groups are 2048 bytes
  apart, which leaves the swizzle's row bits alone, so one address per
  lane serves every group;
* ``BN / 8`` MMAs sharing the A fragment (``mma.mma_run``).

The decode tile (``pipeline.DECODE_M``, :meth:`Form.consume_split`): the
A tile is 16 rows, every warp reads all of them (lane ``L`` at row ``L %
16``) and only its own K step of the stage (warp ``w``: step ``w``).

Every ``ldmatrix`` row is one 16-byte chunk at its swizzled place: the
eight rows of one matrix are eight consecutive tile rows at the same K, so
the 128-byte swizzle puts them in eight different 16-byte bank groups
(conflict-free; the same rows unswizzled would all sit in one).

Nothing here needs the async proxy (``ldmatrix`` reads shared memory as
ordinary loads), so no fence is issued and the loop assembles for sm_80.
The shared memory of the tiles used stays within 99 KiB
(:data:`MAX_SHARED`, the smallest opt-in maximum of the GPUs this form
serves: sm_86 and sm_89).
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
from numba import cuda

from .. import mma as M
from .. import wgmma as wg
from ..launch import device_inline
from . import pipeline as PL
from .pipeline import KSUB, STAGE_KBYTES, STEP, make_launch, tile_rows  # noqa: F401

DTYPES = ("bf16", "f16", "s8")
STAGES = 3
MAX_SHARED = 99 * 1024
GROUP_BYTES = 16 * STAGE_KBYTES  # 16 tile rows: one B ldmatrix.x4 to the next


@device_inline
def _nothing():
    pass


@device_inline
def _same(acc):
    return acc


class Form:
    """How the mma.sync mainloop reads a stage (``pipeline.make_kernel``'s ``form``)."""

    name = "mma.sync"
    publish = _nothing
    settle = _same

    @staticmethod
    def zeros(bn: int):
        return wg.zeros(bn)

    @staticmethod
    def t_mul(b_kind: str):
        return np.float32(1.0)

    @staticmethod
    def fragments(bn: int, swizzle: bool = True, split: bool = False):
        """``frags(at_a, at_b, j) -> (a, b)``: this warp's A fragment (its 16
        of the warpgroup's 64 rows at byte ``at_a``; ``split``: the decode
        tile's 16 rows, the same in every warp) and B registers (the
        warpgroup's ``bn`` columns at byte ``at_b``) for K step ``j`` of the
        stage, by ``ldmatrix`` from the swizzled rows (both bases on 1024
        bytes, so a row's swizzle is its own row bits)."""
        load_a = M.ldsm_run(1, 16)
        load_b = M.ldsm_run(bn // 16, GROUP_BYTES)
        mask = 7 if swizzle else 0  # unswizzled (a test's fault): chunk c of every row in one bank group

        @device_inline
        def frags(at_a, at_b, j):
            lane = cuda.threadIdx.x & 31
            if split:
                a_row = lane & 15
            else:
                a_row = 16 * ((cuda.threadIdx.x >> 5) & 3) + (lane & 15)
            a_k = (lane >> 4) * 16
            b_row = (lane & 7) + ((lane >> 4) << 3)
            b_k = ((lane >> 3) & 1) * 16
            # the 128-byte swizzle: chunk bits 4-6 XOR row bits 0-2 (swizzle.sw128)
            a = load_a(at_a + ((a_row * STAGE_KBYTES + j * STEP + a_k) ^ ((a_row & mask) << 4)))
            b = load_b(at_b + ((b_row * STAGE_KBYTES + j * STEP + b_k) ^ ((b_row & mask) << 4)))
            return a, b

        return frags

    @classmethod
    def consume(cls, dtype: str, bn: int, dropped: int, swizzle: bool = True):
        run = M.mma_run(dtype, bn)
        frags = cls.fragments(bn, swizzle)

        @device_inline
        def consume(at_a, at_b, acc):
            for j in range(KSUB):
                if j != dropped:
                    a, b = frags(at_a, at_b, j)
                    acc = run(a, b, acc)
            return acc

        return consume

    @classmethod
    def consume_split(cls, dtype: str, bn: int, dropped: int, swizzle: bool = True):
        """The decode tile's (``pipeline.DECODE_M``): the four warps on the
        same 16 rows and ``bn`` columns, warp ``w`` the stage's K step ``w``
        only (``KSUB`` steps, one a warp: split-K inside the block, the
        pipeline's ``make_reduce`` summing the warps at the end)."""
        run = M.mma_run(dtype, bn)
        frags = cls.fragments(bn, swizzle, split=True)

        @device_inline
        def consume(at_a, at_b, acc):
            j = (cuda.threadIdx.x >> 5) & 3  # this warp's K step: the same in all its lanes
            if j != dropped:
                a, b = frags(at_a, at_b, j)
                acc = run(a, b, acc)
            return acc

        return consume

    @classmethod
    def consume_steps(cls, dtype: str, bn: int, step_fold, swizzle: bool = True):
        """``consume_steps(at_a, at_b, total, fx, kt) -> total``: each K
        step's MMAs from zero, folded into the f32 running sums by
        ``step_fold(total, acc, fx, step)`` (``step`` counted along K from 0;
        ``fx`` the shared array, the byte offset of this stage's scale
        tables, and the table rows of the warpgroup's first row of A and
        first column of B): the MMQ arms' per-block scales."""
        run = M.mma_run(dtype, bn)
        frags = cls.fragments(bn, swizzle)
        zeros = wg.zeros(bn, integer=dtype == "s8")

        @device_inline
        def consume_steps(at_a, at_b, total, fx, kt):
            for j in range(KSUB):
                a, b = frags(at_a, at_b, j)
                total = step_fold(total, run(a, b, zeros()), fx, kt * KSUB + j)
            return total

        return consume_steps


class IntForm(Form):
    """The s8 form: int32 accumulators."""

    @staticmethod
    def zeros(bn: int):
        return wg.zeros(bn, integer=True)


def make_kernel(
    dtype: str,
    wgs: int,
    bn: int,
    stages: int = STAGES,
    swap: bool = False,
    b_kind: str = "copy",
    fault: str = "",
    stage_b=None,
    fold=None,
    a_kind: str = "copy",
    step_fold=None,
    wn: int = 1,
    min_blocks: int = 1,
):
    """``kernel(y, a32, b32, bsc, rs, cs, ts, asc, ts_a)``, as
    ``wgmma_async``'s (the same arguments, stagers, fold hook, faults,
    warpgroups along BN and launch bound), on mma.sync; ``dtype``
    bf16, f16 or s8 (int32 accumulators: the epilogue's products are f32
    of the int32 sums, each exact below 2^24). ``step_fold`` (MMQ:
    ``common/gemm/mmq.py``) folds each K step's accumulators into f32
    running sums with per-block scales; the epilogue stores those."""
    PL.check(dtype, bn, stages, b_kind, fault, DTYPES, a_kind, wgs, wn)
    if (bn // wn) % 16:
        raise ValueError(f"mma.sync GEMM: a warpgroup's {bn // wn} columns: not a multiple of 16 (a B ldmatrix.x4)")
    rows = PL.tile_rows(wgs, wn)
    nbytes = PL.shared_bytes(wgs, bn, stages, rows) + PL.table_bytes(fold, step_fold, stages, rows, bn)
    if nbytes > MAX_SHARED:
        raise ValueError(f"mma.sync GEMM: {nbytes} bytes of shared memory exceed {MAX_SHARED}")
    form = IntForm if dtype == "s8" else Form
    return PL.make_kernel(
        form, dtype, wgs, bn, stages, swap, b_kind, fault, stage_b, fold, a_kind, step_fold, wn, min_blocks
    )


kernel = lru_cache(maxsize=None)(make_kernel)  # compiled once per geometry

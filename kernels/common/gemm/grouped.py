"""Grouped GEMMs on ``pipeline.py``'s mainloop: rows sorted by group (an
MoE's experts), each group against its own B::

    y[p, c] = epilogue( sum_k A[row(p), k] B[e(p)][c, k] )   for rows p of group e

``off[E + 1]`` holds the groups' row ranges (group ``e``: rows ``off[e] ..
off[e + 1] - 1``), ``B`` and its block scales are 3-D (``[E, n, ...]``:
the block slices ``b32[e]``, ``bsc[e]`` and hands them to the mainloop as
the plain GEMM's 2-D B). A tile is ``64 WG / WN`` rows (or the decode tile's 16)
of one group (a tile
never straddles two: its rows past ``off[e + 1]`` are zero-filled and not
stored) by ``BN / b_parts`` output columns. The plug-ins, all of them
``pipeline.make_mainloop``'s:

* ``gather``: A's row of sorted row ``p`` is ``rowmap[p]`` (an MoE's
  gate/up reads each token's activations in place);
* ``b_parts = 2``: the tile's B rows are output columns ``n0 ..`` and
  ``N + n0 ..`` (gate and up weights), the two halves of the accumulators
  (on two warpgroups along BN, ``wn = 2``, each warpgroup's: its half of
  the gate columns and the same half of the up columns);
* ``epilogue(y, ep, acc, row0, row_end, n0, ncols, e)``: what each thread
  does with its accumulators (rows ``row0 ..`` of its warpgroup, below
  ``row_end``; columns ``n0 ..`` below ``ncols``; group ``e``), ``ep`` a
  tuple of its arrays; :func:`scaled_store` by default.

The decode tile (``tile_m = DECODE_M``, ``kernel.decode()``): at decode a
group holds 1-8 rows, so a 64-row tile computes mostly zero rows and its
registers (162 a thread gated) hold three blocks an SM, while what the GEMM
must do is stream each routed group's B once. The decode tile is 16 rows
(mma.sync m16n8k16's M, the fewest a tensor-core instruction takes) by the
same ``BN``, one warpgroup: each warp runs one 32-byte K step of every stage
on all 16 rows and ``BN`` columns (split-K inside the block; see
``pipeline.DECODE_M``), warp 0 holds the sums and alone runs the epilogue.
A stage is ``(16 + BN) x 128`` bytes, a B stager deals each row's chunks to
consecutive lanes, and the launch bound is :data:`DECODE_MIN_BLOCKS` blocks
an SM. :func:`make_launch` takes it where the groups average at most
:data:`DECODE_MEAN` rows (:func:`decode_shaped`: the launch's row bound over
its groups), the 64-row tiles otherwise; wgmma (M = 64) has none.

Schedules (``sched``): ``bounded``, a grid of ``E * max_m_tiles`` tile rows
by the column tiles (the bound counted in tiles of ``unit`` rows, the
kernel's own by default), a block whose tile starts past its group's rows
leaving at once (rows past the bound get no block); ``grouped``,
a fixed grid whose blocks walk the exact tile list (tile ``t``: M tile ``t
// ntn`` of the list of every group's tiles in order, column tile ``t %
ntn``) until it is done, each block computing the list from ``off`` as it
goes (the walk only moves forward; each warp holds 32 groups' offsets,
one a lane, loaded together, and steps through them by shuffles, so a
group costs no dependent load), with a barrier between its tiles (the
next prologue's copies overwrite stages the last tile's reads used); its
grid is at most the tiles there can be, one partial tile for each group
that can hold a row.
"""

from __future__ import annotations

import numpy as np
from numba import cuda, uint32

from .. import dynsmem
from .. import launch as L
from .. import swizzle as sw
from .. import wgmma as wg
from .. import wgmma_gemm as P
from ..launch import device_inline
from . import pipeline as PL

BM = wg.M
BOUNDED, GROUPED = "bounded", "grouped"
SMS = 132  # H200: the grouped schedule's grid is the blocks resident on every SM at once
SMEM_PER_SM = 227 * 1024
FULL = 0xFFFFFFFF  # every lane of a warp
WINDOW = 32  # group offsets a warp holds for the walk, one a lane
DECODE_M = PL.DECODE_M
# A launch whose groups hold at most this many rows on average (rows <=
# DECODE_MEAN * groups: an MoE decode step's 1-8 tokens an expert) takes the
# decode tile; more, the 64-row tiles.
DECODE_MEAN = 8
# The decode tile's launch bound: five resident blocks of 128 threads an SM
# (at most 102 registers a thread; six, 80, spilled the gated FP8 gate/up),
# 20 warps to keep the weights' loads in flight.
DECODE_MIN_BLOCKS = 5


@device_inline
def scaled_store(y, ep, acc, row0, row_end, n0, ncols, e):
    """The default epilogue: ``ep = (rs, cs, ts)``, ``rs[p]`` per sorted
    row, ``cs[e, c]`` per group's column, ``ts[e]`` per group (the
    pipeline's scaled store, at ``y[p, c]``)."""
    rs, cs, ts = ep
    P.store(y, row_end, ncols, row0, n0, acc, rs, cs[e], ts[e], False)


@device_inline
def scaled_store_narrow(y, ep, acc, row0, row_end, n0, ncols, e):
    """:func:`scaled_store` element by element (the decode tile's)."""
    rs, cs, ts = ep
    P.store_narrow(y, row_end, ncols, row0, n0, acc, rs, cs[e], ts[e], False)


@device_inline
def _pair(off, i):
    """``off[i]`` and ``off[i + 1]`` (``i + 1`` within ``off``), loaded by
    lanes 0 and 1 of the warp in one instruction (one sector) and handed
    to every lane: a group's row range."""
    lane = cuda.threadIdx.x & 31
    v = np.int32(off[i + lane]) if lane < 2 else np.int32(0)
    return cuda.shfl_sync(FULL, v, 0), cuda.shfl_sync(FULL, v, 1)


@device_inline
def _lane0(off, i):
    """``off[i]``, loaded by lane 0 of the warp and handed to the others (a
    walk step's offsets: one 4-byte load a warp, not one a thread)."""
    v = np.int32(off[i]) if (cuda.threadIdx.x & 31) == 0 else np.int32(0)
    return cuda.shfl_sync(FULL, v, 0)


def make_kernel(
    form,
    dtype: str,
    wgs: int,
    bn: int,
    stages: int,
    sched: str,
    b_kind: str = "copy",
    a_kind: str = "copy",
    gather: bool = False,
    b_parts: int = 1,
    epilogue=None,
    fault: str = "",
    stage_b=None,
    fold=None,
    unit: int = 0,
    min_blocks: int = 1,
    tile_m: int = 0,
    wn: int = 1,
    epilogue_of=None,
):
    """``kernel(y, a32, b32, bsc, asc, rowmap, off, max_m_tiles, ep)`` on
    ``form`` (``wgmma_async`` or ``mma_sync``: the module), launched by
    :func:`make_launch`. ``a32`` ``[rows, ...]`` (or the tokens' rows,
    ``gather``), ``b32`` ``[E, n, ...]``, ``bsc`` ``[E, n, ...]`` (B's
    stager's scales), ``asc`` A's stager's scales; ``rowmap`` read only
    with ``gather``; ``max_m_tiles`` only by ``bounded``, which counts it
    in tiles of ``unit`` rows (0: the kernel's own ``64 WG / WN``): a group's
    rows past ``max_m_tiles * unit`` get no block and are never computed,
    whatever the kernel's tile height (an engine's bound in its own tile
    size, on a kernel of another). ``min_blocks``: the launch bound's
    resident blocks per SM (ptxas keeps the registers within them).
    ``tile_m``: the A tile's rows, ``64 WG / WN`` (0) or :data:`DECODE_M` (the
    decode tile, mma.sync and one warpgroup: see ``pipeline.DECODE_M``).
    ``kernel.decode()`` is the same configuration on the decode tile
    (None where there is none: wgmma, s8, two warpgroups), built once;
    :func:`make_launch` takes it for decode-sized groups. ``wn``: the
    warpgroups along BN (``pipeline.make_mainloop``'s: two on one 64-row
    tile, each on its half of the columns, or of each part's). The
    epilogue sees a warpgroup's rows and columns: ``row0`` its first row,
    ``n0`` its first column (of each part). ``epilogue_of(n_acc, wide)``, in
    place of ``epilogue``: the epilogue for a thread's ``n_acc``
    accumulators (a gated hook splits them in halves; the decode tile's
    are the whole ``BN``'s, a tile on two warpgroups along BN half),
    storing 16 bytes a lane where ``wide`` (``wgmma_gemm.store``), else
    element by element (``store_narrow``: the decode tile, whose 16 rows
    are little to store and whose registers are bound at five blocks an
    SM; the exchange spilled there)."""
    if sched not in (BOUNDED, GROUPED):
        raise ValueError(f"schedule {sched!r}: {BOUNDED} or {GROUPED}")
    dtypes = form.DTYPES
    PL.check(dtype, bn, stages, b_kind, fault, dtypes, a_kind, wgs, wn)
    if PL.tables_of(fold, None) is not None:
        raise ValueError("grouped GEMMs: no per-stage fold from a scale table (their launches size no table)")
    if form.__name__.endswith("mma_sync") and (bn // b_parts) % 16:
        raise ValueError(f"mma.sync GEMM: BN={bn} in {b_parts} parts: not multiples of 16")
    if form.__name__.endswith("wgmma_async"):
        wg.check_shape(dtype, bn)
    mod_form = form.IntForm if dtype == "s8" else form.Form
    threads = wg.WARPGROUP * wgs
    a_rows = tile_m or PL.tile_rows(wgs, wn)
    split = a_rows == DECODE_M
    seg = bn // b_parts
    wcols = seg // wn  # a warpgroup's first column, past the tile's: (g % wn) wcols
    unit = unit or PL.tile_rows(wgs, wn)
    mainloop = PL.make_mainloop(
        mod_form,
        dtype,
        wgs,
        bn,
        stages,
        b_kind,
        fault,
        stage_b,
        fold,
        a_kind,
        gather=gather,
        b_parts=b_parts,
        tile_m=tile_m,
        wn=wn,
    )
    k_per = PL.a_per_word(dtype, a_kind)
    if epilogue_of is not None:
        epilogue = epilogue_of((bn if split else bn // wn) // 2, not split)  # (64 rows by its columns over 128 threads)
    store = epilogue or (scaled_store_narrow if split else scaled_store)

    @device_inline
    def tile(y, a32, b32, bsc, asc, rowmap, ep, e, r0, row_end, n0):
        smem = cuda.shared.array(0, uint32)
        base = wg.smem_addr(smem)
        pad = (sw.ATOM_BYTES - (base & (sw.ATOM_BYTES - 1))) & (sw.ATOM_BYTES - 1)
        tid = cuda.threadIdx.x
        g = tid >> 7
        k = a32.shape[1] * k_per
        ncols = y.shape[1]
        nb = b32.shape[1]  # B rows of a group
        acc = mainloop(smem, base, pad, a32, asc, row_end, k, r0, rowmap, b32[e], bsc[e], nb, ncols, n0, tid, g, rowmap)
        gm = g // wn
        if not split or tid < 32:  # the decode tile: warp 0 holds the sums (rows 0 .. 15 of wgmma's layout)
            store(y, ep, acc, r0 + BM * gm, row_end, n0 + (g - gm * wn) * wcols, ncols, e)

    if sched == BOUNDED:

        @L.jit_bounded(threads, min_blocks)
        def gemm_grouped(y, a32, b32, bsc, asc, rowmap, off, max_m_tiles, ep):
            cap = max_m_tiles * unit  # the bound, in rows
            per = (cap + a_rows - 1) // a_rows  # blocks per group
            e = cuda.blockIdx.x // per
            first, last = _pair(off, e)  # (one load a warp: most blocks of a generous bound leave at once)
            r0 = first + (cuda.blockIdx.x % per) * a_rows
            row_end = min(last, first + cap)
            if r0 < row_end:  # the whole block leaves together
                tile(y, a32, b32, bsc, asc, rowmap, ep, e, r0, row_end, cuda.blockIdx.y * seg)

    else:

        @L.jit_bounded(threads, min_blocks)
        def gemm_grouped(y, a32, b32, bsc, asc, rowmap, off, max_m_tiles, ep):
            ntn = (y.shape[1] + seg - 1) // seg
            experts = off.shape[0] - 1
            t = cuda.blockIdx.x
            e = 0
            before = 0  # M tiles of the groups before e
            lo = _lane0(off, 0)  # group e's rows: lo .. hi - 1
            win = np.int32(0)  # the offsets the warp holds: off[e - e % 32 + 1 + lane], one a lane
            while e < experts:
                mt = t // ntn
                if (e & (WINDOW - 1)) == 0:  # a new window (again after a tile there): one coalesced load
                    g = e + 1 + (cuda.threadIdx.x & 31)
                    win = np.int32(off[g]) if g <= experts else np.int32(0)
                hi = cuda.shfl_sync(FULL, win, e & (WINDOW - 1))
                here = (hi - lo + a_rows - 1) // a_rows
                if mt >= before + here:  # tiles are walked in order: the group only moves on
                    before += here
                    e += 1
                    lo = hi
                else:
                    cuda.syncthreads()  # every read of the last tile's stages done before new copies
                    r0 = lo + (mt - before) * a_rows
                    tile(y, a32, b32, bsc, asc, rowmap, ep, e, r0, hi, (t % ntn) * seg)
                    t += cuda.gridDim.x

    gemm_grouped.geometry = (dtype, wgs, bn, stages, False)
    gemm_grouped.sched, gemm_grouped.b_parts, gemm_grouped.unit = sched, b_parts, unit
    gemm_grouped.a_kind, gemm_grouped.b_kind = a_kind, b_kind
    gemm_grouped.form = mod_form.name
    gemm_grouped.async_stages = stages
    gemm_grouped.tile_m, gemm_grouped.wn = a_rows, wn
    twin: list = []

    def decode():
        if split or a_rows != BM or dtype == "s8" or not hasattr(form.Form, "consume_split"):
            return None
        if not twin:
            twin.append(
                make_kernel(  # (one warpgroup: the decode tile's four warps split K)
                    form,
                    dtype,
                    1,
                    bn,
                    stages,
                    sched,
                    b_kind,
                    a_kind,
                    gather,
                    b_parts,
                    epilogue,
                    fault,
                    stage_b,
                    fold,
                    unit,
                    DECODE_MIN_BLOCKS,
                    DECODE_M,
                    1,
                    epilogue_of,
                )
            )
        return twin[0]

    gemm_grouped.decode = decode
    return gemm_grouped


def decode_shaped(experts: int, rows: int) -> bool:
    """Whether a launch's groups are decode-sized: at most
    :data:`DECODE_MEAN` rows a group on average."""
    return rows <= DECODE_MEAN * max(experts, 1)


def make_launch(kern, experts: int, rows: int, ncols: int, k: int, max_blocks: int = 0, tile: str = "auto"):
    """``launch(y, a32, b32, bsc, asc, rowmap, off, max_m_tiles, ep)`` for
    ``experts`` groups, at most ``rows`` sorted rows and ``ncols`` output
    columns: ``bsc``, ``asc`` and ``rowmap`` may be None (placeholders).
    ``max_blocks`` caps the walking schedule's grid (the tests: one block
    many tiles). ``tile``: ``auto`` runs ``kern.decode()`` (the
    :data:`DECODE_M`-row tile) where the groups are decode-sized
    (:func:`decode_shaped`) and it has one, else ``kern``; ``decode`` and
    ``kernel`` choose (the tests). ``launch.kernel`` is the one it runs."""
    if tile not in ("auto", "decode", "kernel"):
        raise ValueError(f"tile {tile!r}: auto, decode or kernel")
    twin = kern.decode() if tile != "kernel" and hasattr(kern, "decode") else None
    if tile == "decode" and twin is None:
        raise ValueError(f"{kern.form} grouped GEMM of {kern.tile_m}-row tiles: no decode tile")
    if twin is not None and (tile == "decode" or decode_shaped(experts, rows)):
        kern = twin
    dtype, wgs, bn, stages, _swap = kern.geometry
    tm = kern.tile_m
    why = P.supports(k, PL.ESIZE[dtype])
    if why:
        raise ValueError(f"{kern.form} grouped GEMM: {why}")
    nbytes = L.check_shared(PL.shared_bytes(wgs, bn, stages, tm), hopper=True)
    threads = L.check_block(wg.WARPGROUP * wgs, warps=True)
    ntn = L.blocks_for(ncols, bn // kern.b_parts)
    if kern.sched == GROUPED:  # at most this many tiles, whatever the split: one partial tile per non-empty group
        resident = max_blocks or SMS * max(1, SMEM_PER_SM // nbytes)
        tiles = ntn * (L.blocks_for(rows, tm) + min(experts, rows))  # (at most ``rows`` groups hold a row)
        grid_of = lambda _mt: L.check_grid(min(resident, max(tiles, 1)))  # noqa: E731
    else:
        per = lambda mt: L.blocks_for(int(mt) * kern.unit, tm)  # noqa: E731
        grid_of = lambda mt: L.check_grid((experts * per(mt), ntn))  # noqa: E731
    none_b = cuda.to_device(np.zeros((experts, 1, 1), np.uint8))
    none_a = cuda.to_device(np.zeros((1, 1), np.uint8))
    opted: list = []

    def launch(y, a32, b32, bsc, asc, rowmap, off, max_m_tiles, ep):
        args = (
            y,
            a32,
            b32,
            none_b if bsc is None else bsc,
            none_a if asc is None else asc,
            off if rowmap is None else rowmap,
            off,
            np.int32(max_m_tiles),
            ep,
        )
        if not opted:
            dynsmem.opt_in(kern, args, nbytes)
            opted.append(True)
        kern[grid_of(max_m_tiles), threads, 0, nbytes](*args)

    launch.kernel = kern
    return launch

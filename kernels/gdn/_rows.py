"""Staging of a block's token rows (``q``, ``k``, ``v``'s column slice) into
fp32 shared memory, 16 bytes a lane: shared by the single-token decode (one
row of each) and the token-by-token verify (``T`` rows of each), whose steps
(``_step``) read ``k``/``q``/``v`` from shared memory as fp32.

A row is ``LEN`` consecutive elements of ``src[t, hh, col0 ..]`` (``src``
``[T, H, D]``, C-ordered: token ``t``'s row of head ``hh``); rows
``t0 .. t0+rows-1`` go to ``dst[0 .. rows-1, 0 .. LEN-1]``. On the 16-byte
path, piece ``e`` of the block's rows (row ``i``, elements ``j ..``) is one
lane's::

    4 words = src.flat[((t0+i) H + hh) D + col0 + j]    ld.global.nc.v4.u32
    fp16 rows (the model's q, k, v): 8 halves -> 8 fp32 (exact, cvt.f32.f16),
        dst[i, j .. j+3], dst[i, j+4 .. j+7]            2 x st.shared.v4.f32
        (with ``SPREAD``, in the other order in lanes 4-7 of a quarter-warp;
        without it a piece is 4 halves, ld.global.nc.v2.u32, one store)
    fp32 rows (the separate mixer's activations): 4 floats as they are,
        dst[i, j .. j+3]                                st.shared.v4.b32

Lanes run along a row: a warp reads 512 contiguous bytes of a row (two rows
of ``q`` at ``dk = 128``), whole sectors, every byte once per block. Before,
the kernels read one element a lane (2 bytes a load for fp16): at 17 tokens
those loads carried 38 % of the bytes the token-by-token verify loaded.

The 16-byte path needs rows of whole 16-byte pieces starting on 16 bytes:
``LEN``, ``D`` and ``col0`` multiples of a piece's elements, ``src``
16-byte aligned (``wide``; the same for every block of a launch, ``col0``
being a multiple of the slice width). Else one element a lane, coalesced
along the row. Either way ``dst`` gets the same fp32 values, so the
kernels' results do not depend on the path. ``dst`` must be 16-byte aligned
(``_layout.SHARED_ALIGN``) with rows of ``LEN`` floats. No barrier: the
caller's next one orders the stores.
"""

from __future__ import annotations

from functools import lru_cache

from numba import cuda, float32, uint32

from ..common.cvt import f16x2_to_f32x2
from ..common.launch import device_inline
from ..common.smem import smem_addr, st_shared_f32x4, st_shared_v4
from ..common.vload import aligned16, ldg_v2, ldg_v4

PIECE_BYTES = 16  # one ld.global.nc.v4.u32
# Test-only faults of the 16-byte staging: 1 leaves each row's last piece
# unstaged, 2 stages the piece before it in its place (those elements
# counted twice, the last ones never).
TAIL_FAULTS = (0, 1, 2)


@lru_cache(maxsize=None)
def make_stage_rows(LEN: int, NT: int, TAIL_FAULT: int = 0, SPREAD: bool = False):
    """``(wide, stage)`` for rows of ``LEN`` elements staged by ``NT``
    threads: ``wide(src, col0)`` says whether the 16-byte path applies
    (evaluate it once per launch), ``stage(dst, src, t0, rows, hh, col0,
    vec, tid)`` stages the rows, on the 16-byte path when ``vec``.
    ``SPREAD``: fp16 rows' two fp32 stores a piece in the other order in
    lanes 4-7 of a quarter-warp, whose pieces are 32 bytes apart (lanes 4
    apart share banks): each store then covers the 32 banks. The verifies,
    which stage ``T`` rows a chunk, take it (1,216 extra wavefronts to 0 at
    17 tokens). Without it (the single-token decode, which stages one row
    of each, and whose 4 more registers for the swap's selects cost it a
    block an SM) fp16 rows go in 8-byte pieces: four halves a lane
    (``ld.global.nc.v2``), one 16-byte fp32 store, a quarter-warp's eight
    stores one 128-byte run (64 extra wavefronts a launch to 0; the rows
    are 3 % of the bytes the decode loads, its state the rest).
    ``TAIL_FAULT``: :data:`TAIL_FAULTS` (tests only)."""
    if TAIL_FAULT not in TAIL_FAULTS:
        raise ValueError(f"TAIL_FAULT={TAIL_FAULT}: one of {TAIL_FAULTS}")

    @device_inline
    def wide(src, col0):
        b = src.itemsize
        whole = (LEN * b) % PIECE_BYTES == 0 and (src.shape[2] * b) % PIECE_BYTES == 0
        return whole and (col0 * b) % PIECE_BYTES == 0 and aligned16(src)

    @device_inline
    def piece(j, per, last):
        """The element a row's piece at ``j`` is read from (``j`` but for a fault)."""
        if TAIL_FAULT == 2 and j == last and j > 0:
            return j - per
        return j

    @cuda.jit(device=True)
    def stage(dst, src, t0, rows, hh, col0, vec, tid):
        H = src.shape[1]
        D = src.shape[2]
        if vec:
            # elements a piece: 8 halves (4 without SPREAD) or 4 floats
            per = (PIECE_BYTES if SPREAD or src.itemsize == 4 else PIECE_BYTES // 2) // src.itemsize
            ppr = LEN // per
            last = (ppr - 1) * per
            at = smem_addr(dst)
            for e in range(tid, rows * ppr, NT):
                i = e // ppr
                j = per * (e - i * ppr)
                if TAIL_FAULT != 1 or j != last:
                    at_src = ((t0 + i) * H + hh) * D + col0 + piece(j, per, last)
                    d = at + uint32(4 * (i * LEN + j))
                    if per == 4 and src.itemsize == 2:  # four halves -> four fp32, one store
                        h0, h1 = ldg_v2(src, at_src)
                        x0, x1 = f16x2_to_f32x2(h0)
                        x2, x3 = f16x2_to_f32x2(h1)
                        st_shared_f32x4(d, x0, x1, x2, x3)
                        continue
                    w0, w1, w2, w3 = ldg_v4(src, at_src)
                    if per == 8:
                        x0, x1 = f16x2_to_f32x2(w0)
                        x2, x3 = f16x2_to_f32x2(w1)
                        x4, x5 = f16x2_to_f32x2(w2)
                        x6, x7 = f16x2_to_f32x2(w3)
                        # SPREAD: a quarter-warp's upper four lanes store their high half
                        # first (selects, not a branch)
                        lo = not SPREAD or (tid & 4) == 0
                        da = d if lo else d + uint32(16)
                        db = d + uint32(16) if lo else d
                        st_shared_f32x4(da, x0 if lo else x4, x1 if lo else x5, x2 if lo else x6, x3 if lo else x7)
                        st_shared_f32x4(db, x4 if lo else x0, x5 if lo else x1, x6 if lo else x2, x7 if lo else x3)
                    else:  # fp32 rows: the words as they are
                        st_shared_v4(d, w0, w1, w2, w3)
        else:
            for e in range(tid, rows * LEN, NT):
                i = e // LEN
                j = e - i * LEN
                dst[i, j] = float32(src[t0 + i, hh, col0 + j])

    return wide, stage

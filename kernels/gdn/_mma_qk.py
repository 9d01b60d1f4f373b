"""The chunk's two products of rows as stored -- ``k_i . k_j`` (for ``A``)
and ``q_i . k_j`` (for ``P``) -- on the engine's warp products of rows
(``common/gemm/warp_rows.py``: ``mma.sync.aligned.m16n8k16``, fp16
inputs, f32 accumulators, the lower triangle's 16 x 8 tiles dealt to the
block's warps).

Only these two go to the tensor cores, because only their operands are
exact fp16: ``q`` and ``k`` are fp16 in global memory, and the MMA is fed
those raw bits. Every factor the FMA form applied around the dot product
(the reciprocal norms, ``beta``, ``exp(G_i - G_j)``) is applied afterwards
to the f32 result, in the same order, by this module's ``put``, so the
only difference from the FMA form is how the ``dk`` exact products are
summed (in f32 there, inside the MMA here). The products with an fp32
operand (``K S``, ``T R``, ``Q S``, ``P delta``, ``K^T delta``) stay on
FP32 FMAs: see ``_chunk``.

The rows are the chunk's staged copies in shared memory (``_chunk``: ``[C,
1, RS]`` views, row ``i`` of the chunk at index ``i``, head 0; padded so a
fragment load is conflict-free), each row staged once and serving ``C/8``
tiles. The kernel's block must be whole
warps (``_layout``): a 16- or 24-thread block at the smoke shapes is
rounded up to 32.
"""

from __future__ import annotations

import math
from functools import lru_cache

from numba import cuda, uint32, uint64

from ..common.gemm import warp_rows as WR
from ..common.launch import device_inline
from ..common.smem import smem_addr, st_shared_f32x2

TM, TN, TK = WR.TM, WR.TN, WR.TK
TC_FORM = WR.FORM  # the record's tensor_cores
TC_DTYPE = WR.DTYPE  # the MMA's input type (q, k as stored)
LAYOUT = WR.LAYOUT
lower_tiles, mma_flops = WR.lower_tiles, WR.mma_flops


@lru_cache(maxsize=None)
def _puts(STRICT: bool):
    """``(put, put2)`` for the product: element ``(i, l)`` of the triangle
    (``l < i`` where ``STRICT``, else ``l <= i``) into ``M``, scaled; and the
    elements ``(i, l)``, ``(i, l + 1)`` (``l`` even) as one 8-byte store
    where both are in the triangle (``M``'s rows an even number of floats
    apart, 8-byte aligned: ``_chunk.m_pitch``), the first alone where only
    it is."""

    @device_inline
    def kept(i, l):
        return l < i if STRICT else l <= i

    @device_inline
    def value(ctx, i, l, dot):
        M, Gs, Ri, Rk, Bs = ctx
        s = Bs[i] * Ri[i] if STRICT else Ri[i]
        return s * Rk[l] * math.exp(Gs[i] - Gs[l]) * dot

    @cuda.jit(device=True)
    def put(ctx, i, l, dot):
        if kept(i, l):
            M = ctx[0]
            M[i, l] = value(ctx, i, l, dot)

    @cuda.jit(device=True)
    def put2(ctx, i, l, dot, dot1):
        l1 = l + uint64(1)
        if kept(i, l1):
            M = ctx[0]
            at = smem_addr(M) + uint32(4 * (i * uint64(M.shape[1]) + l))
            st_shared_f32x2(at, value(ctx, i, l, dot), value(ctx, i, l1, dot1))
        else:
            put(ctx, i, l, dot)

    return put, put2


@lru_cache(maxsize=None)
def make_lower_product(DK: int, NT: int, STRICT: bool, layout=LAYOUT):
    """Device function ``lower(x, k, M, Gs, Ri, Rk, Bs, hk, c0, L, tid)``:
    for every ``i < L`` and ``l < i`` (``l <= i`` unless ``STRICT``)::

        M[i, l] = s_i * Rk[l] * exp(Gs[i] - Gs[l]) * (x_i . k_l)
        s_i     = Bs[i] * Ri[i]   (STRICT: A)      Ri[i]   (P)

    with ``x_i = x[c0 + i, hk]``, ``k_l = k[c0 + l, hk]`` (fp16 rows) and
    the dot product on ``mma.sync``, by the block's ``NT`` threads (whole
    warps). ``layout``: ``(a_elem, b_elem, c_elem)``, ``mma``'s unless a
    test breaks one."""
    put, put2 = _puts(STRICT)
    product = WR.make_product(DK, NT, put, layout, put2)

    @cuda.jit(device=True)
    def lower(x, k, M, Gs, Ri, Rk, Bs, hk, c0, L, tid):
        product(x, k, hk, c0, L, c0, L, True, (M, Gs, Ri, Rk, Bs), tid)

    return lower

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
from ..common.smem import smem_addr, st_shared_f32x2

TM, TN, TK = WR.TM, WR.TN, WR.TK
TC_FORM = WR.FORM  # the record's tensor_cores
TC_DTYPE = WR.DTYPE  # the MMA's input type (q, k as stored)
LAYOUT = WR.LAYOUT
lower_tiles, mma_flops = WR.lower_tiles, WR.mma_flops


@lru_cache(maxsize=None)
def _put(STRICT: bool):
    @cuda.jit(device=True)
    def put(ctx, i, l, dot):
        M, Gs, Ri, Rk, Bs = ctx
        if STRICT:
            if l < i:
                M[i, l] = Bs[i] * Ri[i] * Rk[l] * math.exp(Gs[i] - Gs[l]) * dot
        elif l <= i:
            M[i, l] = Ri[i] * Rk[l] * math.exp(Gs[i] - Gs[l]) * dot

    return put


@lru_cache(maxsize=None)
def _put2(STRICT: bool):
    """:func:`_put`'s two elements ``(i, l)``, ``(i, l + 1)`` (``l`` even)
    as one 8-byte store where both are in the triangle (``M``'s rows an
    even number of floats apart, 8-byte aligned: ``_chunk.m_pitch``), the
    first alone where only it is."""

    @cuda.jit(device=True)
    def put2(ctx, i, l, dot, dot1):
        M, Gs, Ri, Rk, Bs = ctx
        l1 = l + uint64(1)
        if STRICT:
            s = Bs[i] * Ri[i]
            if l1 < i:
                at = smem_addr(M) + uint32(4 * (i * uint64(M.shape[1]) + l))
                v0 = s * Rk[l] * math.exp(Gs[i] - Gs[l]) * dot
                v1 = s * Rk[l1] * math.exp(Gs[i] - Gs[l1]) * dot1
                st_shared_f32x2(at, v0, v1)
            elif l < i:
                M[i, l] = s * Rk[l] * math.exp(Gs[i] - Gs[l]) * dot
        elif l1 <= i:
            at = smem_addr(M) + uint32(4 * (i * uint64(M.shape[1]) + l))
            v0 = Ri[i] * Rk[l] * math.exp(Gs[i] - Gs[l]) * dot
            v1 = Ri[i] * Rk[l1] * math.exp(Gs[i] - Gs[l1]) * dot1
            st_shared_f32x2(at, v0, v1)
        elif l <= i:
            M[i, l] = Ri[i] * Rk[l] * math.exp(Gs[i] - Gs[l]) * dot

    return put2


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
    product = WR.make_product(DK, NT, _put(STRICT), layout, _put2(STRICT))

    @cuda.jit(device=True)
    def lower(x, k, M, Gs, Ri, Rk, Bs, hk, c0, L, tid):
        product(x, k, hk, c0, L, c0, L, True, (M, Gs, Ri, Rk, Bs), tid)

    return lower

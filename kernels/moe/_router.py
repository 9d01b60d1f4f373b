"""The router: gate GEMM, then softmax and top-k with renormalised weights.

``gate`` writes ``logits float32[R, E] = x Wg^T`` (``Wg`` bf16 bits
``uint16[E, H]``) in one of three precisions, the router's levers:

=============  =========================  =========================================
PREC           router input ``x``         logits
=============  =========================  =========================================
bf16           bf16 bits ``uint16[R, H]``  rounded to bf16 (kept as float32 values)
fp32_gate      bf16 bits                  float32
fp32_routing   float32 ``[R, H]``          float32
=============  =========================  =========================================

Launch: 128 threads, ``LANES = 8`` lanes per expert (16 experts a block),
grid ``(ceil(E / 16), R)``; the lanes of an expert stride H by 8 and reduce
with three XOR shuffles.

``topk`` runs one block of 128 threads per row: the row's logits are staged
in shared memory (up to ``MAX_EXPERTS``), the softmax is taken with the row
maximum subtracted, and ``k`` rounds of a block-wide arg-max (the larger
probability, the lower expert on equal ones) pick the experts in decreasing
order. Weights are the picked probabilities over their sum: top-k renormalised
(Qwen3-Next's ``norm_topk_prob``).
"""

from __future__ import annotations

import math
from functools import lru_cache

from numba import cuda, float32, int32

from ..common import bits
from ..common.launch import blocks_for, check_block, check_grid
from ._experts import FULL_MASK, LANES, OUT_PER_BLOCK, THREADS, group_sum

PRECISIONS = ("bf16", "fp32_gate", "fp32_routing")
MAX_EXPERTS = 1024
TOPK_THREADS = 128
_WARPS = TOPK_THREADS // 32


@lru_cache(maxsize=None)
def make_gate(PREC: str):
    if PREC not in PRECISIONS:
        raise ValueError(f"unknown router precision {PREC!r}: one of {PRECISIONS}")
    BF16_IN = PREC != "fp32_routing"
    BF16_OUT = PREC == "bf16"

    @cuda.jit
    def gate(logits, x, wg):
        t = cuda.threadIdx.x
        lane = t % LANES
        e = cuda.blockIdx.x * OUT_PER_BLOCK + t // LANES
        r = cuda.blockIdx.y
        acc = float32(0.0)
        if e < logits.shape[1]:
            for k in range(lane, x.shape[1], LANES):
                if BF16_IN:
                    xv = bits.bf16_to_f32(x[r, k])
                else:
                    xv = x[r, k]
                acc += xv * bits.bf16_to_f32(wg[e, k])
        acc = group_sum(acc)
        if e < logits.shape[1] and lane == 0:
            if BF16_OUT:
                acc = bits.bf16_to_f32(bits.f32_to_bf16(acc))
            logits[r, e] = acc

    return gate


@cuda.jit(device=True, inline=True)
def _better(v, i, w, j):
    """Whether (w, j) beats (v, i): larger value, lower index on equal ones."""
    return w > v or (w == v and j < i)


@lru_cache(maxsize=None)
def make_topk(BROKEN: str = ""):
    """``BROKEN`` (tests only): ``"unnormalised"`` writes the softmax
    probabilities without renormalising; ``"exp2"`` takes the softmax in
    base 2. Each must fail the router's check."""
    NORMALISE = BROKEN != "unnormalised"
    BASE2 = BROKEN == "exp2"

    @cuda.jit
    def topk(ids, weights, logits):
        p = cuda.shared.array(MAX_EXPERTS, float32)
        wv = cuda.shared.array(_WARPS, float32)
        wi = cuda.shared.array(_WARPS, int32)
        picked = cuda.shared.array(1, float32)
        r = cuda.blockIdx.x
        t = cuda.threadIdx.x
        lane = t % 32
        warp = t // 32
        ne = logits.shape[1]
        # row maximum
        m = float32(-math.inf)
        for e in range(t, ne, TOPK_THREADS):
            v = logits[r, e]
            p[e] = v
            m = max(m, v)
        for d in (16, 8, 4, 2, 1):
            m = max(m, cuda.shfl_xor_sync(FULL_MASK, m, d))
        if lane == 0:
            wv[warp] = m
        cuda.syncthreads()
        m = wv[0]
        for w in range(1, _WARPS):
            m = max(m, wv[w])
        cuda.syncthreads()
        # probabilities (unnormalised: the top-k sum renormalises them)
        s = float32(0.0)
        for e in range(t, ne, TOPK_THREADS):
            if BASE2:
                q = float32(2.0) ** (p[e] - m)
            else:
                q = math.exp(p[e] - m)
            p[e] = q
            s += q
        for d in (16, 8, 4, 2, 1):
            s += cuda.shfl_xor_sync(FULL_MASK, s, d)
        if lane == 0:
            wv[warp] = s
        cuda.syncthreads()
        total = wv[0]
        for w in range(1, _WARPS):
            total += wv[w]
        if t == 0:
            picked[0] = float32(0.0)
        cuda.syncthreads()
        topk_n = ids.shape[1]
        for j in range(topk_n):
            bv = float32(-1.0)
            bi = int32(ne)
            for e in range(t, ne, TOPK_THREADS):
                if _better(bv, bi, p[e], e):
                    bv = p[e]
                    bi = e
            for d in (16, 8, 4, 2, 1):
                ov = cuda.shfl_xor_sync(FULL_MASK, bv, d)
                oi = cuda.shfl_xor_sync(FULL_MASK, bi, d)
                if _better(bv, bi, ov, oi):
                    bv = ov
                    bi = oi
            if lane == 0:
                wv[warp] = bv
                wi[warp] = bi
            cuda.syncthreads()
            if t == 0:
                bv = wv[0]
                bi = wi[0]
                for w in range(1, _WARPS):
                    if _better(bv, bi, wv[w], wi[w]):
                        bv = wv[w]
                        bi = wi[w]
                ids[r, j] = bi
                weights[r, j] = bv / total  # softmax probability, renormalised below
                picked[0] += bv / total
                p[bi] = float32(-1.0)  # taken
            cuda.syncthreads()
        if NORMALISE and t < topk_n:
            weights[r, t] = weights[r, t] / picked[0]

    return topk


def gate(PREC: str, rows: int, experts: int):
    kern = make_gate(PREC)
    grid = check_grid((blocks_for(experts, OUT_PER_BLOCK), rows))
    check_block(THREADS)

    def launch(logits, x, wg):
        kern[grid, THREADS](logits, x, wg)

    return launch


def topk(rows: int, experts: int, k: int, BROKEN: str = ""):
    if experts > MAX_EXPERTS:
        raise ValueError(f"{experts} experts: the top-k kernel stages at most {MAX_EXPERTS}")
    if k > TOPK_THREADS or k > experts:
        raise ValueError(f"top-{k} of {experts} experts: k must be at most the experts and {TOPK_THREADS}")
    kern = make_topk(BROKEN)
    grid = check_grid(rows)

    def launch(ids, weights, logits):
        kern[grid, TOPK_THREADS](ids, weights, logits)

    return launch

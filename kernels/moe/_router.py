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
grid ``(ceil(E / 16), R)``; the lanes of an expert split H and reduce with
three XOR shuffles. Where the rows are whole 16-byte chunks (``H % 8 ==
0``, ``x`` and ``Wg`` C-contiguous and 16-byte aligned) lane ``l`` takes
the chunks ``l, l + 8, ...`` of 8 inputs, each one 16-byte load of the
weights (and of ``x``: one, or two of float32), two chunks a step with all
four loads issued before either is summed: an expert's eight lanes read
128 contiguous bytes of its row a load. Elsewhere lane ``l`` takes the
inputs ``l, l + 8, ...`` one element a load.

``topk`` runs one block of 128 threads per row: the row's logits are staged
in shared memory (up to ``MAX_EXPERTS``), the softmax is taken with the row
maximum subtracted, and ``k`` rounds of a block-wide arg-max (the larger
probability, the lower expert on equal ones) pick the experts in decreasing
order. Weights are the picked probabilities over their sum: top-k renormalised
(Qwen3-Next's ``norm_topk_prob``). Each round's pick is kept in shared
memory, and the row's ``k`` ids and weights are written once at the end,
lane ``j`` of the block its pick ``j``: one coalesced store of each, where
thread 0 wrote each pick in turn, a sector a store, and read the weights
back to renormalise them.
"""

from __future__ import annotations

import math
from functools import lru_cache

from numba import cuda, float32, int32, uint32

from ..common import cvt, smem, vload
from ..common.launch import blocks_for, check_block, check_grid, device_inline
from ._experts import FULL_MASK, LANES, OUT_PER_BLOCK, THREADS, group_sum

PRECISIONS = ("bf16", "fp32_gate", "fp32_routing")
MAX_EXPERTS = 1024
TOPK_THREADS = 128
CHUNK = 8  # inputs a lane's 16-byte load of bf16 weights
STAGED_MAX = 48 * 1024  # a block's staged row of x: within the default dynamic shared memory
GATE_FAULTS = ("tail_dropped",)  # tests only: a lane's last chunk, when it has no pair, is not added
_WARPS = TOPK_THREADS // 32


@device_inline
def _dot8(acc, x, w):
    x0, x1, x2, x3, x4, x5, x6, x7 = x
    w0, w1, w2, w3, w4, w5, w6, w7 = w
    acc += x0 * w0
    acc += x1 * w1
    acc += x2 * w2
    acc += x3 * w3
    acc += x4 * w4
    acc += x5 * w5
    acc += x6 * w6
    acc += x7 * w7
    return acc


@device_inline
def _x_bf16(at, plane):
    """A staged chunk of bf16 ``x``: one 16-byte shared load."""
    return cvt.bf16x8_to_f32(smem.ld_shared_v4(at))


@device_inline
def _x_f32(at, plane):
    """A staged chunk of float32 ``x``: its two halves, one in each plane."""
    a0, a1, a2, a3 = smem.ld_shared_f32x4(at)
    a4, a5, a6, a7 = smem.ld_shared_f32x4(at + plane)
    return a0, a1, a2, a3, a4, a5, a6, a7


def staged_bytes(prec: str, hidden: int) -> int:
    """The shared memory a gate block stages its row of ``x`` in (0 where the
    row is not whole 16-byte chunks: the element loads, nothing staged)."""
    if hidden % CHUNK:
        return 0
    chunks = hidden // CHUNK
    if prec != "fp32_routing":
        return 16 * chunks
    return _plane(chunks) + 16 * chunks


def _plane(chunks: int) -> int:
    """Where float32 ``x``'s second plane starts: past the first, rounded to
    128 bytes and 64 on, so a quarter-warp's staging stores of a chunk's two
    halves fall on different banks."""
    return -(-16 * chunks // 128) * 128 + 64


_plane_of = device_inline(_plane)  # the same, in a kernel


@lru_cache(maxsize=None)
def make_gate(PREC: str, wide: bool = True, fault: str = ""):
    """The gate kernel for ``PREC``; ``wide`` (C-contiguous ``x`` and
    ``wg``: the launcher's choice) stages the block's row of ``x`` and
    reads 16-byte chunks where the rows allow them. ``fault``
    (:data:`GATE_FAULTS`, tests only) plants a bug the check must see."""
    if PREC not in PRECISIONS:
        raise ValueError(f"unknown router precision {PREC!r}: one of {PRECISIONS}")
    if fault and fault not in GATE_FAULTS:
        raise ValueError(f"unknown fault {fault!r}")
    tail = fault != "tail_dropped"
    BF16_IN = PREC != "fp32_routing"
    BF16_OUT = PREC == "bf16"
    x_at = _x_bf16 if BF16_IN else _x_f32
    per_piece = 8 if BF16_IN else 4  # x's inputs a 16-byte piece
    pieces = CHUNK // per_piece  # a chunk's pieces: 1 (bf16) or 2 (float32, one a plane)
    step = LANES * CHUNK  # the inputs an expert's lanes cover in one chunk each

    @device_inline
    def dot_elements(x, wg, r, e, lane):
        acc = float32(0.0)
        for k in range(lane, x.shape[1], LANES):
            if BF16_IN:
                xv = cvt.bf16_to_f32(x[r, k])
            else:
                xv = x[r, k]
            acc += xv * cvt.bf16_to_f32(wg[e, k])
        return acc

    @device_inline
    def stage(x, r, base, plane):
        """The block's row of ``x`` into shared memory, a 16-byte piece a
        thread in turn: piece ``p`` of chunk ``c`` at ``p plane + 16 c``."""
        h = x.shape[1]
        for q in range(cuda.threadIdx.x, h // per_piece, THREADS):
            w0, w1, w2, w3 = vload.ldg_v4(x, r * h + q * per_piece)
            c = q // pieces
            smem.st_shared_v4(base + (q - c * pieces) * plane + 16 * c, w0, w1, w2, w3)

    @device_inline
    def dot_chunks(wg, h, e, lane, base, plane):
        """Lane ``l`` of the expert: its chunks ``l, l + 8, ...`` of ``CHUNK``
        inputs, two a step with both weight loads issued before either sum."""
        wr = e * h
        acc = float32(0.0)
        c = lane * CHUNK
        while c + step < h:
            w_a = cvt.bf16x8_to_f32(vload.ldg_v4(wg, wr + c))
            w_b = cvt.bf16x8_to_f32(vload.ldg_v4(wg, wr + c + step))
            acc = _dot8(acc, x_at(base + 2 * c, plane), w_a)
            acc = _dot8(acc, x_at(base + 2 * (c + step), plane), w_b)
            c += 2 * step
        if tail and c < h:
            acc = _dot8(acc, x_at(base + 2 * c, plane), cvt.bf16x8_to_f32(vload.ldg_v4(wg, wr + c)))
        return acc

    @device_inline
    def finish(logits, r, e, lane, acc):
        acc = group_sum(acc)
        if e < logits.shape[1] and lane == 0:
            if BF16_OUT:
                acc = cvt.bf16_to_f32(cvt.f32_to_bf16(acc))
            logits[r, e] = acc

    @cuda.jit
    def gate(logits, x, wg):
        t = cuda.threadIdx.x
        lane = t % LANES
        e = cuda.blockIdx.x * OUT_PER_BLOCK + t // LANES
        r = cuda.blockIdx.y
        h = x.shape[1]
        acc = float32(0.0)
        if h % CHUNK == 0 and vload.aligned16(x) and vload.aligned16(wg):  # the same in every thread
            sx = cuda.shared.array(0, uint32)
            base = smem.smem_addr(sx)
            plane = _plane_of(h // CHUNK)
            stage(x, r, base, plane)
            cuda.syncthreads()
            if e < logits.shape[1]:
                acc = dot_chunks(wg, h, e, lane, base, plane)
        elif e < logits.shape[1]:
            acc = dot_elements(x, wg, r, e, lane)
        finish(logits, r, e, lane, acc)

    @cuda.jit
    def gate_strided(logits, x, wg):
        t = cuda.threadIdx.x
        lane = t % LANES
        e = cuda.blockIdx.x * OUT_PER_BLOCK + t // LANES
        r = cuda.blockIdx.y
        acc = float32(0.0)
        if e < logits.shape[1]:
            acc = dot_elements(x, wg, r, e, lane)
        finish(logits, r, e, lane, acc)

    return gate if wide else gate_strided


@device_inline
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
        pick_w = cuda.shared.array(TOPK_THREADS, float32)  # pick j's probability over the row's sum
        pick_i = cuda.shared.array(TOPK_THREADS, int32)
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
                pick_i[j] = bi
                pick_w[j] = bv / total  # softmax probability, renormalised below
                picked[0] += bv / total
                p[bi] = float32(-1.0)  # taken
            cuda.syncthreads()
        if t < topk_n:  # the row's picks, one store of each output
            ids[r, t] = pick_i[t]
            w = pick_w[t]
            weights[r, t] = w / picked[0] if NORMALISE else w

    return topk


def gate(PREC: str, rows: int, experts: int, hidden: int, fault: str = ""):
    """The gate's launch at ``rows x hidden`` by ``experts``: the staged
    row's shared memory is sized for ``hidden``, as the grid for the rows
    and experts."""
    grid = check_grid((blocks_for(experts, OUT_PER_BLOCK), rows))
    check_block(THREADS)
    nbytes = staged_bytes(PREC, hidden)

    def launch(logits, x, wg):
        # a strided view, a longer row than staged for, or a row past the
        # default shared memory: the element loads
        wide = (
            vload.c_contiguous(x) and vload.c_contiguous(wg) and staged_bytes(PREC, x.shape[1]) <= nbytes <= STAGED_MAX
        )
        make_gate(PREC, wide, fault)[grid, THREADS, 0, nbytes if wide else 0](logits, x, wg)

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

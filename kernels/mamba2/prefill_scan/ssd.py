"""``mamba2.prefill_scan`` variant ``ssd`` (``ssd`` on and the state size
fits): the chunked state-space-duality scan, three launches.

The prompt is cut into chunks of ``Q`` tokens (the last may be shorter).
Inside a chunk the recurrence unrolls into a masked quadratic form, and
chunks talk only through the state entering each (``naive.naive_ssd_scan``
is the same algorithm in float64)::

    cum_i = sum_{k <= i} dt_k A_h                   (log-decay from the chunk's start)
    y_i   = sum_{j <= i} (C_i . B_j) exp(cum_i - cum_j) dt_j x_j     intra-chunk
          + exp(cum_i) C_i S_in^T                                     the state entering the chunk
          + D_h x_i
    S_out = exp(cum_last) S_in + sum_j exp(cum_last - cum_j) dt_j x_j B_j^T

1. ``ssd_chunk_state``, block per (chunk, head, ``PB`` head-dim rows): the
   chunk's dt and cumulative decay (written once to ``cs``/``dts``), and
   its own state contribution ``sum_j exp(cum_last - cum_j) dt_j x_j B_j^T``
   into ``cstate[c, h]``, staging ``B`` and the weighted ``x`` rows a
   32-token tile at a time;
2. ``ssd_state_pass``, thread per state element of a head: walks the chunks
   in order from the carried state, replacing ``cstate[c]`` by the state
   entering chunk ``c`` and leaving the final state in ``state``;
3. ``ssd_chunk_scan``, block per (chunk, head): per 32-token tile of
   outputs, stages ``C`` (fp32, for the state read-out); per source tile
   up to the diagonal, forms the tile's decay-masked ``C.B`` block ``M
   [32, 32]`` in shared memory, the dot products on the tensor cores
   (``common/gemm/warp_rows``: ``mma.sync`` m16n8k16 on ``C`` and ``B``
   rows as stored, exact fp16, f32 sums; the diagonal block's tiles above
   the diagonal skipped; the decay and ``dt`` applied to each f32 result),
   and accumulates ``M (x)``; then adds the entering state's read-out and
   the skip.

Every chunk of every head is independent in 1 and 3, so the long parts of
the work spread over ``chunks x heads`` blocks; only 2, ``P N`` elements
per head times the chunk count, is sequential in time.

What stays on FP32 CUDA cores, and why: ``M (x)`` and the chunk state's
``sum_j w_j x_j B_j^T`` have an f32 factor inside the sum (the decays and
``dt``), which would round to fp16 on the way into an MMA, and ``x``'s
contraction index (the token) is not its contiguous one (``[T, H, P]``),
so its fragments are not 32-bit loads of a row; the read-out ``C S^T``
has an fp32 state.

Shared memory: the chunk's ``cum`` and ``dt``, the ``C`` and ``B`` tiles
as fp32 rows of ``N + 1`` words (kernel 1 stages ``B``, kernel 3 ``C``;
the pad staggers the rows across banks), and ``M``:
``geometry.ssd_shared_bytes(N)`` at the longest chunk (256), which must fit
the 48 KiB a block may declare statically: that is ``ssd_scan_fits``, the
condition of the decision table. Kernel 1 also stages its tokens' ``w_j
x_j`` rows (32 tokens by its ``PB`` head-dim rows, at most
:data:`WX_ROWS`: 16 KiB; 2 KiB at the model's ``N`` = 128), checked on
its own; kernel 3's read-out reuses ``M``'s space.
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np
from numba import config, cuda, float32, uint32, uint64

from ...common import launch as L
from ...common import unroll
from ...common import wgmma as wg
from ...common.gemm import warp_rows as WR
from ...common.launch import device_inline
from ...common.smem import smem_addr, st_shared_f32x2
from ._device import group_of, step_dt
from .geometry import SSD_MAX_CHUNK, SSD_TILE, ssd_scan_fits, ssd_shared_bytes

NAME = "ssd"
SUMMARY = "chunked SSD scan: chunk states, state passing, intra-chunk masked C.B blocks (3 launches)"
TILE = SSD_TILE
ALIGN8 = None if config.ENABLE_CUDASIM else 8  # the simulator refuses an alignment (its own are 1024)
FULL = 0xFFFFFFFF  # every lane of a warp
LAUNCHES = 3
# The chunk-state kernel's launch bound: three resident blocks of 256
# threads an SM (at most 85 registers a thread; unbounded it took 86, two
# blocks), 24 warps where it had 16.
STATE_MIN_BLOCKS = 3
TENSOR_CORES = WR.FORM  # the C.B blocks on mma.sync (``common/gemm/warp_rows``)


def cb_tc_flops(t: int, chunk: int, n: int) -> int:
    """What the tensor cores execute for one head's ``C.B`` blocks: per
    chunk, per 32-token output tile, its source tiles up to the diagonal
    (the diagonal one's lower tiles only), padded tiles and steps included."""
    tiles = 0
    for c0 in range(0, t, chunk):
        q = min(chunk, t - c0)
        for i0 in range(0, q, TILE):
            i_n = min(TILE, q - i0)
            for j0 in range(0, i0 + i_n, TILE):
                tiles += WR.block_tiles(i_n, min(TILE, q - j0), j0 == i0)
    return WR.tile_flops(tiles, n)


def threads_for(p: int, n: int) -> int:
    """256 threads at model sizes; one warp for the simulator's tiny heads."""
    return 256 if p * n >= 4096 else 32


WX_ROWS = 128  # at most this many head-dim rows a chunk-state block (its staged ``w x`` tile: 16 KiB)


def rows_per_block(p: int, n: int, threads: int) -> int:
    """Head-dim rows of one chunk-state block: 8 state elements per thread
    (and at most :data:`WX_ROWS`)."""
    return max(1, min(p, 8 * threads // n, WX_ROWS))


@lru_cache(maxsize=None)
def make_chunk_state(CHUNK: int, N: int, PB: int, THREADS: int, HPG: int, DECAY_SCALE: float = 1.0):
    """Kernel 1. ``DECAY_SCALE`` (tests only) scales the log-decay."""
    NS = N + 1
    BTILE = TILE * NS  # shared arrays are sized by constants computed here, not in the kernel
    WXTILE = TILE * PB
    EPT = (PB * N + THREADS - 1) // THREADS
    SC = float32(DECAY_SCALE)

    @L.jit_bounded(THREADS, STATE_MIN_BLOCKS)
    def ssd_chunk_state(cs, dts, cstate, x, dt_raw, dt_bias, A, B):
        t_len, _, p_len = x.shape
        cum = cuda.shared.array(CHUNK, np.float32)
        dtv = cuda.shared.array(CHUNK, np.float32)
        bs = cuda.shared.array(BTILE, np.float32)
        wx = cuda.shared.array(WXTILE, np.float32)  # w_j x[j, p] of the tile's tokens and the block's rows
        acc = cuda.local.array(EPT, np.float32)
        tid = cuda.threadIdx.x
        c = cuda.blockIdx.x
        h = cuda.blockIdx.y
        p0 = cuda.blockIdx.z * PB
        g = h // HPG
        t0 = c * CHUNK
        q = min(CHUNK, t_len - t0)
        for i in range(tid, q, THREADS):
            dtv[i] = step_dt(dt_raw, dt_bias, t0 + i, h)
        cuda.syncthreads()
        if tid == 0:  # a chunk's prefix sum: Q adds
            a_h = SC * A[h]
            run = float32(0.0)
            for i in range(q):
                run += dtv[i] * a_h
                cum[i] = run
        cuda.syncthreads()
        if cuda.blockIdx.z == 0:
            for i in range(tid, q, THREADS):
                cs[h, t0 + i] = cum[i]
                dts[h, t0 + i] = dtv[i]
        for k in range(EPT):
            acc[k] = float32(0.0)
        last = cum[q - 1]
        for j0 in range(0, q, TILE):
            jn = min(TILE, q - j0)
            for e in range(tid, jn * N, THREADS):
                jj = e // N
                bs[jj * NS + e - jj * N] = float32(B[t0 + j0 + jj, g, e - jj * N])
            for e in range(tid, jn * PB, THREADS):  # (lanes along the head dim: x's rows read whole)
                jj = e // PB
                p = p0 + e - jj * PB
                xv = float32(x[t0 + j0 + jj, h, p]) if p < p_len else float32(0.0)
                wx[e] = math.exp(last - cum[j0 + jj]) * dtv[j0 + jj] * xv
            cuda.syncthreads()
            for k in range(EPT):
                e = tid + k * THREADS
                pr = e // N
                n = e - pr * N
                p = p0 + pr
                if pr < PB and p < p_len:
                    a = acc[k]
                    for jj in range(jn):
                        a += wx[jj * PB + pr] * bs[jj * NS + n]
                    acc[k] = a
            cuda.syncthreads()
        for k in range(EPT):
            e = tid + k * THREADS
            pr = e // N
            p = p0 + pr
            if pr < PB and p < p_len:
                cstate[c, h, p, e - pr * N] = acc[k]

    return ssd_chunk_state


@lru_cache(maxsize=None)
def make_state_pass(CHUNK: int, CARRY: bool = True):
    """Kernel 2. ``CARRY`` off (tests only) drops the state carried from one
    chunk into the next."""

    @cuda.jit
    def ssd_state_pass(state, cstate, cs):
        nc, _, p_len, n_len = cstate.shape
        t_len = cs.shape[1]
        h = cuda.blockIdx.x
        e = cuda.blockIdx.y * cuda.blockDim.x + cuda.threadIdx.x
        if e >= p_len * n_len:
            return
        p = e // n_len
        n = e - p * n_len
        s = state[h, p, n]
        for c in range(nc):
            last = min(t_len, (c + 1) * CHUNK) - 1
            own = cstate[c, h, p, n]
            cstate[c, h, p, n] = s
            if CARRY:
                s = math.exp(cs[h, last]) * s + own
            else:
                s = own
        state[h, p, n] = s

    return ssd_state_pass


@device_inline
def m_at(i, l):
    """Where element ``(i, l)`` of the ``C.B`` block ``m`` lies: row ``i``
    of ``TILE`` floats, its columns XORed with ``8 (i % 4)``. The MMA's
    results go in as column pairs, 8 bytes a lane, a half-warp's four rows
    at once: unswizzled, rows 32 words apart, those four rows would share
    their banks. Every access to ``m`` goes through here; a row's columns
    stay a permutation of themselves, so ``M x``'s reads (four rows a warp
    at ``P = 8``) hit distinct banks too."""
    return i * TILE + (l ^ ((i & 3) << 3))


@lru_cache(maxsize=None)
def _put_m():
    """``(put_m, put_m2)``: one element of the decay-masked ``C.B`` block
    (``i``, ``l`` the block's row and column, ``uint64``; the diagonal
    block's upper triangle left unwritten, never read), and elements
    ``(i, l)``, ``(i, l + 1)`` (``l`` even) as one 8-byte store where both
    are at or below the diagonal, the first alone where only it is."""

    @device_inline
    def value(ctx, i, l, dot):
        m, cum, dtv, i0, j0 = ctx  # every index uint64: no mixed-sign arithmetic
        return dot * math.exp(cum[i0 + i] - cum[j0 + l]) * dtv[j0 + l]

    @cuda.jit(device=True)
    def put_m(ctx, i, l, dot):
        m, _, _, i0, j0 = ctx
        if j0 + l <= i0 + i:
            m[m_at(i, l)] = value(ctx, i, l, dot)

    @cuda.jit(device=True)
    def put_m2(ctx, i, l, dot, dot1):
        m, _, _, i0, j0 = ctx
        l1 = l + uint64(1)
        if j0 + l1 <= i0 + i:
            at = smem_addr(m) + uint32(4 * m_at(i, l))
            st_shared_f32x2(at, value(ctx, i, l, dot), value(ctx, i, l1, dot1))
        else:
            put_m(ctx, i, l, dot)

    return put_m, put_m2


@device_inline
def _fold(i, lo, hi, ctx):
    """One step of folding ``2 w`` partial sums across lanes ``w`` apart:
    a lane keeps the half its lane bit ``w`` names and adds its partner's
    of the same half, handing it the other."""
    upper, w = ctx
    keep = hi if upper else lo
    give = lo if upper else hi
    return keep + cuda.shfl_xor_sync(FULL, give, w)


def make_read_out(N: int):
    """``read_out(cs_t, cstate, c, h, p, lane)`` -> ``sum_n C[i, n] S[p,
    n]`` for the tile's row ``i = lane``: a warp takes one state row ``p``
    with its lanes along ``n`` (``n = lane + 32 j``: every load 128
    contiguous bytes, where a thread a row read it a float every 512
    bytes), each lane a partial sum for each of the tile's 32 rows (``C``
    rows read along ``n`` too, 32 consecutive words), then folds the 32
    rows' partials across the lanes in 31 shuffles (16 + 8 + 4 + 2 + 1),
    after which lane ``i`` holds row ``i``'s sum."""
    NJ = (N + 31) // 32
    NS = N + 1  # the staged C rows' pitch
    zeros = wg.zeros(2 * TILE)  # TILE float32 zeros
    if TILE != 32:
        raise ValueError(f"the read-out folds {TILE} rows over 32 lanes")

    @device_inline
    def _row_part(i, part, _same, ctx):
        """Row ``i``'s partial sum, one state column further."""
        cs_t, at, s = ctx
        return part + cs_t[i * NS + at] * s

    @device_inline
    def read_out(cs_t, cstate, c, h, p, lane):
        part = zeros()
        for j in range(NJ):
            n = lane + 32 * j
            s = cstate[c, h, p, n] if n < N else float32(0.0)
            part = unroll.each_map(_row_part, part, part, (cs_t, min(n, N - 1), s))
        v = unroll.each_map(_fold, part[:16], part[16:], ((lane & 16) != 0, 16))
        v = unroll.each_map(_fold, v[:8], v[8:], ((lane & 8) != 0, 8))
        v = unroll.each_map(_fold, v[:4], v[4:], ((lane & 4) != 0, 4))
        v = unroll.each_map(_fold, v[:2], v[2:], ((lane & 2) != 0, 2))
        v = unroll.each_map(_fold, v[:1], v[1:], ((lane & 1) != 0, 1))
        return v[0]

    return read_out


@lru_cache(maxsize=None)
def make_chunk_scan(CHUNK: int, N: int, P: int, THREADS: int, HPG: int, layout=WR.LAYOUT):
    """Kernel 3. ``layout``: the MMA fragment maps of the ``C.B`` blocks
    (``warp_rows``; a test breaks one)."""
    NS = N + 1
    CTILE = TILE * NS
    MTILE = TILE * TILE
    OPT = (TILE * P + THREADS - 1) // THREADS
    put_m, put_m2 = _put_m()
    cb = WR.make_product(N, THREADS, put_m, layout, put_m2, wide=True)  # C and B rows from global
    read_out = make_read_out(N)
    WARPS = THREADS // 32

    @cuda.jit
    def ssd_chunk_scan(y, x, B, C, D, cs, dts, cstate):
        t_len = x.shape[0]
        cum = cuda.shared.array(CHUNK, np.float32)
        dtv = cuda.shared.array(CHUNK, np.float32)
        cs_t = cuda.shared.array(CTILE, np.float32)
        m = cuda.shared.array(MTILE, np.float32, alignment=ALIGN8)  # 8-byte pair stores
        acc = cuda.local.array(OPT, np.float32)
        tid = cuda.threadIdx.x
        lane = tid & 31
        c = cuda.blockIdx.x
        h = cuda.blockIdx.y
        g = h // HPG
        t0 = c * CHUNK
        q = min(CHUNK, t_len - t0)
        for i in range(tid, q, THREADS):
            cum[i] = cs[h, t0 + i]
            dtv[i] = dts[h, t0 + i]
        d_h = D[h]
        for i0 in range(0, q, TILE):
            i_n = min(TILE, q - i0)
            cuda.syncthreads()  # the previous tile's C rows and M fully read
            for e in range(tid, i_n * N, THREADS):
                ii = e // N
                cs_t[ii * NS + e - ii * N] = float32(C[t0 + i0 + ii, g, e - ii * N])
            for e in range(i_n * N + tid, TILE * N, THREADS):  # a short tile's other rows: the read-out sums all TILE
                ii = e // N
                cs_t[ii * NS + e - ii * N] = float32(0.0)
            for k in range(OPT):
                acc[k] = float32(0.0)
            for j0 in range(0, i0 + i_n, TILE):  # source tiles up to the diagonal
                jn = min(TILE, q - j0)
                diag = j0 == i0
                # the block's C.B on the tensor cores, C and B rows as stored
                cb(C, B, g, t0 + i0, i_n, t0 + j0, jn, diag, (m, cum, dtv, uint64(i0), uint64(j0)), tid)
                cuda.syncthreads()
                for k in range(OPT):
                    o = tid + k * THREADS
                    ii = o // P
                    p = o - ii * P
                    if ii < i_n:
                        a = acc[k]
                        for jj in range(min(jn, ii + 1) if diag else jn):
                            a += m[m_at(ii, jj)] * float32(x[t0 + j0 + jj, h, p])
                        acc[k] = a
                cuda.syncthreads()  # M fully read
            # the entering state's read-out, TILE state rows a pass: warp by
            # warp a row (``read_out``), row i's sum at m[pl TILE + (i ^ pl)]
            # (the free M block; the XOR keeps both the lanes' puts and the
            # threads' reads of a row on 32 banks)
            for pb in range(0, P, TILE):
                for pl in range(tid >> 5, min(TILE, P - pb), WARPS):
                    m[pl * TILE + (lane ^ pl)] = read_out(cs_t, cstate, c, h, pb + pl, lane)
                cuda.syncthreads()
                for k in range(OPT):
                    o = tid + k * THREADS
                    ii = o // P
                    pl = o - ii * P - pb
                    if ii < i_n and 0 <= pl < TILE:
                        acc[k] += math.exp(cum[i0 + ii]) * m[pl * TILE + (ii ^ pl)]
                cuda.syncthreads()  # read before the next pass's puts
            for k in range(OPT):
                o = tid + k * THREADS
                ii = o // P
                p = o - ii * P
                if ii < i_n:
                    i = i0 + ii
                    y[t0 + i, h, p] = acc[k] + d_h * float32(x[t0 + i, h, p])

    return ssd_chunk_scan


def build(shape, DECAY_SCALE: float = 1.0, CARRY: bool = True, layout=WR.LAYOUT):
    t, h, p, n, g, chunk = (shape[k] for k in ("t", "h", "p", "n", "g", "chunk"))
    if not ssd_scan_fits(n):
        raise ValueError(
            f"ssd: state size {n} does not fit the SSD scan's shared memory "
            f"({ssd_shared_bytes(n)} bytes at the longest chunk, over 48 KiB)"
        )
    if not 1 <= chunk <= SSD_MAX_CHUNK:
        raise ValueError(f"ssd: chunk {chunk} is not between 1 and {SSD_MAX_CHUNK} tokens")
    hpg = group_of(h, g)
    threads = L.check_block(threads_for(p, n), warps=True)
    pb = rows_per_block(p, n, threads)
    nc = -(-t // chunk)
    k1 = make_chunk_state(chunk, n, pb, threads, hpg, DECAY_SCALE)
    k2 = make_state_pass(chunk, CARRY)
    k3 = make_chunk_scan(chunk, n, p, threads, hpg, layout)
    L.check_shared(4 * (2 * chunk + 2 * TILE * (n + 1) + TILE * TILE))
    L.check_shared(4 * (2 * chunk + TILE * (n + 1) + TILE * pb))  # kernel 1's
    g1 = L.check_grid((nc, h, -(-p // pb)))
    g2 = L.check_grid((h, L.blocks_for(p * n, threads)))
    g3 = L.check_grid((nc, h))
    cs = cuda.device_array((h, t), np.float32)
    dts = cuda.device_array((h, t), np.float32)
    cstate = cuda.device_array((nc, h, p, n), np.float32)

    def launch(bufs):
        x, B = bufs["x"], bufs["B"]
        k1[g1, threads](cs, dts, cstate, x, bufs["dt_raw"], bufs["dt_bias"], bufs["A"], B)
        k2[g2, threads](bufs["state"], cstate, cs)
        k3[g3, threads](bufs["y"], x, B, bufs["C"], bufs["D"], cs, dts, cstate)

    launch.workspace = {"cs": cs, "dts": dts, "cstate": cstate}
    launch.tensor_cores, launch.tc_dtype = TENSOR_CORES, WR.DTYPE
    return launch

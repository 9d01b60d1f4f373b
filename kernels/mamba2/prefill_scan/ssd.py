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
   into ``cstate[c, h]``, staging ``B`` a 32-token tile at a time;
2. ``ssd_state_pass``, thread per state element of a head: walks the chunks
   in order from the carried state, replacing ``cstate[c]`` by the state
   entering chunk ``c`` and leaving the final state in ``state``;
3. ``ssd_chunk_scan``, block per (chunk, head): per 32-token tile of
   outputs, stages ``C``; per source tile up to the diagonal, stages ``B``,
   forms the tile's decay-masked ``C.B`` block ``M [32, 32]`` in shared
   memory, and accumulates ``M (x)``; then adds the entering state's read-out
   and the skip.

Every chunk of every head is independent in 1 and 3, so the long parts of
the work spread over ``chunks x heads`` blocks; only 2, ``P N`` elements
per head times the chunk count, is sequential in time.

Shared memory (kernel 3, the largest): the chunk's ``cum`` and ``dt``, the
``C`` and ``B`` tiles as fp32 rows of ``N + 1`` words (the pad staggers the
rows across banks for the ``C.B`` dots), and ``M``:
``geometry.ssd_shared_bytes(N)`` at the longest chunk (256), which must fit
the 48 KiB a block may declare statically: that is ``ssd_scan_fits``, the
condition of the decision table. The products run on FP32 CUDA cores.
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np
from numba import cuda, float32

from ...common import launch as L
from ._device import group_of, step_dt
from .geometry import SSD_MAX_CHUNK, SSD_TILE, ssd_scan_fits, ssd_shared_bytes

NAME = "ssd"
SUMMARY = "chunked SSD scan: chunk states, state passing, intra-chunk masked C.B blocks (3 launches)"
TILE = SSD_TILE
LAUNCHES = 3


def threads_for(p: int, n: int) -> int:
    """256 threads at model sizes; one warp for the simulator's tiny heads."""
    return 256 if p * n >= 4096 else 32


def rows_per_block(p: int, n: int, threads: int) -> int:
    """Head-dim rows of one chunk-state block: 8 state elements per thread."""
    return max(1, min(p, 8 * threads // n))


@lru_cache(maxsize=None)
def make_chunk_state(CHUNK: int, N: int, PB: int, THREADS: int, HPG: int, DECAY_SCALE: float = 1.0):
    """Kernel 1. ``DECAY_SCALE`` (tests only) scales the log-decay."""
    NS = N + 1
    BTILE = TILE * NS  # shared arrays are sized by constants computed here, not in the kernel
    EPT = (PB * N + THREADS - 1) // THREADS
    SC = float32(DECAY_SCALE)

    @cuda.jit
    def ssd_chunk_state(cs, dts, cstate, x, dt_raw, dt_bias, A, B):
        t_len, _, p_len = x.shape
        cum = cuda.shared.array(CHUNK, np.float32)
        dtv = cuda.shared.array(CHUNK, np.float32)
        bs = cuda.shared.array(BTILE, np.float32)
        w = cuda.shared.array(TILE, np.float32)
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
            for jj in range(tid, jn, THREADS):
                w[jj] = math.exp(last - cum[j0 + jj]) * dtv[j0 + jj]
            cuda.syncthreads()
            for k in range(EPT):
                e = tid + k * THREADS
                pr = e // N
                n = e - pr * N
                p = p0 + pr
                if pr < PB and p < p_len:
                    a = acc[k]
                    for jj in range(jn):
                        a += w[jj] * float32(x[t0 + j0 + jj, h, p]) * bs[jj * NS + n]
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


@lru_cache(maxsize=None)
def make_chunk_scan(CHUNK: int, N: int, P: int, THREADS: int, HPG: int):
    """Kernel 3."""
    NS = N + 1
    BTILE = TILE * NS
    MTILE = TILE * TILE
    OPT = (TILE * P + THREADS - 1) // THREADS

    @cuda.jit
    def ssd_chunk_scan(y, x, B, C, D, cs, dts, cstate):
        t_len = x.shape[0]
        cum = cuda.shared.array(CHUNK, np.float32)
        dtv = cuda.shared.array(CHUNK, np.float32)
        cs_t = cuda.shared.array(BTILE, np.float32)
        bs = cuda.shared.array(BTILE, np.float32)
        m = cuda.shared.array(MTILE, np.float32)
        acc = cuda.local.array(OPT, np.float32)
        tid = cuda.threadIdx.x
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
            for k in range(OPT):
                acc[k] = float32(0.0)
            for j0 in range(0, i0 + i_n, TILE):  # source tiles up to the diagonal
                jn = min(TILE, q - j0)
                for e in range(tid, jn * N, THREADS):
                    jj = e // N
                    bs[jj * NS + e - jj * N] = float32(B[t0 + j0 + jj, g, e - jj * N])
                cuda.syncthreads()
                for e in range(tid, TILE * TILE, THREADS):
                    ii = e // TILE
                    jj = e - ii * TILE
                    i = i0 + ii
                    j = j0 + jj
                    v = float32(0.0)
                    if ii < i_n and jj < jn and j <= i:
                        dot = float32(0.0)
                        for n in range(N):
                            dot += cs_t[ii * NS + n] * bs[jj * NS + n]
                        v = dot * math.exp(cum[i] - cum[j]) * dtv[j]
                    m[e] = v
                cuda.syncthreads()
                for k in range(OPT):
                    o = tid + k * THREADS
                    ii = o // P
                    p = o - ii * P
                    if ii < i_n:
                        a = acc[k]
                        for jj in range(jn):
                            a += m[ii * TILE + jj] * float32(x[t0 + j0 + jj, h, p])
                        acc[k] = a
                cuda.syncthreads()  # M and the B tile fully read
            for k in range(OPT):
                o = tid + k * THREADS
                ii = o // P
                p = o - ii * P
                if ii < i_n:
                    i = i0 + ii
                    inter = float32(0.0)
                    for n in range(N):
                        inter += cs_t[ii * NS + n] * cstate[c, h, p, n]
                    y[t0 + i, h, p] = acc[k] + math.exp(cum[i]) * inter + d_h * float32(x[t0 + i, h, p])

    return ssd_chunk_scan


def build(shape, DECAY_SCALE: float = 1.0, CARRY: bool = True):
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
    k3 = make_chunk_scan(chunk, n, p, threads, hpg)
    L.check_shared(4 * (2 * chunk + 2 * TILE * (n + 1) + TILE * TILE))
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
    return launch

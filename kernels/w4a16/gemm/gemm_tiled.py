"""W4A16 tiled GEMM: ``c[m, n] = a[m, k] @ W[n, k].T``.

``a`` fp16 ``[m, k]`` (row-major), ``W`` packed as in
``leverctl_kernels.common.int4`` (``qweight uint32[n, k/8]``,
``scales fp16[n, k/128]``), fp32 accumulation, ``c`` fp16 ``[m, n]``.

Tiling (one block per ``TILE_M x TILE_N`` tile of ``c``, ``blockIdx.x``
along N, ``blockIdx.y`` along M; ``THREADS_N x THREADS_M`` threads)::

              k0        k0+TILE_K                 n0 ... n0+TILE_N
    a   m0  [ A tile (fp16) ]  --fp32-->   As[TILE_K][TILE_M+1]  (k-major)
    W   n0  [ TILE_N rows x TILE_K/8 words ] --dequant--> Ws[TILE_K][TILE_N]  (swizzled)

    c[m0 + ty + i*THREADS_M, n0 + tx + j*THREADS_N] += As[kk][.] * Ws[kk][.]
        for i < TILE_M/THREADS_M, j < TILE_N/THREADS_N   (register micro-tile)

Per K-step the block loads the A tile (coalesced along k) and the packed W
tile (coalesced along packed words: a row's ``TILE_K/8`` words are one
contiguous run; see Loads below), dequantizes W once into shared memory
with its group scale, then every thread does ``TILE_K`` rank-1 updates of its register
micro-tile. The inner loop reads ``As`` as a broadcast and ``Ws`` along
consecutive columns. ``As`` is padded by one column so that its
transposing stores do not pile onto one bank. ``Ws`` is swizzled instead:
a warp's stores cover ``32 / WK`` rows by the ``WK`` words of a row, and
with ``TILE_N`` a multiple of 32 every word's eight values would land in
the same banks for each of those rows (a padded row of 65 floats still
gave two rows a bank at 64 x 64 x 64), so the column of K step ``kk``
is XORed with ``(kk / 8) * 32 / WK``: the warp's 32 stores then hit 32
banks, and a row of ``Ws`` stays a permutation within each 32 columns, so
the reads stay conflict-free. All accesses are conflict-free.

Loads. Where the arrays are C-contiguous and ``a`` is fp16 (the launch
checks), the kernel is the wide build, and where every row is also whole
16-byte units from an aligned start (``k % 32 == 0``; the kernel checks,
the same for every thread) it stages from 16-byte loads, the stage's
loads all issued before any is used:

* W: two lanes a row, 16 bytes (four packed words) each, so a warp's
  loads are its rows' 32-byte runs, whole sectors. A round of loads is
  32 bytes of each row: one 64-input tile, or two 32-input tiles, whose
  second is staged from the words the row's second lane carried in
  registers from the round's first. Its group scale comes from a window
  the lane loads at the window's first round and carries: eight groups
  (16 bytes) where a row's scales are whole 16-byte units, four (8
  bytes) where they are 8-byte units, else one element a round.
* A: a 16-byte unit (8 fp16) a lane, four lanes a row's 64 bytes, eight
  rows a warp, so its transposing stores stay conflict-free.

It stages exactly the values the element loads do (the same bits out).
Otherwise a thread loads one element of A and one packed word of W (and
its scale) at a time. The wide build is held by launch bounds to the
element build's resident blocks (``MAX_REGS``): unbounded, its carried
words and loads in flight took 88 registers at the default tiles' 256
threads and 80 at the small tiles' 128.

Edges: rows past ``m``, columns past ``n`` and (when ``K_EDGE``) packed
words past ``k`` load as zeros and are never stored; ``K_EDGE=False`` drops
the K checks and requires ``k % TILE_K == 0`` (enforced at launch).

Configurations:

* ``SMALL_M`` (``ffn_small_m``, m <= 64, k % 32 == 0): 16 x 32 x 32 tiles,
  128 threads (32 along N x 4 along M), 4 x 1 micro-tiles, no K edge.
  Little wasted work at m = 1..16 and twice the blocks along N of the
  default tiles, which matters when ``n / TILE_N`` is near the SM count.
* ``DEFAULT`` : 64 x 64 x 64 tiles, 256 threads (16 x 16), 4 x 4
  micro-tiles, all edges checked. 32.3 KiB of static shared memory.

This is an FP32-FMA GEMM, for the K the tensor-core GEMMs (``gemm_tc.py``)
cannot step by 16; at large m it is bound by the FP32 rate, at small m by
the weight stream.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from numba import cuda, float32, uint32, uint64

from ...common import cvt, vload
from ...common import launch as L
from ...common.int4_device import nibble
from ...common.launch import device_inline


@dataclass(frozen=True)
class GemmConfig:
    TILE_M: int
    TILE_N: int
    TILE_K: int
    THREADS_M: int
    THREADS_N: int
    K_EDGE: bool = True

    @property
    def threads(self) -> int:
        return self.THREADS_M * self.THREADS_N

    @property
    def shared_bytes(self) -> int:
        return 4 * self.TILE_K * ((self.TILE_M + 1) + self.TILE_N)


SMALL_M = GemmConfig(TILE_M=16, TILE_N=32, TILE_K=32, THREADS_M=4, THREADS_N=32, K_EDGE=False)
DEFAULT = GemmConfig(TILE_M=64, TILE_N=64, TILE_K=64, THREADS_M=16, THREADS_N=16, K_EDGE=True)


def _check(cfg: GemmConfig) -> None:
    if cfg.TILE_K % 8:
        raise ValueError(f"TILE_K={cfg.TILE_K}: a multiple of 8 (whole packed words)")
    if cfg.TILE_M % cfg.THREADS_M or cfg.TILE_N % cfg.THREADS_N:
        raise ValueError(f"{cfg}: tiles must split evenly over the threads")
    if cfg.TILE_N % 32 or not 1 <= cfg.TILE_K // 8 <= 32 or 32 % (cfg.TILE_K // 8):
        raise ValueError(f"{cfg}: the W tile's swizzle wants TILE_N a multiple of 32 and TILE_K / 8 dividing 32")
    L.check_block((cfg.THREADS_N, cfg.THREADS_M), warps=True)
    L.check_shared(cfg.shared_bytes)


MAX_REGS = 72  # the wide build's registers a thread: 3 blocks of 256 threads an SM, 7 of 128
FAULTS = ("carry_reused", "edge_short")  # tests only: a wide W stage's broken round and K edge


@device_inline
def _a_pair(As, at, AS, w, e):
    """Two fp16 of word ``w`` (K steps ``2e``, ``2e + 1`` of a 16-byte
    unit) to ``As``'s column at ``at``, one K row apart (``AS`` floats)."""
    lo, hi = cvt.f16x2_to_f32x2(w)
    As[uint64(at) + uint64(2 * e * AS)] = lo
    As[uint64(at) + uint64((2 * e + 1) * AS)] = hi


@device_inline
def _w_word(Ws, WS, SWZ, nn, ww, word, s):
    """Packed word ``ww`` of the tile's row ``nn``: its eight values times
    ``s`` to ``Ws``'s column ``nn`` (XORed by the word's swizzle)."""
    base = uint64(ww * 8 * WS + (nn ^ (ww * SWZ)))
    for j in range(8):
        Ws[base + uint64(j * WS)] = s * nibble(word, j)


@device_inline
def _scale_of(s0, s1, s2, s3, g):
    """Group ``g``'s scale (0-7) of a window of eight fp16 as four words."""
    word = s0 if g < 2 else (s1 if g < 4 else (s2 if g < 6 else s3))
    lo, hi = cvt.f16x2_to_f32x2(word)
    return hi if g & 1 else lo


@lru_cache(maxsize=None)
def make_gemm(
    TILE_M: int,
    TILE_N: int,
    TILE_K: int,
    THREADS_M: int,
    THREADS_N: int,
    K_EDGE: bool = True,
    SWIZZLE: bool = True,
    WIDE: bool = False,
    FAULT: str = "",
):
    """Compile the tiled GEMM for one tile configuration (see module notes).
    ``SWIZZLE=False`` (tests only) leaves ``Ws`` unswizzled: the same
    results, its stores in conflict. ``WIDE`` (C-contiguous arrays, fp16
    ``a``): the tiles staged from 16-byte loads where the arrays allow it
    (checked in the kernel, uniform for the launch), else as without it.
    ``FAULT`` (:data:`FAULTS`, tests only) plants a bug the check must see."""
    _check(GemmConfig(TILE_M, TILE_N, TILE_K, THREADS_M, THREADS_N, K_EDGE))
    if FAULT and FAULT not in FAULTS:
        raise ValueError(f"unknown fault {FAULT!r}")
    RM = TILE_M // THREADS_M
    RN = TILE_N // THREADS_N
    WK = TILE_K // 8  # packed words per tile row
    NT = THREADS_M * THREADS_N
    A_ELEMS = TILE_M * TILE_K
    W_WORDS = TILE_N * WK
    A_ITERS = (A_ELEMS + NT - 1) // NT
    W_ITERS = (W_WORDS + NT - 1) // NT
    AS = TILE_M + 1  # As's padded row stride
    WS = TILE_N
    SWZ = 32 // WK if SWIZZLE else 0  # Ws: K step kk's columns XORed with (kk // 8) * SWZ
    # Array sizes must be compile-time constants, not expressions in the kernel.
    AS_SIZE = TILE_K * AS
    WS_SIZE = TILE_K * WS
    ACC = RM * RN
    # The wide stage. W: two lanes a row, 16 bytes each, so a warp's loads
    # are its rows' 32-byte runs, whole sectors; a round of loads covers
    # R tiles (8 words of a row: two 32-input tiles, or one of 64), the
    # words of the round's later tile carried in registers to it. A: a
    # 16-byte unit (8 fp16) a lane, a warp's loads eight rows' 64 bytes.
    R = 8 // WK
    LOADERS = 2 * TILE_N
    A_UNITS = A_ELEMS // 8
    A_UITERS = (A_UNITS + NT - 1) // NT
    HALF = TILE_M * 4  # A units of one half-row column: four a row (64 bytes)
    if WIDE and (WK not in (4, 8) or LOADERS > NT):
        raise ValueError(f"a wide W stage wants TILE_K 32 or 64 and 2 x TILE_N <= threads, not {TILE_K}, {TILE_N}")
    if WIDE and A_UITERS > 2:
        raise ValueError(f"a wide A stage of {A_UNITS} units over {NT} threads: two a thread at most")
    CARRY_ALL = FAULT == "carry_reused"  # the round's first lanes stage every tile of it: the first twice
    EDGE_SHORT = FAULT == "edge_short"  # a lane's 16 bytes taken only where the next 16 are inside K too

    @device_inline
    def _a_place(idx):
        """A unit's row and 16-byte column: four lanes a row's 64 bytes,
        eight rows a warp (its transposing stores then conflict-free)."""
        h = idx // HALF
        rem = idx - h * HALF
        return rem >> 2, (rem & 3) + 4 * h

    @device_inline
    def a_load(a, idx, m0, k0, m, k):
        mm, kq = _a_place(idx)
        gm = m0 + mm
        gk = k0 + 8 * kq
        x0 = x1 = x2 = x3 = uint32(0)
        if idx < A_UNITS and gm < m and (not K_EDGE or gk < k):
            x0, x1, x2, x3 = vload.ldg_v4(a, gm * k + gk)
        return x0, x1, x2, x3

    @device_inline
    def a_put(As, idx, x):
        if idx < A_UNITS:
            mm, kq = _a_place(idx)
            at = 8 * kq * AS + mm
            _a_pair(As, at, AS, x[0], 0)
            _a_pair(As, at, AS, x[1], 1)
            _a_pair(As, at, AS, x[2], 2)
            _a_pair(As, at, AS, x[3], 3)

    # the wide build held to the element build's resident blocks: unbounded,
    # its loads in flight and A's two units took 88 registers at 256 threads
    # (two blocks an SM) and 80 at 128 (six); bounded, 80 and 72, no spill
    jit = L.jit_bounded(NT, 65536 // (NT * MAX_REGS)) if WIDE else cuda.jit

    @jit
    def gemm_tiled(c, a, qweight, scales):
        m = a.shape[0]
        k = a.shape[1]
        n = qweight.shape[0]
        kw = qweight.shape[1]
        As = cuda.shared.array(AS_SIZE, dtype=float32)
        Ws = cuda.shared.array(WS_SIZE, dtype=float32)
        acc = cuda.local.array(ACC, dtype=float32)
        ar = cuda.local.array(RM, dtype=float32)
        br = cuda.local.array(RN, dtype=float32)
        tx = cuda.threadIdx.x
        ty = cuda.threadIdx.y
        tid = ty * THREADS_N + tx
        m0 = cuda.blockIdx.y * TILE_M
        n0 = cuda.blockIdx.x * TILE_N
        for i in range(ACC):
            acc[i] = float32(0.0)
        # 16-byte loads where every row is whole 16-byte units from an
        # aligned start (the same for every thread: no divergence)
        vec = WIDE and vload.aligned16(a) and vload.aligned16(qweight) and k % 8 == 0 and kw % 4 == 0
        # the scales a window of groups a lane: eight (16 bytes) where a row
        # is whole 16-byte units, four (8 bytes) where it is 8-byte units
        ns = scales.shape[1]
        swin = vec and vload.aligned16(scales) and ns % 4 == 0
        win8 = ns % 8 == 0
        span = 1024 if win8 else 512  # the inputs a window's scales cover
        nn = tid >> 1  # the wide W stage: this lane's row and 16 bytes of a round
        p = tid & 1
        gn = n0 + nn
        own = (4 * p) // WK  # the round's tile its words are in (two 32-input tiles: p; one of 64: 0)
        wo = (4 * p) % WK  # its first word in that tile
        w0 = w1 = w2 = w3 = uint32(0)  # (carried: a round's later tile is staged from them)
        sv0 = sv1 = sv2 = sv3 = uint32(0)  # (carried: a window of eight group scales)
        s = float32(0.0)

        for k0 in range(0, k, TILE_K):
            if vec:
                # every load of the stage issued before any is used: the W
                # round's (at its first tile) and the scales', then A's
                if tid < LOADERS and (k0 // TILE_K) % R == 0:
                    gw = (k0 >> 3) + 4 * p
                    w0 = w1 = w2 = w3 = uint32(0)
                    s = float32(0.0)
                    if gn < n and (gw + 4 < kw if EDGE_SHORT else gw < kw):
                        w0, w1, w2, w3 = vload.ldg_v4(qweight, gn * kw + gw)
                        g = gw >> 4
                        if swin:
                            if (k0 & (span - 1)) == 0:  # a window's first round: its scales
                                if win8:
                                    sv0, sv1, sv2, sv3 = vload.ldg_v4(scales, gn * ns + g)
                                else:
                                    sv0, sv1 = vload.ldg_v2(scales, gn * ns + g)
                            s = _scale_of(sv0, sv1, sv2, sv3, g & (7 if win8 else 3))
                        else:
                            s = float32(scales[gn, g])
                # A tile -> As[kk][mm]: 16 bytes a lane, four lanes a row's 64 bytes
                xa = a_load(a, tid, m0, k0, m, k)
                xb = xa
                if A_UITERS == 2:
                    xb = a_load(a, tid + NT, m0, k0, m, k)
                a_put(As, tid, xa)
                if A_UITERS == 2:
                    a_put(As, tid + NT, xb)
                # W tile -> Ws[kk][nn]: the lanes whose words are this tile's
                if tid < LOADERS and ((own == 0) if CARRY_ALL else (own == (k0 // TILE_K) % R)):
                    _w_word(Ws, WS, SWZ, nn, wo, w0, s)
                    _w_word(Ws, WS, SWZ, nn, wo + 1, w1, s)
                    _w_word(Ws, WS, SWZ, nn, wo + 2, w2, s)
                    _w_word(Ws, WS, SWZ, nn, wo + 3, w3, s)
            else:
                # A tile -> As[kk][mm] (fp32), consecutive threads along k.
                for it in range(A_ITERS):
                    idx = tid + it * NT
                    if idx < A_ELEMS:
                        mm = idx // TILE_K
                        kk = idx - mm * TILE_K
                        gm = m0 + mm
                        gk = k0 + kk
                        v = float32(0.0)
                        if gm < m and (not K_EDGE or gk < k):
                            v = float32(a[gm, gk])
                        As[uint32(kk * AS + mm)] = v
                # W tile -> Ws[kk][nn], dequantized; consecutive threads along words.
                kw0 = k0 >> 3
                for it in range(W_ITERS):
                    idx = tid + it * NT
                    if idx < W_WORDS:
                        wn = idx // WK
                        ww = idx - wn * WK
                        gwn = n0 + wn
                        gw = kw0 + ww
                        word = uint32(0)
                        sc = float32(0.0)
                        if gwn < n and (not K_EDGE or gw < kw):
                            word = qweight[gwn, gw]
                            sc = float32(scales[gwn, gw >> 4])
                        _w_word(Ws, WS, SWZ, wn, ww, word, sc)
            cuda.syncthreads()
            for ww in range(WK):
                # the eight K steps of a packed word share their swizzle;
                # unsigned indices: no wraparound code in the inner loop
                sw = uint32(ww * SWZ)
                for jj in range(8):
                    kk = ww * 8 + jj
                    a0 = uint32(kk * AS + ty)
                    b0 = uint32(kk * WS)
                    for i in range(RM):
                        ar[i] = As[a0 + uint32(i * THREADS_M)]
                    for j in range(RN):
                        br[j] = Ws[b0 + ((uint32(tx + j * THREADS_N)) ^ sw)]
                    for i in range(RM):
                        for j in range(RN):
                            acc[i * RN + j] += ar[i] * br[j]
            cuda.syncthreads()

        for i in range(RM):
            gm = m0 + ty + i * THREADS_M
            if gm < m:
                for j in range(RN):
                    gn = n0 + tx + j * THREADS_N
                    if gn < n:
                        c[gm, gn] = acc[i * RN + j]

    return gemm_tiled


def kernel_for(cfg: GemmConfig, wide: bool = True, fault: str = ""):
    """The kernel of ``cfg``: ``wide``, the build for C-contiguous arrays
    and fp16 ``a`` (16-byte loads where they are aligned)."""
    return make_gemm(cfg.TILE_M, cfg.TILE_N, cfg.TILE_K, cfg.THREADS_M, cfg.THREADS_N, cfg.K_EDGE, True, wide, fault)


def takes_wide(a, qweight, scales) -> bool:
    """Host side: whether the arrays suit the wide build (C-contiguous, an
    fp16 ``a``); its kernel checks their alignment itself."""
    return a.dtype == np.float16 and all(vload.c_contiguous(x) for x in (a, qweight, scales))


def supports(cfg: GemmConfig, m: int, n: int, k: int) -> str:
    """Empty when ``cfg`` can run ``m x n x k``, else why not."""
    if k % 8:
        return f"k={k} is not a multiple of 8 (the W4A16 layout)"
    if not cfg.K_EDGE and k % cfg.TILE_K:
        return f"k={k} is not a multiple of {cfg.TILE_K}"
    return ""


def launch_config(cfg: GemmConfig, m: int, n: int):
    grid = L.check_grid((L.blocks_for(n, cfg.TILE_N), L.blocks_for(m, cfg.TILE_M)))
    block = (cfg.THREADS_N, cfg.THREADS_M)
    L.check_block(block, warps=True)
    L.check_shared(cfg.shared_bytes)
    return grid, block


def make_launch(cfg: GemmConfig, m: int, n: int, k: int):
    """``launch(c, a, qweight, scales)`` for ``c[m, n] = a[m, k] W[n, k]^T``."""
    why = supports(cfg, m, n, k)
    if why:
        raise ValueError(f"{cfg}: {why}")
    grid, block = launch_config(cfg, m, n)

    def launch(c, a, qweight, scales):
        kernel_for(cfg, takes_wide(a, qweight, scales))[grid, block](c, a, qweight, scales)

    return launch


def build_small_m(shape):
    run = make_launch(SMALL_M, shape["m"], shape["n"], shape["k"])
    return lambda bufs: run(bufs["c"], bufs["a"], bufs["qweight"], bufs["scales"])


def build_default(shape):
    run = make_launch(DEFAULT, shape["m"], shape["n"], shape["k"])
    return lambda bufs: run(bufs["c"], bufs["a"], bufs["qweight"], bufs["scales"])

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
contiguous run), dequantizes W once into shared memory with its group
scale, then every thread does ``TILE_K`` rank-1 updates of its register
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

from numba import cuda, float32, uint32

from ...common import launch as L
from ...common.int4_device import nibble


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


@lru_cache(maxsize=None)
def make_gemm(
    TILE_M: int, TILE_N: int, TILE_K: int, THREADS_M: int, THREADS_N: int, K_EDGE: bool = True, SWIZZLE: bool = True
):
    """Compile the tiled GEMM for one tile configuration (see module notes).
    ``SWIZZLE=False`` (tests only) leaves ``Ws`` unswizzled: the same
    results, its stores in conflict."""
    _check(GemmConfig(TILE_M, TILE_N, TILE_K, THREADS_M, THREADS_N, K_EDGE))
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

    @cuda.jit
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

        for k0 in range(0, k, TILE_K):
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
                    nn = idx // WK
                    ww = idx - nn * WK
                    gn = n0 + nn
                    gw = kw0 + ww
                    base = ww * 8 * WS + (nn ^ (ww * SWZ))
                    if gn < n and (not K_EDGE or gw < kw):
                        word = qweight[gn, gw]
                        s = float32(scales[gn, gw >> 4])
                        for j in range(8):
                            Ws[uint32(base + j * WS)] = s * nibble(word, j)
                    else:
                        for j in range(8):
                            Ws[uint32(base + j * WS)] = float32(0.0)
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


def kernel_for(cfg: GemmConfig):
    return make_gemm(cfg.TILE_M, cfg.TILE_N, cfg.TILE_K, cfg.THREADS_M, cfg.THREADS_N, cfg.K_EDGE)


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
    kern = kernel_for(cfg)
    grid, block = launch_config(cfg, m, n)

    def launch(c, a, qweight, scales):
        kern[grid, block](c, a, qweight, scales)

    return launch


def build_small_m(shape):
    run = make_launch(SMALL_M, shape["m"], shape["n"], shape["k"])
    return lambda bufs: run(bufs["c"], bufs["a"], bufs["qweight"], bufs["scales"])


def build_default(shape):
    run = make_launch(DEFAULT, shape["m"], shape["n"], shape["k"])
    return lambda bufs: run(bufs["c"], bufs["a"], bufs["qweight"], bufs["scales"])

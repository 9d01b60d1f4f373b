"""W4A16 tensor-core GEMMs: ``c[m, n] = a[m, k] @ W[n, k].T`` on the warp
MMA primitive (``common/mma.py``, ``mma.sync.aligned.m16n8k16`` with fp16
inputs and f32 accumulators).

``a`` fp16 ``[m, k]`` (row-major), ``W`` packed as in
``leverctl_kernels.common.int4`` (``qweight uint32[n, k/8]``,
``scales fp16[n, k/128]``), fp32 accumulation, ``c`` fp16 ``[m, n]``.
Every kernel here requires ``k % 16 == 0`` (one MMA step; enforced at
launch by :func:`supports`); m and n are free.

The MMA is the **f16** form (``.f32.f16.f16.f32``): this project's W4A16
activations are fp16 (the layout ``int4.py`` and ``naive.py`` describe), so
the dequantised weights are rounded to fp16 too. A bf16-activation engine
would take ``mma_bf16_16816`` with the same fragments.

Three kernels, one set of device helpers:

* :func:`make_gemm_mma`, the first one: one warp per 16 x 8 (or 16 x 16)
  tile, nothing shared. Tested, not a variant.
* :func:`make_gemm_small_m`, the ``small_m`` variant's (m <= 64): a block
  of ``KWARPS = 4`` warps on one ``16*WM x 8*WN`` tile (WM = 1, 2 or 4 from
  m; WN = 2), the warps splitting K and summing through shared memory.
* :func:`make_gemm_tiles`, the ``default_tiles`` variant's (any m): 64 x 64
  block tiles of 4 warps side by side, each 64 x 16; the A tile staged in
  shared memory and read with ``ldmatrix``.

The first kernel's tiling (one block of 32 threads per 16 x 8 tile of
``c``; ``n_mmas=2``: 16 x 16, two MMAs per step sharing the A fragment, the
second on columns n0+8..n0+15), ``blockIdx.x`` along N, ``blockIdx.y``
along M; the warp walks K in steps of 16, one MMA per step and 8 columns::

                 k0 .. k0+15                      n0 .. n0+7
    a   r0  [ A 16x16 fp16 ]  --(A fragment: 4 x .b32 per lane)--+
                                                                 |  mma.sync
    W   n0  [ 8 rows x 2 packed words ]                          v  m16n8k16
            --nibble * scale (fp32, exact)--> fp16 pairs --> B fragment (2 x .b32)
                                                 D (4 x f32 per lane) += A @ B

    the B operand is W's tile transposed: B[kk, nn] = W[n0 + nn, k0 + kk]

Which lane dequantises which weights: exactly the elements the B layout
gives it, read through ``mma.b_elem(lane, i)`` (never lane arithmetic here).
With ``g = lane >> 2`` and ``t = lane % 4`` (see ``mma.py``) that is::

    lane (g, t):  b0 = W[n0+g, k0+2t], W[n0+g, k0+2t+1]   (word k0/8,   nibbles 2t, 2t+1)
                  b1 = W[n0+g, k0+2t+8], W[n0+g, k0+2t+9] (word k0/8+1, nibbles 2t, 2t+1)

    word k0/8 of row n0+g:  nibble 0 1 | 2 3 | 4 5 | 6 7
                            lane  4g   | 4g+1| 4g+2| 4g+3     (b0; word k0/8+1 likewise for b1)

The variants' kernels load that fragment with one 64-bit load: with
``k % 16 == 0`` the two words k0/8 and k0/8+1 of a row are one aligned
``uint64`` (``qweight`` viewed as ``uint64[n, k/16]``), the low word
holding b0's nibbles and the high word b1's; one scale serves both
registers. Their A registers are one 32-bit load each (``a`` viewed as
``uint32[m, k/2]``: a register's two elements are adjacent k of one row,
the lower k in the low half, as both the layout and little-endian memory
have it).

``small_m`` (``make_gemm_small_m(WM)``), 128 threads, grid
``(ceil(n / 16), ceil(m / (16 WM)))``::

    block tile  16*WM rows x 16 columns, all of K
    warp w      K steps w, w+4, w+8, ... (k0 = 16 s): the four warps read
                adjacent 16-k slices, together 64 k = one 32-byte sector
                of each weight row per round
    per step    B: 2 fragments (columns n0..n0+7, n0+8..n0+15), dequantised
                once, each used by WM MMAs
                A: WM fragments (rows r0+16i), each used by 2 MMAs
    end         warps 1..3 write their 4*WM*2 partial sums per lane to
                shared memory ([warp][acc][lane]: conflict-free); warp 0
                adds them in warp order and stores (one rounding to fp16)

  Why split K inside the block rather than give each warp its own
  columns: at m <= 64 the GEMM streams the weights, and the decode FFN's
  shapes have n = 512 to 2048. A 16-column block makes n/16 = 32 to 128
  blocks (the H200 has 132 SMs); 64-column blocks would leave most SMs
  idle. WM grows with m (1, 2, 4 for m <= 16, 32, 64) so that every weight
  fragment is dequantised once per block and reused by WM MMAs. The price
  is A's: each block reads its 16*WM rows of A, so A crosses L2 n/16 times
  (m = 64, k = 2048, n = 2048: 32 MB from L2 against 2 MB of weights from
  DRAM). Wider blocks at larger m trade that against grid fill; which wins
  is for a GPU run to say.

``default_tiles`` (``make_gemm_tiles()``), 128 threads, grid
``(ceil(n / 64), ceil(m / 64))``, K tiles of 64::

    shared  As[64][72] uint16 (fp16 bits): A rows bm0..bm0+63, k kt..kt+63;
            rows past m are zeros. Stride 72 halves = 144 bytes: the eight
            16-byte rows one ldmatrix phase reads fall in eight different
            bank quads (stride 128 would put all eight on the same banks),
            and every row start stays 16-byte aligned as ldmatrix needs.
    warps   1 x 4; warp w owns all 64 rows and columns 16 w .. 16 w + 15
    per K tile  stage As (consecutive threads read consecutive 32-bit words
            of a row), barrier; 4 K steps, each: 4 x ldmatrix.x4 (A rows
            +0, +16, +32, +48), 2 B fragments dequantised (columns +0,
            +8), 8 MMAs (each A used twice, each B four times); barrier
    end     32 f32 accumulators per lane, rounded to fp16 once at the store

  Why 1 x 4 warps of 64 x 16 rather than 2 x 2 of 32 x 32 (the same
  accumulators): dequantising the weights, not the MMA, is the inner
  loop's cost (per weight: nibble shifts and masks, an FADD, an FMUL and
  half a pack), and with every warp on its own columns each weight is
  dequantised once per block instead of twice; the A tile, read by all four
  warps, is what shared memory is for. One 64 x 64 block (128 threads,
  9 KiB of shared memory) rather than 128 x 64: at m = 256 and n = 2048
  that is 128 blocks instead of 64 on 132 SMs. No software pipelining:
  reading the next A tile into registers during this tile's MMAs (16
  words a thread) took ptxas from 83 registers to 181 (two blocks an SM
  instead of five) and spilled under a 128-register bound, so the kernel
  leaves latency hiding to the other resident blocks until a GPU run can
  weigh the two. No B in shared memory either: left for later.

Hardware constraints behind each choice:

* The MMA's B operand is ``.col``: a lane's register holds two
  *consecutive k* of one column n. The packed layout puts consecutive k of
  one output row in consecutive nibbles of one word, so both halves of a
  B register come from one 32-bit word (the module asserts, from the
  layout data, that each register's two elements share a word and a scale
  group). The four lanes of a quad (same g) read the same word: one
  broadcast per quad in the warp's load, eight distinct rows per request.
  The weights are read as stored; re-packing them offline so that one
  lane's word holds its fragments for several k-steps (as Marlin does)
  would cut this to one load per lane per 64 k, and is left for later.
* Tensor cores take fp16 (or bf16) operands, never int4 with an fp16 scale
  at sm_90 (``mma.sync`` has s4 only with s4 A and s32 results). So the
  weight is dequantised in registers, as the FMA kernel does it: the nibble
  becomes an exact fp32 ``q - 8`` (``common.int4_device.nibble``, no int-to-float
  conversion), is multiplied by its group scale in fp32 (exact), and is
  rounded once to fp16 (``cvt.rn.f16.f32``): the only rounding the FMA GEMM
  does not have, <= 2^-11 relative per weight. Scales are per (row, group
  of 128): a 16-step never straddles a group, so one scale serves a whole
  B fragment.
* ``mma.sync.aligned`` and ``ldmatrix.sync.aligned`` need all 32 lanes,
  with the same shapes: lanes whose rows (A) or columns (B) lie past ``m``
  or ``n`` do not skip the MMA; they feed zeros (no out-of-range read) and
  their results are not stored. Every branch around an MMA is uniform over
  the warp (a K step, a warp index). K has no edge: ``k % 16 == 0``.
* Accumulators stay in f32 for the whole K loop (the MMA's ``.f32``
  accumulators) and are rounded to fp16 once, at the store, which goes
  through ``mma.c_elem`` and writes only in-range elements.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
from numba import config, cuda, float32, uint32, uint64

from ...common import int4, mma
from ...common import launch as L
from ...common.int4_device import nibble

TILE_M, TILE_N, TILE_K = mma.M, mma.N, mma.K  # one MMA's tile per warp and step
THREADS = mma.WARP  # one warp per block

_U16 = uint32(16)
_WORD_SHIFT = 3  # log2(int4.PACK): k -> packed word
_GROUP_SHIFT = 7  # log2(int4.GROUP): k -> scale group
assert 1 << _WORD_SHIFT == int4.PACK and 1 << _GROUP_SHIFT == int4.GROUP
assert int4.GROUP % TILE_K == 0  # a K step never straddles a scale group


def _check_b_layout() -> None:
    """Each B register's two elements (ISA elements i, i+1) are consecutive
    k of one column, within one packed word: one load serves a register."""
    for lane in range(THREADS):
        for i in (0, 2):
            (k_lo, n_lo), (k_hi, n_hi) = mma.B_TABLE[lane, i], mma.B_TABLE[lane, i + 1]
            assert n_lo == n_hi and k_hi == k_lo + 1, (lane, i)
            assert k_lo >> _WORD_SHIFT == k_hi >> _WORD_SHIFT, (lane, i)


_check_b_layout()


@cuda.jit(device=True, inline="always")
def _a_pair(A, m, r0, k0, lane, i):
    """A register ``i // 2`` of this lane (fp16 bits of ISA elements i and
    i + 1, low half first); rows past ``m`` read as zero."""
    r, c = mma.a_elem(lane, i)
    lo = uint32(0)
    if r0 + r < m:
        lo = uint32(A[r0 + r, k0 + c])
    r, c = mma.a_elem(lane, i + 1)
    hi = uint32(0)
    if r0 + r < m:
        hi = uint32(A[r0 + r, k0 + c])
    return lo | (hi << _U16)


def make_b_pair(group_shift):
    """The dequantising B loader, with the scale group taken as ``k >>
    group_shift`` (tests pass a wrong shift to prove the check sees it)."""

    @cuda.jit(device=True, inline="always")
    def b_pair(qweight, scales, n, n0, k0, lane, i):
        """B register ``i // 2`` of this lane: ``W[n0 + col, k0 + k]`` of ISA
        elements i and i + 1, dequantised and rounded to fp16, packed low
        half first; columns past ``n`` are zero."""
        v0 = float32(0.0)
        v1 = float32(0.0)
        k, col = mma.b_elem(lane, i)
        gn = n0 + col
        if gn < n:
            gk = k0 + k
            word = qweight[gn, gk >> _WORD_SHIFT]  # both elements' word (_check_b_layout)
            s = float32(scales[gn, gk >> group_shift])
            v0 = s * nibble(word, gk & (int4.PACK - 1))
            k, col = mma.b_elem(lane, i + 1)
            gk = k0 + k
            v1 = s * nibble(word, gk & (int4.PACK - 1))
        h = cuda.local.array(2, dtype=np.float16)
        h[0] = np.float16(v0)  # cvt.rn.f16.f32
        h[1] = np.float16(v1)
        # Two fp16 in memory order viewed as one .b32: a register move on
        # the GPU (as in ``common.int4_device.nibble``), a NumPy view in the simulator.
        return h.view(np.uint32)[0]

    return b_pair


_b_pair = make_b_pair(_GROUP_SHIFT)


@cuda.jit(device=True, inline="always")
def _store_c(c, m, n, r0, n0, lane, i, v):
    r, col = mma.c_elem(lane, i)
    if r0 + r < m and n0 + col < n:
        c[r0 + r, n0 + col] = v


def make_gemm_mma(b_pair=_b_pair, k_step=TILE_K, n_mmas=1):
    """Compile the kernel ``(c, a_bits, qweight, scales)``; ``a_bits`` is
    ``a`` viewed as uint16. ``n_mmas`` (1 or 2): MMAs per K step, i.e. a
    16 x 8 or a 16 x 16 tile per warp; two share one A fragment (half the
    activation loads per MMA, four more accumulators). ``b_pair`` and
    ``k_step`` exist for the tests' broken variants; the real kernels are
    :func:`kernel`'s."""
    if n_mmas not in (1, 2):
        raise ValueError(f"n_mmas={n_mmas}: 1 (16 x 8 tiles) or 2 (16 x 16)")
    TN = TILE_N * n_mmas
    TWO = n_mmas == 2

    @cuda.jit
    def gemm_mma(c, a, qweight, scales):
        m = a.shape[0]
        k = a.shape[1]
        n = qweight.shape[0]
        r0 = cuda.blockIdx.y * TILE_M
        n0 = cuda.blockIdx.x * TN
        n1 = n0 + TILE_N
        lane = cuda.laneid
        d0 = float32(0.0)
        d1 = float32(0.0)
        d2 = float32(0.0)
        d3 = float32(0.0)
        e0 = float32(0.0)
        e1 = float32(0.0)
        e2 = float32(0.0)
        e3 = float32(0.0)
        for k0 in range(0, k, k_step):
            a0 = _a_pair(a, m, r0, k0, lane, 0)
            a1 = _a_pair(a, m, r0, k0, lane, 2)
            a2 = _a_pair(a, m, r0, k0, lane, 4)
            a3 = _a_pair(a, m, r0, k0, lane, 6)
            b0 = b_pair(qweight, scales, n, n0, k0, lane, 0)
            b1 = b_pair(qweight, scales, n, n0, k0, lane, 2)
            d0, d1, d2, d3 = mma.mma_f16_16816(a0, a1, a2, a3, b0, b1, d0, d1, d2, d3)
            if TWO:  # a compile-time constant: the branch folds away
                b0 = b_pair(qweight, scales, n, n1, k0, lane, 0)
                b1 = b_pair(qweight, scales, n, n1, k0, lane, 2)
                e0, e1, e2, e3 = mma.mma_f16_16816(a0, a1, a2, a3, b0, b1, e0, e1, e2, e3)
        _store_c(c, m, n, r0, n0, lane, 0, d0)
        _store_c(c, m, n, r0, n0, lane, 1, d1)
        _store_c(c, m, n, r0, n0, lane, 2, d2)
        _store_c(c, m, n, r0, n0, lane, 3, d3)
        if TWO:
            _store_c(c, m, n, r0, n1, lane, 0, e0)
            _store_c(c, m, n, r0, n1, lane, 1, e1)
            _store_c(c, m, n, r0, n1, lane, 2, e2)
            _store_c(c, m, n, r0, n1, lane, 3, e3)

    gemm_mma.tile_n = TN  # read by make_launch for the grid
    return gemm_mma


@lru_cache(maxsize=None)
def kernel(n_mmas: int = 1):
    """The kernel for 16 x (8 * ``n_mmas``) tiles."""
    return make_gemm_mma(n_mmas=n_mmas)


def supports(m: int, n: int, k: int) -> str:
    """Empty when the kernel can run ``m x n x k``, else why not."""
    if k <= 0 or k % TILE_K:
        return f"k={k} is not a positive multiple of {TILE_K} (one MMA step; no K edge)"
    return ""


def launch_config(m: int, n: int, tile_n: int = TILE_N):
    grid = L.check_grid((L.blocks_for(n, tile_n), L.blocks_for(m, TILE_M)))
    L.check_block(THREADS, warps=True)
    return grid, THREADS


def make_launch(m: int, n: int, k: int, n_mmas: int = 1, kern=None):
    """``launch(c, a, qweight, scales)`` for ``c[m, n] = a[m, k] W[n, k]^T``
    (``a`` fp16; passed to the kernel as its uint16 bits) with 16 x (8 *
    ``n_mmas``) tiles, or with ``kern`` (from :func:`make_gemm_mma`)."""
    why = supports(m, n, k)
    if why:
        raise ValueError(f"gemm_mma: {why}")
    kern = kern or kernel(n_mmas)
    grid, block = launch_config(m, n, kern.tile_n)

    def launch(c, a, qweight, scales):
        kern[grid, block](c, a.view(np.uint16), qweight, scales)

    return launch


def build(shape, n_mmas: int = 1):
    run = make_launch(shape["m"], shape["n"], shape["k"], n_mmas)
    return lambda bufs: run(bufs["c"], bufs["a"], bufs["qweight"], bufs["scales"])


# ── the variants' kernels ────────────────────────────────────────────────────

_SIM = config.ENABLE_CUDASIM  # the simulator's shared arrays take no alignment
_U64_32 = uint64(32)
_HALF_MASK = uint32(0xFFFF)


def _check_fragment_words() -> None:
    """The variants' loads, checked against the layout data: each A register
    is two adjacent k of one row, the lower k even (one aligned 32-bit
    word of ``a``); each B register's two elements are adjacent k of one
    column in one packed word, and the two registers of a fragment lie in
    the two words of one 16-k step (one aligned ``uint64``)."""
    for lane in range(THREADS):
        for i in range(0, 8, 2):
            (r_lo, c_lo), (r_hi, c_hi) = mma.A_TABLE[lane, i], mma.A_TABLE[lane, i + 1]
            assert r_lo == r_hi and c_hi == c_lo + 1 and c_lo % 2 == 0, (lane, i)
        for i in (0, 2):
            k_lo = mma.B_TABLE[lane, i, 0]
            assert 0 <= k_lo < TILE_K and (k_lo >> _WORD_SHIFT) == i // 2, (lane, i)


_check_fragment_words()


@cuda.jit(device=True, inline="always")
def a_reg(a32, m, r0, k0, lane, i):
    """A register ``i // 2`` of this lane: one 32-bit word of ``a32`` (``a``
    viewed as ``uint32[m, k/2]``), both fp16 of ISA elements i and i + 1;
    rows past ``m`` are zero."""
    r, c = mma.a_elem(lane, i)
    v = uint32(0)
    if r0 + r < m:
        v = a32[r0 + r, (k0 + c) >> 1]
    return v


@cuda.jit(device=True, inline="always")
def _f16x2(v0, v1):
    """Two fp32 rounded to fp16 (``cvt.rn.f16.f32``), packed low half first
    into one .b32 (a register move on the GPU, a NumPy view in the
    simulator)."""
    h = cuda.local.array(2, dtype=np.float16)
    h[0] = np.float16(v0)
    h[1] = np.float16(v1)
    return h.view(np.uint32)[0]


def make_b_frag(group_shift=_GROUP_SHIFT):
    """The variants' dequantising B loader, with the scale group taken as
    ``k >> group_shift`` (tests pass a wrong shift to prove the check sees
    it)."""

    @cuda.jit(device=True, inline="always")
    def half(dw, s, lane, i):
        # ISA elements i, i + 1: word (k >> 3) of the 16-k step, nibbles k % 8, +1.
        k, _col = mma.b_elem(lane, i)
        word = uint32((dw >> (uint64(k >> _WORD_SHIFT) * _U64_32)) & uint64(0xFFFFFFFF))
        j = k & (int4.PACK - 1)
        return _f16x2(s * nibble(word, j), s * nibble(word, j + 1))

    @cuda.jit(device=True, inline="always")
    def b_frag(qw64, scales, n, n0, k0, lane):
        """``(b0, b1)``: ``W[n0 + col, k0 + k]`` of this lane's B elements,
        dequantised and rounded to fp16; columns past ``n`` are zero. One
        64-bit load (words k0/8, k0/8 + 1 of the row) and one scale."""
        _k, col = mma.b_elem(lane, 0)
        gn = n0 + col
        dw = uint64(0)
        s = float32(0.0)
        if gn < n:
            dw = qw64[gn, k0 >> 4]
            s = float32(scales[gn, k0 >> group_shift])
        return half(dw, s, lane, 0), half(dw, s, lane, 2)

    return b_frag


b_frag = make_b_frag()


@cuda.jit(device=True, inline="always")
def _mma_acc(acc, base, a0, a1, a2, a3, b0, b1):
    """``acc[base : base + 4] += A @ B`` (one MMA on accumulators held in a
    local array the compiler keeps in registers)."""
    d0, d1, d2, d3 = mma.mma_f16_16816(a0, a1, a2, a3, b0, b1, acc[base], acc[base + 1], acc[base + 2], acc[base + 3])
    acc[base] = d0
    acc[base + 1] = d1
    acc[base + 2] = d2
    acc[base + 3] = d3


@cuda.jit(device=True, inline="always")
def _store_acc(c, m, n, r0, n0, lane, acc, base):
    _store_c(c, m, n, r0, n0, lane, 0, acc[base])
    _store_c(c, m, n, r0, n0, lane, 1, acc[base + 1])
    _store_c(c, m, n, r0, n0, lane, 2, acc[base + 2])
    _store_c(c, m, n, r0, n0, lane, 3, acc[base + 3])


def _jit_bounded(threads: int, min_blocks: int):
    """``cuda.jit`` with launch bounds ``(threads, min_blocks)``: ptxas keeps
    the registers to what ``min_blocks`` blocks per SM allow. The
    simulator's ``jit`` has no such option and gets a plain ``cuda.jit``."""
    try:
        return cuda.jit(launch_bounds=(threads, min_blocks))
    except TypeError:
        return cuda.jit


# small_m

KWARPS = 4  # warps of a small_m block, splitting K
SMALL_M_WN = 2  # 8-column MMA tiles per small_m block (16 columns)
SMALL_M_WM = (1, 2, 4)  # 16-row MMA tiles per block: the least of these covering m (4 past 64)
# Four blocks of 128 threads per SM (16 warps to hide the weight loads'
# latency): at most 128 registers a thread. WM = 4 asks ptxas for 132 unbounded.
SMALL_M_MIN_BLOCKS = 4


def small_m_wm(m: int) -> int:
    """WM for ``m`` rows: the fewest 16-row tiles covering m, of 1, 2, 4."""
    for wm in SMALL_M_WM:
        if m <= 16 * wm:
            return wm
    return SMALL_M_WM[-1]


@lru_cache(maxsize=None)
def make_gemm_small_m(WM: int, WN: int = SMALL_M_WN, a_load=a_reg, b_load=b_frag, k_warps=KWARPS):
    """Compile the ``small_m`` kernel ``(c, a32, qw64, scales)``: a block of
    ``KWARPS`` warps on a ``16*WM x 8*WN`` tile, splitting K (module notes).
    ``a_load``, ``b_load`` and ``k_warps`` (the K stride in steps, a wrong
    one drops or repeats steps) exist for the tests' broken variants."""
    if WM not in SMALL_M_WM or WN not in (1, 2, 4):
        raise ValueError(f"WM={WM}, WN={WN}: WM one of {SMALL_M_WM}, WN one of 1, 2, 4")
    ACC = 4 * WM * WN
    TM, TN = TILE_M * WM, TILE_N * WN
    KSTRIDE = TILE_K * k_warps
    RED = (KWARPS - 1, ACC, mma.WARP)  # array shapes: constants, not expressions in the kernel
    BF = 2 * WN

    @_jit_bounded(KWARPS * mma.WARP, SMALL_M_MIN_BLOCKS)
    def gemm_small_m(c, a32, qw64, scales):
        m = a32.shape[0]
        k = a32.shape[1] * 2
        n = qw64.shape[0]
        lane = cuda.laneid
        warp = cuda.threadIdx.x // mma.WARP
        r0 = cuda.blockIdx.y * TM
        n0 = cuda.blockIdx.x * TN
        acc = cuda.local.array(ACC, dtype=float32)
        for q in range(ACC):
            acc[q] = float32(0.0)
        bf = cuda.local.array(BF, dtype=uint32)
        for k0 in range(warp * TILE_K, k, KSTRIDE):
            for j in range(WN):
                b0, b1 = b_load(qw64, scales, n, n0 + TILE_N * j, k0, lane)
                bf[2 * j] = b0
                bf[2 * j + 1] = b1
            for i in range(WM):
                ri = r0 + TILE_M * i
                a0 = a_load(a32, m, ri, k0, lane, 0)
                a1 = a_load(a32, m, ri, k0, lane, 2)
                a2 = a_load(a32, m, ri, k0, lane, 4)
                a3 = a_load(a32, m, ri, k0, lane, 6)
                for j in range(WN):
                    _mma_acc(acc, 4 * (i * WN + j), a0, a1, a2, a3, bf[2 * j], bf[2 * j + 1])
        # Warps 1.. hand their partial sums to warp 0: [warp][acc][lane],
        # consecutive lanes on consecutive banks.
        red = cuda.shared.array(RED, dtype=float32)
        if warp > 0:
            for q in range(ACC):
                red[warp - 1, q, lane] = acc[q]
        cuda.syncthreads()
        if warp == 0:
            for w in range(KWARPS - 1):
                for q in range(ACC):
                    acc[q] += red[w, q, lane]
            for i in range(WM):
                for j in range(WN):
                    _store_acc(c, m, n, r0 + TILE_M * i, n0 + TILE_N * j, lane, acc, 4 * (i * WN + j))

    gemm_small_m.tile = (TM, TN)
    gemm_small_m.threads = KWARPS * mma.WARP
    gemm_small_m.shared_bytes = 4 * (KWARPS - 1) * ACC * mma.WARP
    return gemm_small_m


# default_tiles

TILES_WARPS_M, TILES_WARPS_N = 1, 4  # warps of a default_tiles block: side by side along N
TILES_WM, TILES_WN = 4, 2  # MMA tiles per warp: 64 x 16 (every weight dequantised once per block)
TILES_K = 64  # K per staged A tile
AS_PAD = 8  # halves of padding per As row (module notes: ldmatrix banks)


@lru_cache(maxsize=None)
def make_gemm_tiles(
    WARPS_M: int = TILES_WARPS_M,
    WARPS_N: int = TILES_WARPS_N,
    WM: int = TILES_WM,
    WN: int = TILES_WN,
    KT: int = TILES_K,
    b_load=b_frag,
    k_step=TILE_K,
    a_order=(0, 1, 2, 3),
):
    """Compile the ``default_tiles`` kernel ``(c, a32, qw64, scales)``:
    ``16*WM*WARPS_M x 8*WN*WARPS_N`` block tiles, A staged in shared memory
    ``KT`` k at a time and loaded with ``ldmatrix`` (module notes).
    ``b_load``, ``k_step`` (a wrong one drops K steps) and ``a_order``
    (which ldmatrix register becomes a0..a3: another order is a wrong A
    fragment) exist for the tests' broken variants."""
    if KT % TILE_K or KT % 2:
        raise ValueError(f"KT={KT}: a multiple of {TILE_K}")
    THREADS_T = WARPS_M * WARPS_N * mma.WARP
    BM, BN = TILE_M * WM * WARPS_M, TILE_N * WN * WARPS_N
    ACC = 4 * WM * WN
    KSTEPS = KT // TILE_K
    O0, O1, O2, O3 = a_order
    AS_COLS = KT + AS_PAD
    AS_SHAPE = (BM, AS_COLS)
    AF = 4 * WM  # array sizes: constants, not expressions in the kernel
    WPR = KT // 2  # 32-bit words of a per A-tile row
    STAGE = BM * WPR
    STAGE_ITERS = -(-STAGE // THREADS_T)
    if (AS_COLS * 2) % 16:
        raise ValueError(f"KT={KT}: As rows must stay 16-byte aligned for ldmatrix")

    @cuda.jit
    def gemm_tiles(c, a32, qw64, scales):
        m = a32.shape[0]
        kw = a32.shape[1]
        k = kw * 2
        n = qw64.shape[0]
        tid = cuda.threadIdx.x
        lane = cuda.laneid
        warp = tid // mma.WARP
        wm = warp % WARPS_M
        wn = warp // WARPS_M
        bm0 = cuda.blockIdx.y * BM
        wr = wm * (TILE_M * WM)  # the warp's first row in As
        r0 = bm0 + wr
        n0 = cuda.blockIdx.x * BN + wn * (TILE_N * WN)
        if _SIM:
            As = cuda.shared.array(AS_SHAPE, dtype=np.uint16)
        else:
            As = cuda.shared.array(AS_SHAPE, dtype=np.uint16, alignment=16)
        acc = cuda.local.array(ACC, dtype=float32)
        for q in range(ACC):
            acc[q] = float32(0.0)
        af = cuda.local.array(AF, dtype=uint32)
        for kt in range(0, k, KT):
            # Stage a[bm0 : bm0 + BM, kt : kt + KT] (zeros past m; words
            # past k are left alone: no K step reads them).
            kw0 = kt >> 1
            for it in range(STAGE_ITERS):
                idx = tid + it * THREADS_T
                if idx < STAGE:
                    rr = idx // WPR
                    ww = idx - rr * WPR
                    v = uint32(0)
                    if bm0 + rr < m and kw0 + ww < kw:
                        v = a32[bm0 + rr, kw0 + ww]
                    As[rr, 2 * ww] = v & _HALF_MASK
                    As[rr, 2 * ww + 1] = v >> _U16
            cuda.syncthreads()
            for s in range(0, KSTEPS * TILE_K, k_step):
                k0 = kt + s
                if k0 < k:  # uniform over the block
                    for i in range(WM):
                        x = mma.load_a_ldsm(As, wr + TILE_M * i, s)
                        af[4 * i] = x[O0]
                        af[4 * i + 1] = x[O1]
                        af[4 * i + 2] = x[O2]
                        af[4 * i + 3] = x[O3]
                    for j in range(WN):
                        b0, b1 = b_load(qw64, scales, n, n0 + TILE_N * j, k0, lane)
                        for i in range(WM):
                            _mma_acc(
                                acc, 4 * (i * WN + j), af[4 * i], af[4 * i + 1], af[4 * i + 2], af[4 * i + 3], b0, b1
                            )
            cuda.syncthreads()
        for i in range(WM):
            for j in range(WN):
                _store_acc(c, m, n, r0 + TILE_M * i, n0 + TILE_N * j, lane, acc, 4 * (i * WN + j))

    gemm_tiles.tile = (BM, BN)
    gemm_tiles.threads = THREADS_T
    gemm_tiles.shared_bytes = 2 * BM * AS_COLS
    return gemm_tiles


def variant_launch(kern, m: int, n: int, k: int):
    """``launch(c, a, qweight, scales)`` running a variant kernel (from
    :func:`make_gemm_small_m` or :func:`make_gemm_tiles`) for ``c[m, n] =
    a[m, k] W[n, k]^T``: ``a`` passed as ``uint32[m, k/2]``, ``qweight`` as
    ``uint64[n, k/16]`` (the kernels' one-load fragments)."""
    why = supports(m, n, k)
    if why:
        raise ValueError(f"gemm_mma: {why}")
    tm, tn = kern.tile
    grid = L.check_grid((L.blocks_for(n, tn), L.blocks_for(m, tm)))
    block = L.check_block(kern.threads, warps=True)
    L.check_shared(kern.shared_bytes)

    def launch(c, a, qweight, scales):
        kern[grid, block](c, a.view(np.uint32), qweight.view(np.uint64), scales)

    launch.grid, launch.block = grid, block
    return launch


def small_m_launch(m: int, n: int, k: int):
    return variant_launch(make_gemm_small_m(small_m_wm(m)), m, n, k)


def tiles_launch(m: int, n: int, k: int):
    return variant_launch(make_gemm_tiles(), m, n, k)

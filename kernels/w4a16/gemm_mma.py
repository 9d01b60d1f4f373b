"""W4A16 tensor-core GEMM: ``c[m, n] = a[m, k] @ W[n, k].T`` on the warp
MMA primitive (``common/mma.py``, ``mma.sync.aligned.m16n8k16`` with fp16
inputs and f32 accumulators).

``a`` fp16 ``[m, k]`` (row-major), ``W`` packed as in
``leverctl_kernels.common.int4`` (``qweight uint32[n, k/8]``,
``scales fp16[n, k/128]``), fp32 accumulation, ``c`` fp16 ``[m, n]``.
Requires ``k % 16 == 0`` (one MMA step; enforced at launch by
:func:`supports`); m and n are free.

Tiling: one warp (one block of 32 threads) per 16 x 8 tile of ``c``
(``n_mmas=2``: 16 x 16, two MMAs per step sharing the A fragment, the
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

Hardware constraints behind each choice:

* The MMA's B operand is ``.col``: a lane's register holds two
  *consecutive k* of one column n. The packed layout puts consecutive k of
  one output row in consecutive nibbles of one word, so both halves of a
  B register come from one 32-bit load (the module asserts, from the
  layout data, that each register's two elements share a word and a scale
  group). The four lanes of a quad (same g) read the same word: one
  broadcast per quad in the warp's load, eight distinct rows per request.
  The weights are read as stored; re-packing them offline so that one
  lane's word holds its fragments for several k-steps (as Marlin does)
  would cut this to one load per lane per 64 k, and is left for later.
* Tensor cores take fp16 (or bf16) operands, never int4 with an fp16 scale
  at sm_90 (``mma.sync`` has s4 only with s4 A and s32 results). So the
  weight is dequantised in registers, as the FMA kernel does it: the nibble
  becomes an exact fp32 ``q - 8`` (``_device.nibble``, no int-to-float
  conversion), is multiplied by its group scale in fp32 (exact), and is
  rounded once to fp16 (``cvt.rn.f16.f32``): the only rounding the FMA GEMM
  does not have, <= 2^-11 relative per weight. Scales are per (row, group
  of 128): a 16-step never straddles a group, so one scale serves a whole
  B register.
* ``mma.sync.aligned`` needs all 32 lanes, with the same shapes: lanes whose
  rows (A) or columns (B) lie past ``m`` or ``n`` do not skip the MMA; they
  feed zeros (no out-of-range read) and their results are not stored. K has
  no edge: ``k % 16 == 0``.
* Accumulators stay in f32 for the whole K loop (the MMA's ``.f32``
  accumulators) and are rounded to fp16 once, at the store, which goes
  through ``mma.c_elem`` and writes only in-range elements.

This is the first tensor-core path: no shared-memory staging, no
``ldmatrix``, no software pipelining; each warp reads its A rows and W rows
straight from global memory (L1/L2 serve the reuse across warps).
"""
from __future__ import annotations

from functools import lru_cache

import numpy as np
from numba import cuda, float32, uint32

from ..common import int4, mma
from ..common import launch as L
from ._device import nibble

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
        # the GPU (as in ``_device.nibble``), a NumPy view in the simulator.
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

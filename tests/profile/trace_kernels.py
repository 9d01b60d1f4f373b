"""Planted kernels for the memory tracer's tests (``test_memtrace.py``):
each makes one access pattern whose sector efficiency or bank conflicts are
known by hand. Every access the tests read is on a line with a ``# site:``
marker, which :func:`line_of` finds, so a test names the site it expects
without a line number that would move.

They run in the CUDA simulator only (shared arrays sized by Python values).
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import numpy as np
from numba import cuda, float32, uint16

from leverctl_kernels.common import mma, vload, wgmma

HERE = Path(__file__)


def line_of(marker: str) -> str:
    """``"tests/profile/trace_kernels.py:<line>"`` of the line marked ``# site: <marker>``."""
    for i, text in enumerate(HERE.read_text().splitlines(), start=1):
        if text.rstrip().endswith(f"# site: {marker}"):
            return f"{HERE.name}:{i}"
    raise KeyError(marker)


@cuda.jit
def strided_load(out, x, stride):
    """``out[i] = x[i * stride]``: one warp, a float32 load every ``stride`` elements."""
    i = cuda.threadIdx.x
    v = x[i * stride]  # site: strided-load
    out[i] = v  # site: strided-store


@cuda.jit
def copy(out, x):
    """``out = x`` over ``len(x)`` float32, any number of blocks."""
    i = cuda.grid(1)
    if i < x.shape[0]:
        out[i] = x[i]  # site: copy


@cuda.jit
def strided_copy(out, x, stride):
    """``out[i] = x[i * stride]`` over ``len(out)``, any number of blocks."""
    i = cuda.grid(1)
    if i < out.shape[0]:
        out[i] = x[i * stride]  # site: strided-copy


@cuda.jit
def copy_words(out, x, wide):
    """``out = x`` over 32 x 4 uint32 words, one warp: a lane's four words
    by one 16-byte load (``wide``) or by four 4-byte loads, then four
    4-byte stores either way."""
    lane = cuda.threadIdx.x
    if wide:
        a, b, c, d = vload.ldg_v4(x, 4 * lane)  # site: copy-wide
    else:
        a, b, c, d = x[4 * lane], x[4 * lane + 1], x[4 * lane + 2], x[4 * lane + 3]  # site: copy-narrow
    out[4 * lane] = a
    out[4 * lane + 1] = b
    out[4 * lane + 2] = c
    out[4 * lane + 3] = d


@lru_cache(maxsize=None)
def tile_kernel(width: int):
    """One warp on a 32 x ``width`` float32 shared tile: a column-wise
    store (lane ``l`` writes row ``l``, column 1), a row-wise store (lane
    ``l`` writes column ``l`` of row 0, after the column store), a broadcast
    read (every lane reads ``[0, 0]``), then column 1 plus that to ``out``."""

    @cuda.jit
    def tile(out, x):
        t = cuda.shared.array((32, width), float32)
        lane = cuda.threadIdx.x
        t[lane, 1] = x[lane]  # site: column-store
        cuda.syncthreads()
        t[0, lane] = x[lane] * np.float32(2)  # site: row-store
        cuda.syncthreads()
        b = t[0, 0]  # site: broadcast
        out[lane] = t[lane, 1] + b  # site: column-load

    return tile


@lru_cache(maxsize=None)
def v4_store_kernel(step_bytes: int):
    """One warp: lane ``l`` stores 16 bytes (``st.shared.v4``, through the
    wgmma twin) at byte ``l * step_bytes`` of a shared uint32 array, then
    the array goes to ``out``."""
    words = 32 * step_bytes // 4

    @cuda.jit
    def v4(out):
        s = cuda.shared.array(words, np.uint32)
        lane = cuda.threadIdx.x
        for i in range(lane, words, 32):
            s[i] = 0
        cuda.syncthreads()
        base = wgmma.smem_addr(s)
        wgmma.st_shared_v4(base + lane * step_bytes, lane, lane + 1, lane + 2, lane + 3)  # site: v4-store
        cuda.syncthreads()
        for i in range(lane, words, 32):
            out[i] = s[i]

    return v4


@lru_cache(maxsize=None)
def ldmatrix_kernel(row_halves: int):
    """One warp: a 16 x ``row_halves`` uint16 shared tile filled from ``a``
    (16 x 16), then one ``ldmatrix.x4`` of its first 16 columns through
    ``mma.load_a_ldsm``; lane ``l`` writes its four registers to ``out[l]``."""

    @cuda.jit
    def ldsm(out, a):
        s = cuda.shared.array((16, row_halves), uint16)
        lane = cuda.threadIdx.x
        for i in range(lane, 256, 32):
            s[i // 16, i % 16] = a[i // 16, i % 16]
        cuda.syncthreads()
        r = mma.load_a_ldsm(s, 0, 0)  # site: ldmatrix
        for j in range(4):
            out[lane, j] = r[j]

    return ldsm


@cuda.jit
def row_view_load(out, x):
    """``out[l] = x[l][0]`` through a sub-array: ``x`` is 32 x 8 float32, so
    the lanes' loads are 32 bytes apart however the row is reached."""
    lane = cuda.threadIdx.x
    row = x[lane]
    out[lane] = row[0]  # site: row-view


@cuda.jit
def atomic_count(out):
    """Every thread adds 1 to ``out[0]`` atomically."""
    cuda.atomic.add(out, 0, 1)  # site: atomic


@cuda.jit
def wide_shared(out, x):
    """One warp, float64 through shared memory: a row-wise store and load
    (8-byte accesses, served a half-warp at a time)."""
    s = cuda.shared.array(32, np.float64)
    lane = cuda.threadIdx.x
    s[lane] = x[lane]  # site: f64-store
    cuda.syncthreads()
    out[lane] = s[31 - lane]  # site: f64-load


@cuda.jit
def dynamic_shared(out, x):
    """One warp through dynamic shared memory (launch with 256 bytes): lane
    ``l`` stores word ``2 l``, so lanes ``l`` and ``l + 16`` share a bank."""
    s = cuda.shared.array(0, float32)
    lane = cuda.threadIdx.x
    s[2 * lane] = x[lane]  # site: dynamic-store
    cuda.syncthreads()
    out[lane] = s[2 * lane]


@cuda.jit(device=True)
def _read_if(s, i, ok):
    return s[i] if ok else np.float32(0)  # site: read-if


@cuda.jit
def two_calls(out):
    """One warp calls ``_read_if`` from two lines: lanes 0-15 read words
    0-15 from the first (the others skip it), then every lane reads words
    16-47 from the second. Paired by call site, each is one wavefront;
    paired by the k-th access of the helper's line, lanes 16-31's first read
    (words 32-47) would join lanes 0-15's (words 0-15): the same banks."""
    s = cuda.shared.array(64, np.float32)
    t = cuda.threadIdx.x
    s[t] = np.float32(t)
    s[t + 32] = np.float32(t)
    cuda.syncthreads()
    a = _read_if(s, t, t < 16)
    b = _read_if(s, t + 16, True)
    out[t] = a + b


@cuda.jit
def uneven_then_barrier(out):
    """One warp, two rounds split by a barrier, each round lane ``t``
    reading ``t`` words of row ``t`` (a lane-dependent loop, as a triangular
    solve's) at one line: in round ``r`` its ``j``-th read is word ``(t + j
    + r) % 32`` of row ``t`` (rows 32 words apart: bank ``(t + j + r) %
    32``), so the lanes still in the loop read distinct banks. Numbered per round, the j-th reads pair
    conflict-free; numbered across the barrier, lane ``t``'s second-round
    reads would pair with other lanes' first-round ones."""
    s = cuda.shared.array(32 * 32, np.float32)
    t = cuda.threadIdx.x
    for j in range(32):
        s[t * 32 + j] = np.float32(j)
    acc = np.float32(0)
    for r in range(2):
        cuda.syncthreads()
        for j in range(t):
            acc += s[t * 32 + (t + j + r) % 32]  # site: uneven-read
    out[t] = acc


@cuda.jit(device=True)
def _put_if(s, at, ok):
    if ok:
        s[at] = np.float32(1)  # site: put-if


@cuda.jit
def predicated_calls(out):
    """One warp calls ``_put_if`` once a tile, four tiles, no barrier
    between: in tile 0 only lanes 0-15 store (the others' store predicated
    off, as a partial tile's), then every lane stores word ``33 tile + t``
    (bank ``(tile + t) % 32``: each tile's stores on distinct banks).
    Paired per call, every store instruction is one wavefront; paired by
    the k-th store of the line, lanes 16-31's tile-1 stores would join lanes
    0-15's tile-0 ones, and lane 31's bank 0 lane 0's."""
    s = cuda.shared.array(4 * 33 + 32, np.float32)
    t = cuda.threadIdx.x
    for tile in range(4):
        _put_if(s, tile * 33 + t, tile > 0 or t < 16)
    cuda.syncthreads()
    out[t] = s[3 * 33 + t]

"""``mamba2.prefill_scan`` variant ``persistent`` (``ssd`` not taken,
``ssm_persistent`` on): a persistent kernel holding each head's state on
chip, in registers, for the whole prompt.

A head's state ``S [P, N]`` is cut into rows; a row belongs to a *lane
group* of ``W`` lanes of one warp, lane ``l`` holding the ``NPL`` elements
``n = l, l + W, l + 2W, ...`` (``NPL = max(4, ceil(N / 32))``, ``W`` the
power of two covering ``N / NPL``), so a group's loads of ``B_t`` and
``C_t`` are consecutive and the row's output is one ``log2 W``-step xor
shuffle reduction::

    work item (h, row block):  rows r0 .. r0 + ROWS - 1 of head h, one per lane group
    lane group -> row r:       lane l holds S[r, l + W j], j < NPL     (registers)
    per token t:  dt, a = exp(dt A_h)         (every lane)
                  S[r, n] = a S[r, n] + dt x[t, h, r] B[t, g, n];  part = sum_j S[r, n] C[t, g, n]
                  y[t, h, r] = xor-reduce(part) + D_h x[t, h, r]

The grid is sized to the resident blocks (132 SMs x 4), and each block
loops over work items (persistent), loading the state once, walking every
token, and storing it once.

Where ``N / 8`` is a power of two of at most 32 lanes (Nemotron-H's 128:
``W = 16``) and the arrays are C-contiguous, a lane holds 8 consecutive
elements instead, ``n = 8 l .. 8 l + 7``: a token's ``B`` and ``C`` are
one 16-byte load each a lane (a group reads its whole 256-byte rows in
whole sectors, where the strided layout read them 2 bytes a lane, four
loads each), and the state is loaded and stored 16 bytes at a time: the
group reads its row as quads ``l`` and ``l + W`` (whole sectors across
the group) and lane ``l`` takes quads ``2 l`` and ``2 l + 1`` from their
holders by shuffles, once a work item (the stores the reverse); element
by element where the arrays do not start on 16 bytes. At ``P = 64``, ``N = 128``: 16 rows per
256-thread block, 4 blocks of rows a head.

That layout also takes a token's scalars a window of ``TW = 16`` tokens at a
time through shared memory, between two block barriers: ``dt_raw + dt_bias``
once a block (a thread a token, where every warp loaded both every token)
and the block's rows of ``x`` (a warp's loads whole runs of rows, where
each warp loaded its two rows' 4 bytes of a sector every token). Each lane
still computes ``dt`` and the decay every token, so the outputs and state
are the same bits. ``y`` stays a store by each group's lane 0: staged too,
the kernel took more than the 64 registers that keep 4 blocks an SM
(:data:`RESIDENT_BLOCKS`) and spilled.
"""

from __future__ import annotations

import math
from functools import lru_cache

from numba import cuda, float32

from ...common import cvt, vload
from ...common import launch as L
from ...common.launch import device_inline
from ._device import decay_eight, group_of, softplus_f32, step_dt

NAME = "persistent"
SUMMARY = "persistent blocks, each row of a head's state in one lane group's registers across the prompt"
ARGS = ("y", "state", "x", "dt_raw", "dt_bias", "A", "B", "C", "D")
MAX_THREADS = 256
MIN_BLOCKS = 4  # MAX_THREADS-thread blocks an SM holds: the 16-byte layout's kernel is bounded to 64 registers
RESIDENT_BLOCKS = 132 * MIN_BLOCKS  # the grid, every block resident at once
FULL = 0xFFFFFFFF
WIDE = 8  # a lane's consecutive elements in the 16-byte layout: one 16-byte load of B's and of C's fp16
TW = 16  # the 16-byte layout's window of tokens whose dt and x go through shared memory
FAULTS = ("half_store", "first_window")  # tests only: the 16-byte layout stores half of each row; stages x once


def wide_fits(n: int) -> bool:
    """Whether a row of ``n`` splits into lanes of :data:`WIDE` consecutive
    elements, a power of two of them, at most a warp."""
    w = n // WIDE
    return n % WIDE == 0 and 1 <= w <= 32 and w & (w - 1) == 0


def lane_layout(n: int, wide: bool = False) -> tuple[int, int]:
    """``(W, NPL)``: lanes per row and state elements per lane (``wide``:
    the 16-byte layout, :func:`wide_fits`)."""
    if wide:
        if not wide_fits(n):
            raise ValueError(f"state size {n}: not a power of two of lanes of {WIDE}")
        return n // WIDE, WIDE
    npl = max(4, -(-n // 32))
    w = 1
    while w * npl < n:
        w *= 2
    if w > 32:
        raise ValueError(f"state size {n}: more than 32 lanes per row")
    return w, npl


@device_inline
def _eight_f16(a, t, g, n0, vec):
    """``a[t, g, n0 .. n0 + 7]`` (fp16) as float32: one 16-byte load where
    ``vec``, else one element a load."""
    if vec:
        return cvt.f16x8_to_f32(vload.ldg_v4(a, (t * a.shape[1] + g) * a.shape[2] + n0))
    return (
        float32(a[t, g, n0]),
        float32(a[t, g, n0 + 1]),
        float32(a[t, g, n0 + 2]),
        float32(a[t, g, n0 + 3]),
        float32(a[t, g, n0 + 4]),
        float32(a[t, g, n0 + 5]),
        float32(a[t, g, n0 + 6]),
        float32(a[t, g, n0 + 7]),
    )


@device_inline
def _load_elements(state, h, r, n0, live):
    """``state[h, r, n0 .. n0 + 7]`` element by element (the arrays off 16
    bytes), zeros for a lane past the rows."""
    z = float32(0.0)
    if not live:
        return z, z, z, z, z, z, z, z
    return (
        state[h, r, n0],
        state[h, r, n0 + 1],
        state[h, r, n0 + 2],
        state[h, r, n0 + 3],
        state[h, r, n0 + 4],
        state[h, r, n0 + 5],
        state[h, r, n0 + 6],
        state[h, r, n0 + 7],
    )


@device_inline
def _from(q, src):
    """Lane ``src``'s four floats ``q`` (every lane of the warp calls it)."""
    a, b, c, d = q
    return (
        cuda.shfl_sync(FULL, a, src),
        cuda.shfl_sync(FULL, b, src),
        cuda.shfl_sync(FULL, c, src),
        cuda.shfl_sync(FULL, d, src),
    )


@device_inline
def _step_eight(s, b, c, decay, dx):
    """A token's update of a lane's eight states and their part of ``y``."""
    s0, s1, s2, s3, s4, s5, s6, s7 = decay_eight(s, b, decay, dx)
    c0, c1, c2, c3, c4, c5, c6, c7 = c
    part = ((s0 * c0 + s1 * c1) + (s2 * c2 + s3 * c3)) + ((s4 * c4 + s5 * c5) + (s6 * c6 + s7 * c7))
    return (s0, s1, s2, s3, s4, s5, s6, s7), part


@lru_cache(maxsize=None)
def make_scan(P: int, N: int, HPG: int, THREADS: int, DECAY_SCALE: float = 1.0, wide: bool = False, fault: str = ""):
    """The kernel for head dim ``P``, state ``N``, ``HPG`` heads per group
    and ``THREADS`` threads per block; ``wide``: the 16-byte layout (the
    module's docstring; C-contiguous arrays). ``DECAY_SCALE`` and
    ``fault`` (tests only): a log-decay scaled by anything but 1 is a wrong
    decay; ``"half_store"`` (:data:`FAULTS`) stores only half of each
    row of the state; ``"first_window"`` stages ``x`` for the first window
    of tokens only (the 16-byte layout)."""
    if fault and fault not in FAULTS:
        raise ValueError(f"unknown fault {fault!r}")
    SC = float32(DECAY_SCALE)
    W, NPL = lane_layout(N, wide)
    ROWS = THREADS // W
    L.check_block(THREADS, warps=True)
    HALF = fault == "half_store"
    if wide:
        return _make_wide(P, N, HPG, W, ROWS, SC, HALF, fault == "first_window")

    @cuda.jit
    def scan_persistent(y, state, x, dt_raw, dt_bias, A, B, C, D):
        t_len, h_len, _ = x.shape
        tid = cuda.threadIdx.x
        lane = tid % W
        grp_row = tid // W
        s = cuda.local.array(NPL, float32)
        row_blocks = (P + ROWS - 1) // ROWS
        item = cuda.blockIdx.x
        while item < h_len * row_blocks:  # block-uniform
            h = item // row_blocks
            r = (item - h * row_blocks) * ROWS + grp_row
            live = r < P
            g = h // HPG
            for j in range(NPL):
                n = lane + W * j
                s[j] = state[h, r, n] if live and n < N else float32(0.0)
            a_h = A[h]
            d_h = D[h]
            for t in range(t_len):
                dt = step_dt(dt_raw, dt_bias, t, h)
                decay = math.exp(SC * dt * a_h)
                xv = float32(x[t, h, r]) if live else float32(0.0)
                dx = dt * xv
                part = float32(0.0)
                for j in range(NPL):
                    n = lane + W * j
                    if n < N:
                        s[j] = decay * s[j] + dx * float32(B[t, g, n])
                        part += s[j] * float32(C[t, g, n])
                off = W // 2
                while off > 0:
                    part += cuda.shfl_xor_sync(FULL, part, off)
                    off //= 2
                if live and lane == 0:
                    y[t, h, r] = part + d_h * xv
            for j in range(NPL):
                n = lane + W * j
                if live and n < N:
                    state[h, r, n] = s[j]
            item += cuda.gridDim.x

    return scan_persistent


def _make_wide(P: int, N: int, HPG: int, W: int, ROWS: int, SC, HALF: bool, ONCE: bool = False):
    """The 16-byte layout's kernel: lane ``l`` of a row's group holds
    ``S[r, 8 l .. 8 l + 7]`` (the module's docstring)."""

    @device_inline
    def load_row(state, at, lane, base, live):
        """The lane's 8 states: the group reads its row as quads ``lane``
        and ``lane + W`` (each load whole sectors across the group), and
        lane ``l`` takes quads ``2 l`` and ``2 l + 1`` from their holders
        by shuffles (every lane of the warp, live or not)."""
        z = float32(0.0)
        q0 = q1 = (z, z, z, z)
        if live:
            q0 = vload.ld_f32x4(state, at + 4 * lane)
            q1 = vload.ld_f32x4(state, at + 4 * (lane + W))
        if W == 1:  # the row is the lane's: quads 0 and 1
            e, o = q0, q1
        else:
            upper = 2 * lane >= W  # quads 2l, 2l + 1 are their holders' second (lane + W) ones
            e0, e1 = _from(q0, base + (2 * lane) % W), _from(q1, base + (2 * lane) % W)
            o0, o1 = _from(q0, base + (2 * lane + 1) % W), _from(q1, base + (2 * lane + 1) % W)
            e = e1 if upper else e0
            o = o1 if upper else o0
        return e[0], e[1], e[2], e[3], o[0], o[1], o[2], o[3]

    @device_inline
    def store_row(state, at, lane, base, live, s):
        """The inverse of :func:`load_row`: lane ``l`` gathers quads ``l``
        and ``l + W`` (halves of lanes ``l // 2`` and ``(l + W) // 2``) and
        stores them, whole sectors across the group (``HALF``, tests only:
        the first of them alone)."""
        s0, s1, s2, s3, s4, s5, s6, s7 = s
        lo, hi = (s0, s1, s2, s3), (s4, s5, s6, s7)
        if W == 1:
            q0, q1 = lo, hi
        else:
            odd = lane % 2 == 1
            a0, a1 = _from(lo, base + lane // 2), _from(hi, base + lane // 2)
            b0, b1 = _from(lo, base + (lane + W) // 2), _from(hi, base + (lane + W) // 2)
            q0 = a1 if odd else a0
            q1 = b1 if odd else b0
        if live:
            vload.st_f32x4(state, at + 4 * lane, q0[0], q0[1], q0[2], q0[3])
            if not HALF:
                vload.st_f32x4(state, at + 4 * (lane + W), q1[0], q1[1], q1[2], q1[3])

    THREADS = ROWS * W

    @device_inline
    def stage_window(dts, xs, dt_raw, dt_bias, x, t0, h, r0, tid):
        """The window's ``dt_raw + dt_bias``, once a block (threads ``0 ..
        TW - 1``, a token each), and ``x`` of its tokens at the block's rows,
        a token's rows consecutive across the lanes (``ONCE``, tests only:
        the first window's alone)."""
        t_len = x.shape[0]
        if tid < TW and t0 + tid < t_len:
            dts[tid] = dt_raw[t0 + tid, h] + dt_bias[h]
        k = tid
        while k < TW * ROWS:
            tt = k // ROWS
            rr = k - tt * ROWS
            if t0 + tt < t_len and r0 + rr < P and not (ONCE and t0 > 0):
                xs[tt, rr] = float32(x[t0 + tt, h, r0 + rr])
            k += THREADS

    @L.jit_bounded(THREADS, MIN_BLOCKS * MAX_THREADS // THREADS)
    def scan_persistent_wide(y, state, x, dt_raw, dt_bias, A, B, C, D):
        t_len, h_len, _ = x.shape
        dts = cuda.shared.array(TW, float32)
        xs = cuda.shared.array((TW, ROWS), float32)
        tid = cuda.threadIdx.x
        lane = tid % W
        grp_row = tid // W
        n0 = lane * WIDE
        base = (tid % 32) - lane  # the group's first lane in the warp
        vec = vload.aligned16(state) and vload.aligned16(B) and vload.aligned16(C)  # the same in every thread
        row_blocks = (P + ROWS - 1) // ROWS
        item = cuda.blockIdx.x
        while item < h_len * row_blocks:  # block-uniform
            h = item // row_blocks
            r = (item - h * row_blocks) * ROWS + grp_row
            live = r < P
            g = h // HPG
            at = (h * state.shape[1] + r) * state.shape[2]  # the row, flat (read only where live)
            if vec:
                s = load_row(state, at, lane, base, live)
            else:
                s = _load_elements(state, h, r, n0, live)
            a_h = A[h]
            d_h = D[h]
            r0 = r - grp_row
            for t0 in range(0, t_len, TW):  # a window of TW tokens
                cuda.syncthreads()  # every lane done with the last window's dts and xs
                stage_window(dts, xs, dt_raw, dt_bias, x, t0, h, r0, tid)
                cuda.syncthreads()
                for tt in range(min(TW, t_len - t0)):
                    dt = softplus_f32(dts[tt])
                    decay = math.exp(SC * dt * a_h)
                    xv = xs[tt, grp_row] if live else float32(0.0)
                    b = _eight_f16(B, t0 + tt, g, n0, vec)  # every lane: the token's rows, whole sectors
                    c = _eight_f16(C, t0 + tt, g, n0, vec)
                    s, part = _step_eight(s, b, c, decay, dt * xv)
                    off = W // 2
                    while off > 0:
                        part += cuda.shfl_xor_sync(FULL, part, off)
                        off //= 2
                    if live and lane == 0:
                        y[t0 + tt, h, r] = part + d_h * xv
            if vec:
                store_row(state, at, lane, base, live, s)
            elif live:
                s0, s1, s2, s3, s4, s5, s6, s7 = s
                state[h, r, n0] = s0
                state[h, r, n0 + 1] = s1
                state[h, r, n0 + 2] = s2
                state[h, r, n0 + 3] = s3
                if not HALF:
                    state[h, r, n0 + 4] = s4
                    state[h, r, n0 + 5] = s5
                    state[h, r, n0 + 6] = s6
                    state[h, r, n0 + 7] = s7
            item += cuda.gridDim.x

    return scan_persistent_wide


def threads_for(p: int, n: int, wide: bool = False) -> int:
    w, _ = lane_layout(n, wide)
    return min(MAX_THREADS, max(L.WARP_SIZE, -(-p * w // L.WARP_SIZE) * L.WARP_SIZE))


def build(shape, **cfg):
    """The launch at ``shape``: the 16-byte layout's kernel where the state
    size allows it (:func:`wide_fits`) and the call's ``state``, ``B`` and
    ``C`` are C-contiguous, else the strided layout's."""
    h, p, n, g = shape["h"], shape["p"], shape["n"], shape["g"]

    def config(wide: bool):
        threads = threads_for(p, n, wide)
        kern = make_scan(p, n, group_of(h, g), threads, wide=wide, **cfg)
        rows = threads // lane_layout(n, wide)[0]
        L.check_block(threads, warps=True)
        return kern, L.check_grid(min(h * -(-p // rows), RESIDENT_BLOCKS)), threads

    narrow = config(False)
    wide = config(True) if wide_fits(n) else None

    def launch(bufs):
        args = [bufs[a] for a in ARGS]
        use = wide if wide and all(vload.c_contiguous(bufs[a]) for a in ("state", "B", "C")) else narrow
        kern, grid, threads = use
        kern[grid, threads](*args)

    return launch

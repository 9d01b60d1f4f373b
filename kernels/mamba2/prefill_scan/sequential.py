"""``mamba2.prefill_scan`` variant ``sequential`` (``ssd`` not taken and
``ssm_persistent`` off): the token-by-token scan.

One thread per (head, head-dim row), ``H * P`` threads in all, walks the
prompt token by token; its row of the state (``N`` fp32) stays where it
lives, in the state buffer in global memory, read and written at every
token::

    thread (h, p):  for t:  dt = softplus(dt_raw[t, h] + dt_bias[h]),  a = exp(dt A_h)
                             for n:  S[h, p, n] = a S[h, p, n] + dt x[t, h, p] B[t, g, n]
                                     y += S[h, p, n] C[t, g, n]
                             y[t, h, p] = y + D_h x[t, h, p]

The simplest correct kernel and the slowest: ``H * P`` threads (8192 at
Nemotron-H's shape, a few waves of an H200) each make ``T * N`` dependent
steps, and a warp's 32 threads touch 32 state rows ``4 N`` bytes apart,
so every state access is its own memory transaction (L1/L2 absorb most of
them: each thread's row is 512 bytes). Where ``N`` is a multiple of 8 and
the arrays start on 16 bytes, a thread takes its row 8 states at a time:
two coherent 16-byte loads and stores of the state (``vload.ld_f32x4`` /
``st_f32x4``) and one 16-byte load each of the token's 8 ``B`` and ``C``
(the same for the warp), summed in the same order as the element loop,
which other rows take.

Where moreover the threads come in pairs (``H * P`` even), the two
threads of a pair (rows ``r`` and ``r + 1``, lanes ``2j`` and ``2j + 1``)
load and store their state together, so that each 16-byte state access of
a warp lies in whole sectors: of each 8 states (32 bytes of a row) the
pair loads row ``r``'s in one instruction (the even lane its first quad,
the odd lane its second) and row ``r + 1``'s in the next, and each lane
takes the quad it lacks from the other (four shuffles), the stores the
reverse. A quad of the state is loaded and stored by the same lane at
every token, and each thread still computes its own row, in the element
loop's order. (``B`` and ``C``, one address a warp, stay a 16-byte load
each: half a sector, but a warp's, not a thread's.)
"""

from __future__ import annotations

import math
from functools import lru_cache

from numba import cuda, float32, uint32

from ...common import cvt, vload
from ...common import launch as L
from ...common.launch import device_inline
from ._device import decay_eight, group_of, step_dt

NAME = "sequential"
SUMMARY = "token-by-token scan: a thread per (head, row), its state row updated in global memory every token"
ARGS = ("y", "state", "x", "dt_raw", "dt_bias", "A", "B", "C", "D")
MAX_THREADS = 128


@device_inline
def _from_partner(q, mask):
    """The four floats ``q`` of the other lane of this lane's pair."""
    a, b, c, d = q
    return (
        cuda.shfl_xor_sync(mask, a, 1),
        cuda.shfl_xor_sync(mask, b, 1),
        cuda.shfl_xor_sync(mask, c, 1),
        cuda.shfl_xor_sync(mask, d, 1),
    )


@lru_cache(maxsize=None)
def make_scan(HPG: int, DECAY_SCALE: float = 1.0, wide: bool = True, fault: str = ""):
    """The kernel for ``HPG`` heads per group. ``wide``: the kernel for
    C-contiguous arrays, which takes a row 8 states at a time where ``N %
    8 == 0`` and ``state``, ``B`` and ``C`` start on 16 bytes (the module's
    docstring), else as the element kernel (``wide=False``) does.
    ``DECAY_SCALE`` and ``fault`` (tests only): a log-decay scaled by
    anything but 1 is a wrong decay; ``"half_store"`` stores only the first
    four of each eight states a token (in the paired form, too: its odd
    lanes, which store the second four of each row's eight, store
    nothing)."""
    SC = float32(DECAY_SCALE)
    HALF = fault == "half_store"

    @device_inline
    def row_elements(state, B, C, h, p, g, t, decay, dx, n_len):
        acc = float32(0.0)
        for n in range(n_len):
            s = decay * state[h, p, n] + dx * float32(B[t, g, n])
            state[h, p, n] = s
            acc += s * float32(C[t, g, n])
        return acc

    @device_inline
    def four(state, at, b, c, decay, dx, acc, store):
        s0, s1, s2, s3 = vload.ld_f32x4(state, at)
        b0, b1, b2, b3 = b
        c0, c1, c2, c3 = c
        s0 = decay * s0 + dx * b0
        s1 = decay * s1 + dx * b1
        s2 = decay * s2 + dx * b2
        s3 = decay * s3 + dx * b3
        if store:
            vload.st_f32x4(state, at, s0, s1, s2, s3)
        return (((acc + s0 * c0) + s1 * c1) + s2 * c2) + s3 * c3  # the element loop's order

    @device_inline
    def row_eights(state, B, C, h, p, g, t, decay, dx, n_len):
        acc = float32(0.0)
        row = (h * state.shape[1] + p) * n_len  # the thread's state row, flat
        bc = (t * B.shape[1] + g) * n_len  # the token's B and C rows of its group, flat
        for n0 in range(0, n_len, 8):
            b0, b1, b2, b3, b4, b5, b6, b7 = cvt.f16x8_to_f32(vload.ldg_v4(B, bc + n0))
            c0, c1, c2, c3, c4, c5, c6, c7 = cvt.f16x8_to_f32(vload.ldg_v4(C, bc + n0))
            acc = four(state, row + n0, (b0, b1, b2, b3), (c0, c1, c2, c3), decay, dx, acc, True)
            acc = four(state, row + n0 + 4, (b4, b5, b6, b7), (c4, c5, c6, c7), decay, dx, acc, not HALF)
        return acc

    @device_inline
    def eight_paired(state, at, n_len, b, c, decay, dx, acc, odd, mask):
        # ``at``: the lane's quad ``odd`` of these 8 states of the pair's
        # even row; ``at + n_len`` the same of its odd row
        qa = vload.ld_f32x4(state, at)
        qb = vload.ld_f32x4(state, at + n_len)
        r0, r1, r2, r3 = _from_partner(qa if odd else qb, mask)
        if odd:  # the odd row's: the even lane's quad 0, its own quad 1
            s0, s1, s2, s3 = r0, r1, r2, r3
            s4, s5, s6, s7 = qb
        else:  # the even row's: its own quad 0, the odd lane's quad 1
            s0, s1, s2, s3 = qa
            s4, s5, s6, s7 = r0, r1, r2, r3
        c0, c1, c2, c3, c4, c5, c6, c7 = cvt.f16x8_to_f32(c)  # (four words each: the token's 8 fp16)
        s = (s0, s1, s2, s3, s4, s5, s6, s7)
        s0, s1, s2, s3, s4, s5, s6, s7 = decay_eight(s, cvt.f16x8_to_f32(b), decay, dx)
        acc = (((acc + s0 * c0) + s1 * c1) + s2 * c2) + s3 * c3  # the element loop's order
        acc = (((acc + s4 * c4) + s5 * c5) + s6 * c6) + s7 * c7
        # the reverse: the even lane gives its quad 1, the odd lane its quad 0
        x0, x1, x2, x3 = _from_partner((s0, s1, s2, s3) if odd else (s4, s5, s6, s7), mask)
        # (selects, not branches: each row's store one instruction of the pair's two lanes)
        a0, a1, a2, a3 = (x0, x1, x2, x3) if odd else (s0, s1, s2, s3)
        b0, b1, b2, b3 = (s4, s5, s6, s7) if odd else (x0, x1, x2, x3)
        if not (HALF and odd):  # (the fault: the quads the odd lanes store, half of each 8, not stored)
            vload.st_f32x4(state, at, a0, a1, a2, a3)
            vload.st_f32x4(state, at + n_len, b0, b1, b2, b3)
        return acc

    @device_inline
    def row_paired(state, B, C, h, p, g, t, decay, dx, n_len):
        acc = float32(0.0)
        lane = cuda.threadIdx.x & 31
        odd = lane & 1
        mask = uint32(3) << uint32(lane - odd)
        even_row = (h * state.shape[1] + p - odd) * n_len  # the pair's even row, flat
        bc = (t * B.shape[1] + g) * n_len  # the token's B and C rows of its group, flat
        for n0 in range(0, n_len, 8):
            b = vload.ldg_v4(B, bc + n0)
            c = vload.ldg_v4(C, bc + n0)
            acc = eight_paired(state, even_row + n0 + 4 * odd, n_len, b, c, decay, dx, acc, odd, mask)
        return acc

    @device_inline
    def row_by_eights(state, B, C, h, p, g, t, decay, dx, n_len):
        if n_len % 8 == 0 and vload.aligned16(state) and vload.aligned16(B) and vload.aligned16(C):
            if (state.shape[0] * state.shape[1]) % 2 == 0:
                return row_paired(state, B, C, h, p, g, t, decay, dx, n_len)
            return row_eights(state, B, C, h, p, g, t, decay, dx, n_len)
        return row_elements(state, B, C, h, p, g, t, decay, dx, n_len)

    row = row_by_eights if wide else row_elements  # the element kernel never types a 16-byte load

    @cuda.jit
    def scan_sequential(y, state, x, dt_raw, dt_bias, A, B, C, D):
        t_len, h_len, p_len = x.shape
        n_len = state.shape[2]
        i = cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x
        if i >= h_len * p_len:
            return
        h = i // p_len
        p = i - h * p_len
        g = h // HPG
        a_h = A[h]
        d_h = D[h]
        for t in range(t_len):
            dt = step_dt(dt_raw, dt_bias, t, h)
            decay = math.exp(SC * dt * a_h)
            xv = float32(x[t, h, p])
            dx = dt * xv
            y[t, h, p] = row(state, B, C, h, p, g, t, decay, dx, n_len) + d_h * xv

    return scan_sequential


def build(shape, **cfg):
    h, p, g = shape["h"], shape["p"], shape["g"]
    wide, narrow = make_scan(group_of(h, g), **cfg), make_scan(group_of(h, g), wide=False, **cfg)
    threads = min(MAX_THREADS, -(-h * p // L.WARP_SIZE) * L.WARP_SIZE)
    blocks, threads = L.grid_1d(h * p, threads)

    def launch(bufs):
        args = [bufs[a] for a in ARGS]
        kern = wide if all(vload.c_contiguous(bufs[a]) for a in ("state", "B", "C")) else narrow
        kern[blocks, threads](*args)

    return launch

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
    per token t:  dt, a = exp(dt A_h)         (every lane; no barrier anywhere)
                  S[r, n] = a S[r, n] + dt x[t, h, r] B[t, g, n];  part = sum_j S[r, n] C[t, g, n]
                  y[t, h, r] = xor-reduce(part) + D_h x[t, h, r]

The grid is sized to the resident blocks (132 SMs x 4), and each block
loops over work items (persistent), loading the state once, walking every
token, and storing it once. At Nemotron-H's shape (``P = 64``, ``N =
128``): ``W = 32``, ``NPL = 4``, 8 rows per 256-thread block, 1024 items.
"""

from __future__ import annotations

import math
from functools import lru_cache

from numba import cuda, float32

from ...common import launch as L
from ._device import group_of, step_dt

NAME = "persistent"
SUMMARY = "persistent blocks, each row of a head's state in one lane group's registers across the prompt"
ARGS = ("y", "state", "x", "dt_raw", "dt_bias", "A", "B", "C", "D")
MAX_THREADS = 256
RESIDENT_BLOCKS = 132 * 4
FULL = 0xFFFFFFFF


def lane_layout(n: int) -> tuple[int, int]:
    """``(W, NPL)``: lanes per row and state elements per lane."""
    npl = max(4, -(-n // 32))
    w = 1
    while w * npl < n:
        w *= 2
    if w > 32:
        raise ValueError(f"state size {n}: more than 32 lanes per row")
    return w, npl


@lru_cache(maxsize=None)
def make_scan(P: int, N: int, HPG: int, THREADS: int, DECAY_SCALE: float = 1.0):
    """The kernel for head dim ``P``, state ``N``, ``HPG`` heads per group
    and ``THREADS`` threads per block. ``DECAY_SCALE`` (tests only) scales
    the log-decay: anything but 1 is a wrong decay."""
    SC = float32(DECAY_SCALE)
    W, NPL = lane_layout(N)
    ROWS = THREADS // W
    L.check_block(THREADS, warps=True)

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


def threads_for(p: int, n: int) -> int:
    w, _ = lane_layout(n)
    return min(MAX_THREADS, max(L.WARP_SIZE, -(-p * w // L.WARP_SIZE) * L.WARP_SIZE))


def build(shape, **cfg):
    h, p, n, g = shape["h"], shape["p"], shape["n"], shape["g"]
    threads = threads_for(p, n)
    kern = make_scan(p, n, group_of(h, g), threads, **cfg)
    rows = threads // lane_layout(n)[0]
    grid = L.check_grid(min(h * -(-p // rows), RESIDENT_BLOCKS))
    L.check_block(threads, warps=True)

    def launch(bufs):
        kern[grid, threads](*[bufs[a] for a in ARGS])

    return launch

"""``gdn.fused_conv`` variant ``separate``: the decode mixer as three
kernels, each round-tripping its result through global memory.

1. conv1d + SiLU, one thread per (sequence, 8 channels) where the heads'
   rows are whole 16-byte pieces (16 bytes a load and a store,
   ``_conv.make_conv_piece``), else per (sequence, channel)::

       grid ceil(N*C/8 / 128) x 128:  y = silu(conv(conv_state[slot], x)) -> q_a/k_a/v_a
                                      conv_state[slot] shifted in place
2. the batched GDN decode (``gdn.decode``'s ``batched``) on ``q_a, k_a, v_a`` -> ``o_a``
3. gated RMSNorm, one block of ``dv`` threads per (sequence, head)::

       o_a row -> shared | barrier | out = o / rms(o) * w * silu(z)

The activations (``N * C`` fp32) and ``o_a`` (``N * Hv * dv`` fp32) are
written and read back once each: the traffic the fused kernel saves, declared
in this variant's ``traffic``. Works for any head grouping and head dim; the
state dominates the bytes either way (memory-bound).
"""

from __future__ import annotations

from functools import lru_cache

from numba import cuda, float32

from ...common.launch import device_inline
from ...common.vload import aligned16, st_f32x4
from .._conv import PIECE, make_conv_piece, make_conv_step, make_gated_rmsnorm
from .._layout import check_launch, group_of, slice_launch
from ..decode.batched import make_decode_batched
from ..decode.batched import shared_bytes as decode_shared_bytes

NAME = "separate"
SUMMARY = "conv1d+SiLU, batched GDN decode and gated RMSNorm as three kernels"
CONV_THREADS = 128


def conv_channels(DK: int, DV: int) -> int:
    """Channels a thread of the conv kernel takes: 8 where every head's rows
    are whole 16-byte pieces (one load a piece), else 1."""
    return PIECE if DK % PIECE == 0 and DV % PIECE == 0 else 1


@lru_cache(maxsize=None)
def make_conv_kernel(W: int, DK: int, DV: int, TAIL_FAULT: int = 0):
    """conv1d + SiLU over all channels, scattering into q/k/v activations:
    ``conv_channels`` adjacent channels a thread (one head's, the heads'
    rows being whole pieces), 16 bytes a load where the arrays allow
    (``_conv.make_conv_piece``, whose test-only knob ``TAIL_FAULT`` is)."""
    conv_step = make_conv_step(W)
    wide, conv_piece = make_conv_piece(W, TAIL_FAULT)
    CPT = conv_channels(DK, DV)

    @device_inline
    def put(qa, ka, va, n, c, hk, y):
        """Activation of channel ``c`` of ``[q | k | v]`` (sequence ``n``)."""
        if c < hk * DK:
            qa[n, c // DK, c % DK] = y
        elif c < 2 * hk * DK:
            c2 = c - hk * DK
            ka[n, c2 // DK, c2 % DK] = y
        else:
            c2 = c - 2 * hk * DK
            va[n, c2 // DV, c2 % DV] = y

    @device_inline
    def put8(qa, ka, va, n, c, hk, ys):
        """Channels ``c .. c+7`` (one head's) as two 16-byte stores."""
        if c < hk * DK:
            at = (n * hk + c // DK) * DK + c % DK
            st_f32x4(qa, at, ys[0], ys[1], ys[2], ys[3])
            st_f32x4(qa, at + 4, ys[4], ys[5], ys[6], ys[7])
        elif c < 2 * hk * DK:
            c2 = c - hk * DK
            at = (n * hk + c2 // DK) * DK + c2 % DK
            st_f32x4(ka, at, ys[0], ys[1], ys[2], ys[3])
            st_f32x4(ka, at + 4, ys[4], ys[5], ys[6], ys[7])
        else:
            c2 = c - 2 * hk * DK
            at = (n * va.shape[1] + c2 // DV) * DV + c2 % DV
            st_f32x4(va, at, ys[0], ys[1], ys[2], ys[3])
            st_f32x4(va, at + 4, ys[4], ys[5], ys[6], ys[7])

    @cuda.jit
    def gdn_conv_silu(x, w, cs, slots, qa, ka, va):
        N = x.shape[0]
        C = x.shape[1]
        hk = qa.shape[1]
        e = cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x
        if CPT == 1:
            if e < N * C:
                n = e // C
                c = e - n * C
                put(qa, ka, va, n, c, hk, conv_step(x, w, cs, n, slots[n], c))
            return
        P = C // CPT  # pieces a sequence
        if e < N * P:
            n = e // P
            c = CPT * (e - n * P)
            vec = wide(x, w, cs)
            ys = cuda.local.array(CPT, float32)
            conv_piece(x, w, cs, n, slots[n], c, vec, ys)
            if vec and aligned16(qa) and aligned16(ka) and aligned16(va):
                put8(qa, ka, va, n, c, hk, ys)
            else:
                for m in range(CPT):
                    put(qa, ka, va, n, c + m, hk, ys[m])

    return gdn_conv_silu


@lru_cache(maxsize=None)
def make_norm_kernel(DV: int):
    """Gated RMSNorm: one block of DV threads per (sequence, head)."""
    gated = make_gated_rmsnorm(DV)

    @cuda.jit
    def gdn_gated_rmsnorm(o, z, nw, out):
        hv = o.shape[1]
        n = cuda.blockIdx.x // hv
        h = cuda.blockIdx.x - n * hv
        j = cuda.threadIdx.x
        row = cuda.shared.array(DV, float32)
        oj = o[n, h, j]
        row[j] = oj
        cuda.syncthreads()
        out[n, h, j] = gated(row, oj, z[n, h, j], nw[j])

    return gdn_gated_rmsnorm


def build(shape, TAIL_FAULT: int = 0):
    N, dk, dv, hk, hv, W = (shape[x] for x in ("n", "dk", "dv", "hk", "hv", "conv_width"))
    group_of(hk, hv)
    C = 2 * hk * dk + hv * dv
    conv_grid, conv_nt = check_launch(-(-N * C // (CONV_THREADS * conv_channels(dk, dv))), CONV_THREADS, 0)
    gdn_grid, gdn_nt = slice_launch(shape, decode_shared_bytes, sequences=N)
    norm_grid, norm_nt = check_launch(N * hv, dv, 4 * dv)
    conv = make_conv_kernel(W, dk, dv, TAIL_FAULT)
    gdn = make_decode_batched(dk, dv)
    norm = make_norm_kernel(dv)
    # Scratch for the intermediates, allocated once here, outside any timing.
    qa = cuda.device_array((N, hk, dk), "float32")
    ka = cuda.device_array((N, hk, dk), "float32")
    va = cuda.device_array((N, hv, dv), "float32")
    oa = cuda.device_array((N, hv, dv), "float32")

    def launch(b):
        conv[conv_grid, conv_nt](b["x"], b["conv_weight"], b["conv_state"], b["slots"], qa, ka, va)
        st = b["state"]
        gdn[gdn_grid, gdn_nt](qa, ka, va, b["g"], b["beta"], b["slots"], st.reshape(st.size), oa)
        norm[norm_grid, norm_nt](oa, b["z"], b["norm_weight"], b["out"])

    launch.workspace = {"q_a": qa, "k_a": ka, "v_a": va, "o_a": oa}  # poisoned by the bench before a check
    return launch

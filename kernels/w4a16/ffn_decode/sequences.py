"""The dense-FFN decode variants: fixed sequences of the family's kernels.

``y = W_down (silu(W_gate x) * (W_up x))`` for one token, ``x`` and ``y``
fp16 ``[hidden]``, ``W_gate``/``W_up`` ``[inter, hidden]`` and ``W_down``
``[hidden, inter]`` packed int4. Scratch vectors (fp16, ``[inter]``) are
allocated once per ``build`` and declared as the launch's ``workspace`` (the
bench poisons them before each correctness run)::

    gemv_{sw,64t}+fused   dual GEMV -> gate, up
                          fused SiLU-multiply + down GEMV (warp per row) -> y
    gemv_{sw,64t}+split   dual GEMV -> gate, up
                          SiLU-multiply -> h
                          down GEMV ({sw,64t}, as the dual) -> y
    gemm_m1               GEMM(x[1, hidden], W_gate) -> gate
                          GEMM(x[1, hidden], W_up)   -> up
                          SiLU-multiply -> h
                          GEMM(h[1, inter], W_down)  -> y

``gemv_sw`` picks the single-warp or 64-thread kernel for every GEMV of a
GEMV variant; the fused SiLU+down kernel exists only as a one-warp-per-row
kernel. ``gemm_m1`` uses the small-M tiles for a projection whose K is a
multiple of 32 (M = 1 is always small) and the default tiles otherwise.
"""

from __future__ import annotations

import numpy as np
from numba import cuda

from ...common.int4 import packed_bytes
from ...common.path import Traffic
from ..gemm import gemm_tiled
from ..gemv import gemv_64t, gemv_sw
from ..gemv_dual import gemv_dual_64t, gemv_dual_sw
from . import fused_silu_down as ffn_fused_silu_down
from . import silu_mul

VARIANTS = ("gemv_sw+fused", "gemv_64t+fused", "gemv_sw+split", "gemv_64t+split", "gemm_m1")


def _gemm_config(n: int, k: int) -> gemm_tiled.GemmConfig:
    if not gemm_tiled.supports(gemm_tiled.SMALL_M, 1, n, k):
        return gemm_tiled.SMALL_M
    return gemm_tiled.DEFAULT


def build_ffn_variant(name: str, shape):
    """``launch(bufs)`` for one variant; ``bufs`` holds ``x``, ``qw_gate``,
    ``s_gate``, ``qw_up``, ``s_up``, ``qw_down``, ``s_down`` and ``y``."""
    if name not in VARIANTS:
        raise KeyError(name)
    hidden, inter = shape["hidden"], shape["inter"]
    gate = cuda.device_array(inter, dtype=np.float16)
    up = cuda.device_array(inter, dtype=np.float16)

    if name == "gemm_m1":
        h = cuda.device_array(inter, dtype=np.float16)
        gemm_gu = gemm_tiled.make_launch(_gemm_config(inter, hidden), 1, inter, hidden)
        gemm_down = gemm_tiled.make_launch(_gemm_config(hidden, inter), 1, hidden, inter)
        act = silu_mul.make_launch(inter)
        gate2, up2, h2 = gate.reshape(1, inter), up.reshape(1, inter), h.reshape(1, inter)

        def launch(bufs):
            x2 = bufs["x"].reshape(1, hidden)
            gemm_gu(gate2, x2, bufs["qw_gate"], bufs["s_gate"])
            gemm_gu(up2, x2, bufs["qw_up"], bufs["s_up"])
            act(h, gate, up)
            gemm_down(bufs["y"].reshape(1, hidden), h2, bufs["qw_down"], bufs["s_down"])

        launch.workspace = {"gate": gate, "up": up, "h": h}  # the bench poisons it before a check
        return launch

    gemv_kind, mode = name.split("+")
    dual_mod = gemv_dual_sw if gemv_kind == "gemv_sw" else gemv_dual_64t
    dual = dual_mod.make_launch(inter, hidden)

    if mode == "fused":
        down = ffn_fused_silu_down.make_launch(hidden, inter)

        def launch(bufs):
            dual(gate, up, bufs["qw_gate"], bufs["s_gate"], bufs["qw_up"], bufs["s_up"], bufs["x"])
            down(bufs["y"], bufs["qw_down"], bufs["s_down"], gate, up)

        launch.workspace = {"gate": gate, "up": up}
        return launch

    h = cuda.device_array(inter, dtype=np.float16)
    act = silu_mul.make_launch(inter)
    down = (gemv_sw if gemv_kind == "gemv_sw" else gemv_64t).make_launch(hidden, inter)

    def launch(bufs):
        dual(gate, up, bufs["qw_gate"], bufs["s_gate"], bufs["qw_up"], bufs["s_up"], bufs["x"])
        act(h, gate, up)
        down(bufs["y"], bufs["qw_down"], bufs["s_down"], h)

    launch.workspace = {"gate": gate, "up": up, "h": h}
    return launch


def ffn_variant_traffic(name: str, shape) -> Traffic:
    """The path's minimum plus the fp16 intermediates each variant writes
    and reads back by design: ``gate`` and ``up`` for all; ``h`` too for
    the split and GEMM variants."""
    if name not in VARIANTS:
        raise KeyError(name)
    hidden, inter = shape["hidden"], shape["inter"]
    weights = 2 * packed_bytes(inter, hidden) + packed_bytes(hidden, inter)
    vectors = 2 if name.endswith("+fused") else 3  # gate, up (+ h)
    rt = vectors * 2 * inter  # fp16 intermediates, written once and read once
    reads = weights + 2 * hidden + rt
    if name == "gemm_m1":
        reads += 2 * hidden  # x is read by the gate GEMM and again by the up GEMM
    return Traffic(
        bytes_read=reads,
        bytes_written=2 * hidden + rt,
        flops=6 * hidden * inter + silu_mul.FLOPS_PER_ELEMENT * inter,
    )

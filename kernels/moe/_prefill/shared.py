"""The shared expert's pipeline: every token through one squared-ReLU
expert, ``y = W_down relu2(W_up x)``, on ``grouped``'s GEMM with one
expert owning every row (``off = [0, T]``, an input) on the single-launch
schedule. Each projection reads its activations as they are (fp16 ``x``,
float32 ``h``) or quantised to NVFP4 first (W4A4: ``common.nvfp4_act``,
an E4M3 scale per 16 values and one tensor scale per GEMM).
"""

from __future__ import annotations

import numpy as np
from numba import cuda

from ...common import bits, nvfp4_act
from . import grouped as G


def _nvfp4_scratch(rows: int, k: int, tag: str) -> dict:
    return {
        f"{tag}_packed": cuda.device_array((rows, k // 2), np.uint8),
        f"{tag}_scales": cuda.device_array((rows, k // bits.NVFP4_BLOCK), np.uint8),
        f"{tag}_ts": cuda.device_array(1, np.float32),
        f"{tag}_rowmax": cuda.device_array(rows, np.float32),
    }


def build(shape, w4a4_up: bool, w4a4_down: bool):
    t, hid, s = shape["t"], shape["h"], shape["s"]
    for what, n in (("hidden", hid), ("shared intermediate", s)):
        if n % bits.NVFP4_BLOCK:
            raise ValueError(f"{what} {n}: NVFP4 weights need a multiple of {bits.NVFP4_BLOCK}")
    h = cuda.device_array((t, s), np.float32)
    unused = cuda.device_array(1, np.float32)
    ws = {"h": h, "unused": unused}
    quant = nvfp4_act.launcher() if (w4a4_up or w4a4_down) else None
    if w4a4_up:
        ws.update(_nvfp4_scratch(t, hid, "x"))
    if w4a4_down:
        ws.update(_nvfp4_scratch(t, s, "h"))
    up = G.launcher(G.GROUPED, False, G.RELU2, G.NVFP4 if w4a4_up else G.FLOAT, G.NVFP4)
    down = G.launcher(G.GROUPED, False, G.NONE, G.NVFP4 if w4a4_down else G.FLOAT, G.NVFP4)

    def operand(a, tag, on):
        if not on:
            return a, unused, unused
        quant(ws[f"{tag}_packed"], ws[f"{tag}_scales"], ws[f"{tag}_ts"], ws[f"{tag}_rowmax"], a)
        return ws[f"{tag}_packed"], ws[f"{tag}_scales"], ws[f"{tag}_ts"]

    def launch(bufs):
        off, toff = bufs["off"], bufs["tile_off"]
        a, a_sc, a_ts = operand(bufs["x"], "x", w4a4_up)
        up(h, a, a_sc, a_ts, off, bufs["up_fp4"], bufs["up_sc"], bufs["up_ts"], off, toff, 1, t)
        a, a_sc, a_ts = operand(h, "h", w4a4_down)
        down(bufs["y"], a, a_sc, a_ts, off, bufs["dn_fp4"], bufs["dn_sc"], bufs["dn_ts"], off, toff, 1, t)

    launch.workspace = ws
    launch.tensor_cores, launch.tc_dtype = G.TENSOR_CORES, G.TC_DTYPE  # every GEMM: mma.sync, fp16 in
    return launch


def launches(w4a4_up: bool, w4a4_down: bool) -> int:
    """Two GEMMs, and the NVFP4 encoder's two kernels per W4A4 projection."""
    return 2 + 2 * w4a4_up + 2 * w4a4_down

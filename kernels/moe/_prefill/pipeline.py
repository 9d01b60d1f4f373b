"""The routed-prefill pipeline every routed variant runs, its GEMM routes
chosen by the variant and its tile bound and zeroing by the levers bound
into the shape (``spec.bind``):

    route_sort -> [zero h, d] -> gate/up (h = act(x W_up^T), sorted rows)
               -> [quantise h to E4M3 per row] -> down (d = h W_down^T) -> combine (y)

Each GEMM is ``grouped``'s, on its route: ``"grouped"`` (the single-launch
grouped GEMM over the exact tile list: every row, whatever the routing),
``"bounded"`` (``E * max_m_tiles`` tile rows: rows past the bound are not
computed) or, for down, ``"fp8"`` (activations to E4M3 per row by
``common.rowquant``, E4M3 weights with a scale per output row, on the
bounded grid like the engine's other grouped GEMMs).

The scratch ``h`` (float32 ``[rows, I]``) and ``d`` (``[rows, H]``) is the
launch's workspace, which the bench fills with NaN before the run: a row a
bounded GEMM skipped reaches the combine as NaN unless the pipeline zeroed
the scratch first (``zero``), and then as zeros, which is as wrong but
finite. ``launch.m_tiles`` holds the bound the last call used (None when
every GEMM ran on the grouped route), from which ``rows_lost`` counts what
it dropped.
"""

from __future__ import annotations

import numpy as np
from numba import cuda

from ...common import bits, nvfp4_act
from ...common import rowquant as _rowquant
from . import bounds
from . import grouped as G
from . import route as _route

ROUTES = ("grouped", "bounded", "fp8")


def m_tiles_for(shape, counts_on_device) -> int:
    """The tile bound of one call: the shape's ``m_tiles`` (bound by the
    levers, ``spec.bind_*``), where 0 means exact: the routing's largest
    count read back from the device; a shape the levers did not bind takes
    the worst case."""
    mt = shape.get("m_tiles")
    if mt is None:
        return bounds.worst_case(shape["t"])
    if mt == 0:
        off = counts_on_device.copy_to_host()  # the host sync graph capture cannot have
        return bounds.exact(np.diff(off))
    return int(mt)


def build(shape, up: str, down: str, *, act: int = G.SILU_GLU, w4a4_up: bool = False):
    """The routed pipeline at ``shape`` with gate/up on route ``up``
    (``grouped``/``bounded``) and down on ``down`` (``grouped``/``bounded``/
    ``fp8``); ``w4a4_up`` quantises the activations to NVFP4 for the up
    projection (the sorted prefill's W4A4 grouped up)."""
    if up not in ROUTES[:2] or down not in ROUTES:
        raise ValueError(f"routes {up!r}, {down!r}: up one of {ROUTES[:2]}, down one of {ROUTES}")
    t, hid, inter, e, k = shape["t"], shape["h"], shape["i"], shape["e"], shape["k"]
    for what, n in (("hidden", hid), ("expert intermediate", inter)):
        if n % bits.NVFP4_BLOCK:
            raise ValueError(f"{what} {n}: NVFP4 weights need a multiple of {bits.NVFP4_BLOCK}")
    rows = t * k
    sort, ws = _route.sorter(e, rows)
    zero = _route.zeroer() if shape.get("zero", 0) else None
    combine = _route.combiner()
    h = cuda.device_array((rows, inter), np.float32)
    d = cuda.device_array((rows, hid), np.float32)
    dummy_f = cuda.device_array(1, np.float32)  # the operands a configuration does not read
    ws.update(h=h, d=d, unused=dummy_f)
    afmt_up = G.NVFP4 if w4a4_up else G.FLOAT
    gemm_up = G.launcher(G.GROUPED if up == "grouped" else G.BOUNDED, True, act, afmt_up, G.NVFP4)
    if w4a4_up:
        quant_x = nvfp4_act.launcher()
        xq = {
            "packed": cuda.device_array((t, hid // 2), np.uint8),
            "scales": cuda.device_array((t, hid // bits.NVFP4_BLOCK), np.uint8),
            "ts": cuda.device_array(1, np.float32),
            "rowmax": cuda.device_array(t, np.float32),
        }
        ws.update({f"x_{n}": a for n, a in xq.items()})
    if down == "fp8":
        quant_h = _rowquant.launcher("e4m3")
        h8 = cuda.device_array((rows, inter), np.uint8)
        hs = cuda.device_array(rows, np.float32)
        ws.update(h8=h8, hs=hs)
        gemm_down = G.launcher(G.BOUNDED, False, G.NONE, G.E4M3, G.E4M3)
    else:
        gemm_down = G.launcher(G.GROUPED if down == "grouped" else G.BOUNDED, False, G.NONE, G.FLOAT, G.NVFP4)
    bounded = up == "bounded" or down != "grouped"

    def launch(bufs):
        sort(bufs["ids"])
        if zero is not None:
            zero(h)
            zero(d)
        mt = m_tiles_for(shape, ws["off"]) if bounded else 1
        launch.m_tiles = mt if bounded else None
        tok, off, toff = ws["tok"], ws["off"], ws["tile_off"]
        if w4a4_up:
            quant_x(xq["packed"], xq["scales"], xq["ts"], xq["rowmax"], bufs["x"])
            gemm_up(
                h,
                xq["packed"],
                xq["scales"],
                xq["ts"],
                tok,
                bufs["up_fp4"],
                bufs["up_sc"],
                bufs["up_ts"],
                off,
                toff,
                mt,
                rows,
            )
        else:
            gemm_up(
                h, bufs["x"], dummy_f, dummy_f, tok, bufs["up_fp4"], bufs["up_sc"], bufs["up_ts"], off, toff, mt, rows
            )
        if down == "fp8":
            quant_h(h8, hs, h)
            gemm_down(d, h8, hs, dummy_f, tok, bufs["dn_q8"], bufs["dn_s8"], dummy_f, off, toff, mt, rows)
        else:
            gemm_down(d, h, dummy_f, dummy_f, tok, bufs["dn_fp4"], bufs["dn_sc"], bufs["dn_ts"], off, toff, mt, rows)
        combine(bufs["y"], d, bufs["wts"], ws["slot"])

    launch.m_tiles = None
    launch.workspace = ws
    launch.tensor_cores, launch.tc_dtype = G.TENSOR_CORES, G.TC_DTYPE  # every GEMM: mma.sync, fp16 in
    return launch


def launches(shape, down: str, w4a4_up: bool = False) -> int:
    """Kernel launches of one call: sort, gate/up, down, combine, and the
    zeroing (two), the FP8 row quantiser, the NVFP4 activation encoder (two)
    where the shape's levers or the variant add them."""
    return 4 + 2 * bool(shape.get("zero", 0)) + (down == "fp8") + 2 * w4a4_up


def rows_lost(launch) -> int:
    """Routed rows the last call's tile bound left uncomputed."""
    counts = np.diff(launch.workspace["off"].copy_to_host())
    return bounds.rows_lost(counts, launch.m_tiles)

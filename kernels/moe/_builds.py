"""``build(shape) -> launch(bufs)`` of every MoE variant, from the kernels
of ``_experts``, ``_router`` and ``_union``; each path's spec maps its variants to them.

Inputs (see the path declarations in ``__init__``): ``x`` fp16 ``[R, H]``,
``ids`` int32 ``[R, k]``, ``rw`` float32 ``[R, k]``, weights as
``<name>_a/_b/_c`` (``formats``): ``wgu`` gate/up ``[E, 2I, H]``, ``wd`` down
``[E, H, I]``, suffixed with their format where a path carries two.
"""

from __future__ import annotations

import numpy as np
from numba import cuda

from . import _experts as X
from . import _experts_tc as XT
from . import _router, _union

_K_MULTIPLE = {"int4": 8, "nvfp4": 16, "fp8": 8}  # a chunk is 8 inputs; an NVFP4 scale covers 16


def _check_k(FMT: str, **ks: int) -> None:
    for what, k in ks.items():
        if k <= 0 or k % _K_MULTIPLE[FMT]:
            raise ValueError(f"{what}={k}: {FMT} expert weights need it a positive multiple of {_K_MULTIPLE[FMT]}")


def _w(bufs: dict, name: str):
    return bufs[f"{name}_a"], bufs[f"{name}_b"], bufs[f"{name}_c"]


def gateup(FMT: str):
    """moe.gateup_fp4: the per-row kernel (FP32 cores) at decode shapes; at
    prefill shapes the routing sort, then rows of an expert together on
    tensor cores (``_experts_tc``: the grouped GEMM engine, mma.sync fp16)."""

    def build(shape):
        rows, k, inter, experts = shape["rows"], shape["top_k"], shape["inter"], shape["experts"]
        _check_k(FMT, hidden=shape["hidden"])
        name = f"wgu_{FMT}"
        if not shape["prefill"]:
            run = X.gateup_rows(FMT, inter, rows, k)

            def launch(bufs):
                run(bufs["h"], bufs["x"], bufs["ids"], _w(bufs, name))

            launch.tensor_cores = launch.tc_dtype = None  # the per-row kernel runs on FP32 cores
            return launch
        sort = X.route_sort(experts, rows, k)
        run = XT.gateup(FMT, shape["hidden"], rows * k)
        ws = sort.workspace

        def launch(bufs):
            sort(bufs["ids"])
            run(bufs["h"], bufs["x"], _w(bufs, name), ws)

        launch.workspace = ws
        launch.tensor_cores, launch.tc_dtype = run.tensor_cores, run.tc_dtype
        return launch

    return build


def down(FMT: str):
    """moe.down_fp4: per-row (FP32 cores) at decode shapes, each row summing
    its experts; at prefill shapes the routing sort, one partial row per
    assignment on tensor cores (``_experts_tc``), and the combine."""

    def build(shape):
        rows, k, hidden, experts = shape["rows"], shape["top_k"], shape["hidden"], shape["experts"]
        _check_k(FMT, expert_intermediate=shape["inter"])
        name = f"wd_{FMT}"
        if not shape["prefill"]:
            run = X.down_rows(FMT, hidden, rows, shape["inter"])

            def launch(bufs):
                run(bufs["y"], bufs["h"], bufs["ids"], bufs["rw"], _w(bufs, name))

            launch.tensor_cores = launch.tc_dtype = None  # the per-row kernel runs on FP32 cores
            return launch
        sort = X.route_sort(experts, rows, k)
        run = XT.down(FMT, shape["inter"], rows * k)
        comb = X.combine(rows, hidden)
        ws = {**sort.workspace, "ys": cuda.device_array((rows * k, hidden), np.float32)}

        def launch(bufs):
            sort(bufs["ids"])
            run(ws["ys"], bufs["h"], _w(bufs, name), ws)
            comb(bufs["y"], ws["ys"], bufs["rw"])

        launch.workspace = ws
        launch.tensor_cores, launch.tc_dtype = run.tensor_cores, run.tc_dtype
        return launch

    return build


def moe_per_row(FMT: str, per_token: bool = False):
    """The whole routed FFN through the decode kernels: gate/up then down, for
    the batch in two launches (``per_token`` False: token-major), or two
    launches per row (the legacy per-token path)."""

    def build(shape):
        rows, k, hidden, inter = shape["rows"], shape["top_k"], shape["hidden"], shape["inter"]
        _check_k(FMT, hidden=hidden, expert_intermediate=inter)
        step = 1 if per_token else rows
        gu = X.gateup_rows(FMT, inter, step, k)
        dn = X.down_rows(FMT, hidden, step, inter)
        ws = {"h": cuda.device_array((rows * k, inter), np.float32)}

        def launch(bufs):
            wgu, wd = _w(bufs, f"wgu_{FMT}"), _w(bufs, f"wd_{FMT}")
            for r0 in range(0, rows, step):
                gu(ws["h"], bufs["x"], bufs["ids"], wgu, r0)
                dn(bufs["y"], ws["h"], bufs["ids"], bufs["rw"], wd, r0)

        launch.workspace = ws
        return launch

    return build


def moe_grouped(FMT: str):
    """The whole routed FFN through the grouped kernels: routing sort, gate/up
    and down expert by expert on tensor cores (``_experts_tc``), combine
    (five launches)."""

    def build(shape):
        rows, k, hidden, inter, experts = (
            shape["rows"],
            shape["top_k"],
            shape["hidden"],
            shape["inter"],
            shape["experts"],
        )
        _check_k(FMT, hidden=hidden, expert_intermediate=inter)
        sort = X.route_sort(experts, rows, k)
        gu = XT.gateup(FMT, hidden, rows * k)
        dn = XT.down(FMT, inter, rows * k)
        comb = X.combine(rows, hidden)
        ws = {
            **sort.workspace,
            "h": cuda.device_array((rows * k, inter), np.float32),
            "ys": cuda.device_array((rows * k, hidden), np.float32),
        }

        def launch(bufs):
            sort(bufs["ids"])
            gu(ws["h"], bufs["x"], _w(bufs, f"wgu_{FMT}"), ws)
            dn(ws["ys"], ws["h"], _w(bufs, f"wd_{FMT}"), ws)
            comb(bufs["y"], ws["ys"], bufs["rw"])

        launch.workspace = ws
        launch.tensor_cores, launch.tc_dtype = XT.TENSOR_CORES, XT.TC_DTYPE
        return launch

    return build


def router(PREC: str, BROKEN: str = ""):
    """moe.router: the gate GEMM in ``PREC`` into a float32 logits scratch,
    then the top-k kernel."""

    def build(shape):
        rows, experts, k = shape["rows"], shape["experts"], shape["top_k"]
        gate = _router.gate(PREC, rows, experts, shape["hidden"])
        top = _router.topk(rows, experts, k, BROKEN)
        ws = {"logits": cuda.device_array((rows, experts), np.float32)}
        xname = "x_f32" if PREC == "fp32_routing" else "x_bf16"

        def launch(bufs):
            gate(ws["logits"], bufs[xname], bufs["wg"])
            top(bufs["ids"], bufs["weights"], ws["logits"])

        launch.workspace = ws
        return launch

    return build


def union(STATS: bool):
    """moe.union_stats: the top-k of given logits, and with ``STATS`` the union
    count after it (the record's shape carries ``stats``)."""

    def build(shape):
        rows, experts, k = shape["rows"], shape["experts"], shape["top_k"]
        if STATS and not shape.get("stats", 0):
            raise ValueError("the union count runs only where the shape is bound with stats = 1")
        top = _router.topk(rows, experts, k)
        count = _union.union_count(experts) if STATS else None

        def launch(bufs):
            top(bufs["ids"], bufs["weights"], bufs["logits"])
            if count is not None:
                count(bufs["union"], bufs["expert_rows"], bufs["ids"])

        return launch

    return build

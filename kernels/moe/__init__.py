"""MoE decode-side kernel paths: the router, the routed experts' FFN in the
weight formats the holo levers choose, the FP8 grouped decode, the
multi-sequence decode, decode through the prefill path, and the expert-union
statistics.

================================  ============================  ==========================================
path                              variants                      what one call does
================================  ============================  ==========================================
moe.router (Metrale)              bf16, fp32_gate,              gate GEMM, softmax, top-k, renormalised
                                  fp32_routing                  weights (2 launches)
moe.gateup_fp4                    int4, nvfp4                   gate/up of every routed row and the SiLU
                                                                product: per row at decode shapes, rows of
                                                                an expert together at prefill shapes
moe.down_fp4                      int4, nvfp4                   down projection, weighted sum of each
                                                                row's experts
moe.decode_fp8_grouped (Metrale)  grouped, per_row              the routed FFN with FP8 weights (128 x 128
                                                                block scales)
moe.decode_multi_seq (Metrale)    token_major, per_token        the routed FFN (int4) of a decode batch
moe.decode_via_prefill (Metrale)  decode, prefill               one row's routed FFN (int4); the shape
                                                                says whether the layer is a DFlash
                                                                capture layer
moe.union_stats                   off, on                       top-k of given logits; ``on`` counts the
                                                                distinct experts (bound: outputs grow)
================================  ============================  ==========================================

Sizes come from a recipe's ``[model]`` (``hidden``) and ``[model.moe]``
(``experts``, ``top_k``, ``expert_intermediate``) with ``[model.bench]``'s
``decode_batches`` and ``prefill_tokens``; Qwen3-Next-80B-A3B's where
absent. Routing of the expert paths is drawn (k distinct experts a row,
softmax weights of normal logits), so each path measures its own kernels.

Every kernel runs on FP32 CUDA cores (the records' ``tensor_cores`` null)
but the expert stages' products at prefill shapes (``moe.gateup_fp4``,
``moe.down_fp4``), which run on warp MMA (``mma.sync`` fp16,
``_experts_mma``; their records say so, with ``tc_flops`` the products').
"""
from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from ..common import bits
from ..common.path import Shape, Tolerance, Traffic, Variant, declared_path, check_preset
from ..selection import (MOE_DECODE_FP8_GROUPED, MOE_DECODE_MULTI_SEQ, MOE_DECODE_VIA_PREFILL, MOE_DOWN_FP4,
                         MOE_GATEUP_FP4, MOE_ROUTER, MOE_UNION_STATS, check_declaration)
from . import (down_int4, down_nvfp4, formats, fp8_grouped, fp8_per_row, gateup_int4, gateup_nvfp4, naive,
               per_token, router_bf16, router_fp32_gate, router_fp32_routing, routing, token_major, union_off,
               union_on, via_decode, via_prefill)

DEFAULT_MODEL: Mapping[str, Any] = {
    "name": "Qwen3-Next-80B-A3B", "hidden": 2048,
    "moe": {"experts": 512, "top_k": 10, "expert_intermediate": 512},
    "bench": {"decode_batches": [1, 8, 32], "prefill_tokens": [1024, 4096]},
}


def _sizes(model: Mapping[str, Any] | None) -> tuple[dict, list[int], list[int]]:
    """(dims of one MoE layer, decode batches, prefill token counts)."""
    model = model or {}
    moe = model.get("moe") or {}
    if not (model.get("hidden") and moe.get("experts") and moe.get("top_k") and moe.get("expert_intermediate")):
        model, moe = DEFAULT_MODEL, DEFAULT_MODEL["moe"]
    bench = model.get("bench") or {}
    dims = dict(hidden=int(model["hidden"]), experts=int(moe["experts"]), top_k=int(moe["top_k"]),
                inter=int(moe["expert_intermediate"]))
    decode = [int(b) for b in bench.get("decode_batches") or DEFAULT_MODEL["bench"]["decode_batches"]]
    prefill = [int(t) for t in bench.get("prefill_tokens") or DEFAULT_MODEL["bench"]["prefill_tokens"]]
    return dims, decode, prefill


def _label(d: Mapping[str, int], extra: str = "") -> str:
    hidden = f" h{d['hidden']}" if "hidden" in d else ""
    inter = f" i{d['inter']}" if "inter" in d else ""
    return f"{extra}rows{d['rows']}{hidden}{inter} e{d['experts']} k{d['top_k']}"


def _shape(d: dict, extra: str = "") -> Shape:
    return Shape(_label(d, extra), d)


# ── inputs ──────────────────────────────────────────────────────────────────


def _rng_routing(rng: np.random.Generator, rows: int, experts: int, k: int):
    """k distinct experts a row, and softmax weights of normal logits."""
    ids = np.argsort(rng.random((rows, experts), dtype=np.float32), axis=1)[:, :k].astype(np.int32)
    z = np.exp(rng.standard_normal((rows, k)))
    return ids, (z / z.sum(axis=1, keepdims=True)).astype(np.float32)


def _x(rng: np.random.Generator, rows: int, hidden: int) -> np.ndarray:
    """fp16 activations that bf16 holds exactly too."""
    a = rng.standard_normal((rows, hidden), dtype=np.float32)
    return bits.bf16_to_f32_np(bits.f32_to_bf16_np(a)).astype(np.float16)


def _touched(ids: np.ndarray) -> list[int]:
    return [int(e) for e in np.unique(ids)]


def _expected_experts(shape: Shape) -> float:
    """Experts a batch of ``rows`` uniformly routed rows touches, on average."""
    e, k, r = shape["experts"], shape["top_k"], shape["rows"]
    return e * (1.0 - (1.0 - k / e) ** r)


# ── moe.router ──────────────────────────────────────────────────────────────


def router_shapes(preset: str, model) -> list[Shape]:
    if preset == "smoke":
        return [_shape(dict(rows=3, hidden=37, experts=8, top_k=2))]
    check_preset(preset)
    dims, decode, prefill = _sizes(model)
    d = {k: dims[k] for k in ("hidden", "experts", "top_k")}
    return [_shape(dict(rows=r, **d)) for r in (*decode, *prefill)]


def router_inputs(shape: Shape, rng: np.random.Generator) -> dict:
    """``x_f32``: the MoE-input norm's output (FP32); ``x_bf16``: it in bf16
    (bits); ``wg``: the gate's bf16 weights (bits), about 0.05 so logits
    spread about 2 at the model's hidden size."""
    rows, hidden, experts = shape["rows"], shape["hidden"], shape["experts"]
    x = rng.standard_normal((rows, hidden), dtype=np.float32)
    wg = rng.standard_normal((experts, hidden), dtype=np.float32) * np.float32(2.0 / np.sqrt(hidden))
    return {"x_f32": x, "x_bf16": bits.f32_to_bf16_np(x), "wg": bits.f32_to_bf16_np(wg)}


def _router_logits(inputs: dict) -> np.ndarray:
    return np.asarray(inputs["x_f32"], np.float64) @ bits.bf16_to_f32_np(inputs["wg"]).astype(np.float64).T


def router_reference(shape: Shape, inputs: dict) -> dict:
    _, ids, w = naive.naive_router(inputs["x_f32"], bits.bf16_to_f32_np(inputs["wg"]), shape["top_k"])
    return {"ids": ids, "weights": w}


def router_align(shape: Shape, inputs: dict, got: dict, ref: dict):
    return routing.align(_router_logits(inputs), shape["top_k"], got, ref)


def router_findings(variant, shape, launch, bufs, cuda) -> dict:
    host = {n: bufs[n].copy_to_host() for n in ("x_f32", "wg", "ids", "weights")}
    return {"routing": routing.findings(_router_logits(host), shape["top_k"], host["ids"], host["weights"])}


def router_traffic(shape: Shape) -> Traffic:
    r, h, e, k = shape["rows"], shape["hidden"], shape["experts"], shape["top_k"]
    return Traffic(bytes_read=2 * e * h + 2 * r * h + 4 * r * e, bytes_written=4 * r * e + 8 * r * k,
                   flops=2 * r * e * h + 4 * r * e)


def _router_traffic_fp32(shape: Shape) -> Traffic:
    t = router_traffic(shape)
    return Traffic(t.bytes_read + 2 * shape["rows"] * shape["hidden"], t.bytes_written, t.flops)


def _topk_outputs(shape: Shape) -> dict:
    rk = (shape["rows"], shape["top_k"])
    return {"ids": (rk, "int32"), "weights": (rk, "float32")}


# Weights against the float64 softmax of the selected experts' logits. BF16
# logits round by up to 2^-9 of their size; with the BF16 input's rounding
# that moved weights by up to 1.0e-2 in norm and 1.3e-2 in one weight (of the
# row's largest); a BF16 input alone by up to 3.6e-3 and 5.2e-3 (200 seeds
# at the smoke shape, 10 at the model's 64 x 2048 x 512). FP32 throughout
# leaves float32 sums.
ROUTER_TOLERANCES = {
    "bf16": Tolerance(rel=3e-2, abs_of_max=3e-2),
    "fp32_gate": Tolerance(rel=1.5e-2, abs_of_max=1.5e-2),
    "fp32_routing": Tolerance(rel=1e-4, abs_of_max=1e-4),
}


def _variants(specs: Mapping[str, dict]) -> dict[str, Variant]:
    return {v: Variant(v, **kw) for v, kw in specs.items()}


ROUTER = declared_path(
    MOE_ROUTER, "moe", _variants({
        "bf16": dict(summary="BF16 router input, gate GEMM logits rounded to BF16, softmax and top-k",
                     build=router_bf16.build, tolerance=ROUTER_TOLERANCES["bf16"], launches=2),
        "fp32_gate": dict(summary="BF16 router input, FP32 gate logits, softmax and top-k",
                          build=router_fp32_gate.build, tolerance=ROUTER_TOLERANCES["fp32_gate"], launches=2),
        "fp32_routing": dict(summary="FP32 router input and FP32 gate logits, softmax and top-k",
                             build=router_fp32_routing.build, tolerance=ROUTER_TOLERANCES["fp32_routing"],
                             launches=2, traffic=_router_traffic_fp32),
    }),
    shapes=router_shapes, make_inputs=router_inputs, outputs=_topk_outputs, reference=router_reference,
    traffic=router_traffic, tolerance=ROUTER_TOLERANCES["fp32_routing"],
    notes="memory-bound at decode (the gate's weights), compute-bound at prefill; the top-k is one block a row",
    extra={"align": router_align, "findings": router_findings, "model_sections": ("moe",)},
)


# ── moe.gateup_fp4 / moe.down_fp4 ───────────────────────────────────────────


def stage_shapes(preset: str, model) -> list[Shape]:
    if preset == "smoke":
        # NVFP4 needs K a multiple of 16; 48 and 32 are not multiples of the
        # kernels' K step of 64, nor of the 128-input int4 group.
        base = dict(hidden=48, inter=32, experts=8, top_k=2)
        return [_shape(dict(rows=3, prefill=0, **base), "decode "), _shape(dict(rows=5, prefill=1, **base), "prefill ")]
    check_preset(preset)
    dims, decode, prefill = _sizes(model)
    return ([_shape(dict(rows=r, prefill=0, **dims), "decode ") for r in decode]
            + [_shape(dict(rows=r, prefill=1, **dims), "prefill ") for r in prefill])


def gateup_inputs(shape: Shape, rng: np.random.Generator) -> dict:
    rows, hidden, inter, experts, k = shape["rows"], shape["hidden"], shape["inter"], shape["experts"], shape["top_k"]
    ids, _ = _rng_routing(rng, rows, experts, k)
    w4 = formats.draw_int4(rng, experts, 2 * inter, hidden, _touched(ids))
    out = {"x": _x(rng, rows, hidden), "ids": ids}
    formats.put(out, "wgu_int4", w4)
    formats.put(out, "wgu_nvfp4", formats.nvfp4_from(w4, _touched(ids)))
    return out


def gateup_reference(shape: Shape, inputs: dict) -> dict:
    w4 = formats.get(inputs, "wgu_int4")
    return {"h": naive.naive_gateup(inputs["x"], inputs["ids"], lambda e: formats.int4_expert(w4, e))}


def down_inputs(shape: Shape, rng: np.random.Generator) -> dict:
    rows, hidden, inter, experts, k = shape["rows"], shape["hidden"], shape["inter"], shape["experts"], shape["top_k"]
    ids, rw = _rng_routing(rng, rows, experts, k)
    w4 = formats.draw_int4(rng, experts, hidden, inter, _touched(ids))
    g = rng.standard_normal((rows * k, inter)) * 3
    h = (naive.silu(g) * rng.standard_normal((rows * k, inter)) * 3).astype(np.float32)
    out = {"h": h, "ids": ids, "rw": rw}
    formats.put(out, "wd_int4", w4)
    formats.put(out, "wd_nvfp4", formats.nvfp4_from(w4, _touched(ids)))
    return out


def down_reference(shape: Shape, inputs: dict) -> dict:
    w4 = formats.get(inputs, "wd_int4")
    return {"y": naive.naive_down(inputs["h"], inputs["ids"], inputs["rw"], lambda e: formats.int4_expert(w4, e))}


def _gateup_traffic(fmt: str):
    def traffic(shape: Shape) -> Traffic:
        r, h, i, k = shape["rows"], shape["hidden"], shape["inter"], shape["top_k"]
        w = int(_expected_experts(shape) * formats.weight_bytes(fmt, 2 * i, h))
        mm = 2 * r * k * 2 * i * h  # on the tensor cores at prefill shapes; the SiLU products on FP32
        return Traffic(bytes_read=w + 2 * r * h + 4 * r * k, bytes_written=4 * r * k * i,
                       flops=mm + 4 * r * k * i, tc_flops=mm if shape["prefill"] else None)
    return traffic


def _down_traffic(fmt: str):
    def traffic(shape: Shape) -> Traffic:
        r, h, i, k = shape["rows"], shape["hidden"], shape["inter"], shape["top_k"]
        w = int(_expected_experts(shape) * formats.weight_bytes(fmt, h, i))
        mm = 2 * r * k * h * i  # on the tensor cores at prefill shapes; the combine on FP32
        return Traffic(bytes_read=w + 4 * r * k * i + 8 * r * k, bytes_written=4 * r * h,
                       flops=mm + 2 * r * k * h, tc_flops=mm if shape["prefill"] else None)
    return traffic


def _stage_launches(shape: Shape) -> int:
    return 3 if shape["prefill"] else 1


def _down_launches(shape: Shape) -> int:
    return 4 if shape["prefill"] else 1


# int4 reads the model's weights as drawn: float32 sums only. NVFP4 re-encodes
# them (an E4M3 scale per 16 values, the int4 grid's 16 levels onto E2M1's
# 8 magnitudes): measured against the float64 product with the model's
# weights, down's output is off by 9-13 % in norm (median 9.5 %) and by up
# to 22 % of its largest magnitude in one element; gate/up's SiLU product,
# which multiplies two such errors, by 12-19 % (median 13.5 %) and up to
# 41 % in one element (200 seeds at each smoke shape; 2 at the model's
# 8-row decode: 9.5 % and 13.7 %). The tests hold the NVFP4 kernels to their
# own weights' exact decoding much more tightly.
STAGE_TOLERANCES = {
    "int4": Tolerance(rel=1e-4, abs_of_max=1e-4),
    # at prefill both stages run on fp16 tensor cores: each weight (and down's
    # float32 input) rounds once to fp16 (2^-11), as in the W4A16 tensor-core
    # GEMMs, whose bound this is
    "int4_tc": Tolerance(rel=2e-3, abs_of_max=2e-3),
    "nvfp4_gateup": Tolerance(rel=0.25, abs_of_max=0.5),
    "nvfp4_down": Tolerance(rel=0.18, abs_of_max=0.3),
}

GATEUP = declared_path(
    MOE_GATEUP_FP4, "moe", _variants({
        "int4": dict(summary="W4A16 int4 experts: per-row kernel (FP32) at decode, expert-grouped on mma.sync "
                             "fp16 at prefill",
                     build=gateup_int4.build, tolerance=STAGE_TOLERANCES["int4_tc"],
                     traffic=_gateup_traffic("int4"), launches=_stage_launches, tensor_cores="mma.sync",
                     tc_dtype="f16"),
        "nvfp4": dict(summary="NVFP4 (holo) experts: per-row kernel (FP32) at decode, expert-grouped on mma.sync "
                              "fp16 at prefill",
                      build=gateup_nvfp4.build, tolerance=STAGE_TOLERANCES["nvfp4_gateup"],
                      traffic=_gateup_traffic("nvfp4"), launches=_stage_launches, tensor_cores="mma.sync",
                      tc_dtype="f16"),
    }),
    shapes=stage_shapes, make_inputs=gateup_inputs,
    outputs=lambda s: {"h": ((s["rows"] * s["top_k"], s["inter"]), "float32")},
    reference=gateup_reference, traffic=_gateup_traffic("int4"), tolerance=STAGE_TOLERANCES["int4"],
    notes="memory-bound at decode (each routed expert's weights), compute-bound at prefill",
    extra={"model_sections": ("moe",)},
)

DOWN = declared_path(
    MOE_DOWN_FP4, "moe", _variants({
        "int4": dict(summary="W4A16 int4 experts: per-row kernel (FP32) at decode; sort, expert-grouped on "
                             "mma.sync fp16, combine at prefill",
                     build=down_int4.build, tolerance=STAGE_TOLERANCES["int4_tc"], traffic=_down_traffic("int4"),
                     launches=_down_launches, tensor_cores="mma.sync", tc_dtype="f16"),
        "nvfp4": dict(summary="NVFP4 (holo) experts: per-row kernel (FP32) at decode; sort, expert-grouped on "
                              "mma.sync fp16, combine at prefill",
                      build=down_nvfp4.build, tolerance=STAGE_TOLERANCES["nvfp4_down"], traffic=_down_traffic("nvfp4"),
                      launches=_down_launches, tensor_cores="mma.sync", tc_dtype="f16"),
    }),
    shapes=stage_shapes, make_inputs=down_inputs,
    outputs=lambda s: {"y": ((s["rows"], s["hidden"]), "float32")},
    reference=down_reference, traffic=_down_traffic("int4"), tolerance=STAGE_TOLERANCES["int4"],
    notes="memory-bound at decode (each routed expert's weights), compute-bound at prefill",
    extra={"model_sections": ("moe",)},
)


# ── the whole routed FFN: FP8 grouped decode, multi-sequence, via prefill ──


def _ffn_inputs(fmt: str):
    def make(shape: Shape, rng: np.random.Generator) -> dict:
        rows, hidden, inter, experts, k = (shape["rows"], shape["hidden"], shape["inter"], shape["experts"],
                                           shape["top_k"])
        ids, rw = _rng_routing(rng, rows, experts, k)
        touched = _touched(ids)
        wgu = formats.draw_int4(rng, experts, 2 * inter, hidden, touched)
        wd = formats.draw_int4(rng, experts, hidden, inter, touched)
        if fmt == "fp8":
            wgu, wd = formats.fp8_from(wgu, touched), formats.fp8_from(wd, touched)
        out = {"x": _x(rng, rows, hidden), "ids": ids, "rw": rw}
        formats.put(out, f"wgu_{fmt}", wgu)
        formats.put(out, f"wd_{fmt}", wd)
        return out
    return make


def _ffn_reference(fmt: str):
    dec = formats.DECODE[fmt]

    def reference(shape: Shape, inputs: dict) -> dict:
        wgu, wd = formats.get(inputs, f"wgu_{fmt}"), formats.get(inputs, f"wd_{fmt}")
        return {"y": naive.naive_moe(inputs["x"], inputs["ids"], inputs["rw"], lambda e: dec(wgu, e),
                                     lambda e: dec(wd, e))}
    return reference


def _ffn_traffic(fmt: str):
    """Each touched expert's weights once, x, the SiLU products written and
    read back, y; FLOPs of gate/up, down and the combine."""
    def traffic(shape: Shape) -> Traffic:
        r, h, i, k = shape["rows"], shape["hidden"], shape["inter"], shape["top_k"]
        w = int(_expected_experts(shape) * (formats.weight_bytes(fmt, 2 * i, h) + formats.weight_bytes(fmt, h, i)))
        return Traffic(bytes_read=w + 2 * r * h + 8 * r * k + 4 * r * k * i, bytes_written=4 * r * k * i + 4 * r * h,
                       flops=2 * r * k * 3 * i * h + 4 * r * k * i + 2 * r * k * h)
    return traffic


def decode_shapes(preset: str, model, smoke_rows=(3,)) -> list[Shape]:
    if preset == "smoke":
        # 40 and 24: partial 16-output blocks and a partial 64-input K step
        return [_shape(dict(rows=r, hidden=40, inter=24, experts=8, top_k=2)) for r in smoke_rows]
    check_preset(preset)
    dims, decode, _ = _sizes(model)
    return [_shape(dict(rows=r, **dims)) for r in decode]


# The reference reads the variant's own weights exactly (FP8 codes and
# block scales; int4 words and group scales): only float32 sums differ.
FFN_TOLERANCE = Tolerance(rel=1e-4, abs_of_max=1e-4)


def _ffn_outputs(shape: Shape) -> dict:
    return {"y": ((shape["rows"], shape["hidden"]), "float32")}


FP8_GROUPED = declared_path(
    MOE_DECODE_FP8_GROUPED, "moe", _variants({
        "grouped": dict(summary="routing sort, then gate/up and down expert by expert for all its rows, combine",
                        build=fp8_grouped.build, launches=5),
        "per_row": dict(summary="gate/up per (row, expert), down per row summing its experts",
                        build=fp8_per_row.build, launches=2),
    }),
    shapes=decode_shapes, make_inputs=_ffn_inputs("fp8"), outputs=_ffn_outputs,
    reference=_ffn_reference("fp8"), traffic=_ffn_traffic("fp8"), tolerance=FFN_TOLERANCE,
    notes="memory-bound: the routed experts' FP8 weights; grouping reads an expert shared by rows once",
    extra={"model_sections": ("moe",)},
)

MULTI_SEQ = declared_path(
    MOE_DECODE_MULTI_SEQ, "moe", _variants({
        "token_major": dict(summary="gate/up and down for every token of the batch in one launch each",
                            build=token_major.build, launches=2),
        "per_token": dict(summary="gate/up and down launched once per token", build=per_token.build,
                          launches=lambda s: 2 * s["rows"]),
    }),
    shapes=decode_shapes, make_inputs=_ffn_inputs("int4"), outputs=_ffn_outputs,
    reference=_ffn_reference("int4"), traffic=_ffn_traffic("int4"), tolerance=FFN_TOLERANCE,
    notes="the same kernels either way: the per-token path pays a launch pair per token",
    extra={"model_sections": ("moe",)},
)


def via_prefill_shapes(preset: str, model) -> list[Shape]:
    """One row, on a DFlash capture layer and on another layer
    (``capture_layer`` in the shape, so the record says which)."""
    check_preset(preset)
    if preset == "smoke":
        dims = dict(hidden=40, inter=24, experts=8, top_k=2)
    else:
        dims = _sizes(model)[0]
    return [_shape(dict(rows=1, capture_layer=cap, **dims), "capture layer " if cap else "other layer ")
            for cap in (1, 0)]


VIA_PREFILL = declared_path(
    MOE_DECODE_VIA_PREFILL, "moe", _variants({
        "decode": dict(summary="the decode kernels: gate/up per routed expert, down summing them",
                       build=via_decode.build, launches=2),
        "prefill": dict(summary="the prefill path with one row: routing sort, grouped gate/up and down, combine",
                        build=via_prefill.build, launches=5),
    }),
    shapes=via_prefill_shapes, make_inputs=_ffn_inputs("int4"), outputs=_ffn_outputs,
    reference=_ffn_reference("int4"), traffic=_ffn_traffic("int4"), tolerance=FFN_TOLERANCE,
    notes="a diagnostic: the prefill path's sort and extra launches cost a single row",
    extra={"model_sections": ("moe",)},
)


# ── moe.union_stats ─────────────────────────────────────────────────────────


def union_shapes(preset: str, model) -> list[Shape]:
    if preset == "smoke":
        return [_shape(dict(rows=5, experts=8, top_k=2))]
    check_preset(preset)
    dims, decode, prefill = _sizes(model)
    return [_shape(dict(rows=r, experts=dims["experts"], top_k=dims["top_k"]))
            for r in (*decode, *prefill)]


def union_inputs(shape: Shape, rng: np.random.Generator) -> dict:
    """Router logits (FP32), spread about 2."""
    return {"logits": (rng.standard_normal((shape["rows"], shape["experts"])) * 2).astype(np.float32)}


def union_outputs(shape: Shape) -> dict:
    out = _topk_outputs(shape)
    if shape.get("stats", 0):
        out.update(union=((1,), "int32"), expert_rows=((shape["experts"],), "int32"))
    return out


def union_reference(shape: Shape, inputs: dict) -> dict:
    logits = np.asarray(inputs["logits"], np.float64)
    p = np.exp(logits - logits.max(axis=1, keepdims=True))
    ids = np.argsort(-p, axis=1, kind="stable")[:, :shape["top_k"]]
    w = np.take_along_axis(p, ids, axis=1)
    out = {"ids": ids, "weights": w / w.sum(axis=1, keepdims=True)}
    if shape.get("stats", 0):
        n, rows = naive.naive_union(ids, shape["experts"])
        out.update(union=np.array([n]), expert_rows=rows)
    return out


def union_align(shape: Shape, inputs: dict, got: dict, ref: dict):
    got = dict(got)
    for name in ("union", "expert_rows"):  # never written: the poison is all ones, -1
        if name in got:
            got[name] = np.where(got[name] == -1, np.nan, got[name].astype(np.float64))
    return routing.align(inputs["logits"], shape["top_k"], got, ref)


def union_bind(levers: Mapping[str, Any], shape: Shape, engine: str) -> Shape:
    return Shape(shape.label, {**shape.dims, "stats": int(bool(levers.get("moe_union_stats")))})


def union_traffic(shape: Shape) -> Traffic:
    r, e, k = shape["rows"], shape["experts"], shape["top_k"]
    stats = shape.get("stats", 0)
    return Traffic(bytes_read=4 * r * e + (4 * r * k if stats else 0),
                   bytes_written=8 * r * k + (4 * e + 4 if stats else 0), flops=4 * r * e)


# Counts are integers: a miscount of one is over the bound (1e-4 of the
# largest count); the weights are float32 softmaxes of the same logits.
UNION_TOLERANCE = Tolerance(rel=1e-5, abs_of_max=1e-4)

UNION = declared_path(
    MOE_UNION_STATS, "moe", _variants({
        "off": dict(summary="the top-k kernel alone", build=union_off.build, launches=1),
        "on": dict(summary="the top-k kernel, then the union count (shared-memory atomics, one block)",
                   build=union_on.build, launches=2),
    }),
    shapes=union_shapes, make_inputs=union_inputs, outputs=union_outputs, reference=union_reference,
    traffic=union_traffic, tolerance=UNION_TOLERANCE, bind=union_bind,
    notes="the counting kernel's cost is the diagnostic's: on against off at the same shape",
    extra={"align": union_align, "model_sections": ("moe",)},
)

PATHS = (ROUTER, GATEUP, DOWN, FP8_GROUPED, MULTI_SEQ, VIA_PREFILL, UNION)

for _declared in PATHS:
    check_declaration(_declared)

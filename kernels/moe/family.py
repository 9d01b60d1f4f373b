"""What the MoE decode-side paths share: the model's MoE sizes (a recipe's
``[model]`` and ``[model.moe]`` with ``[model.bench]``'s ``decode_batches``
and ``prefill_tokens``; Qwen3-Next-80B-A3B's where absent), drawn routing
(k distinct experts a row, softmax weights of normal logits, so each path
measures its own kernels), the expert stages' shapes and tolerances, and
the whole routed FFN's inputs, reference and traffic."""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

import numpy as np

from ..common import bits
from ..common.path import Shape, Tolerance, Traffic, Variant, check_preset
from . import file_weights as fw
from . import formats, naive

DEFAULT_MODEL: Mapping[str, Any] = {
    "name": "Qwen3-Next-80B-A3B",
    "hidden": 2048,
    "moe": {"experts": 512, "top_k": 10, "expert_intermediate": 512},
    "bench": {"decode_batches": [1, 8, 32], "prefill_tokens": [1024, 4096]},
}


def sizes(model: Mapping[str, Any] | None) -> tuple[dict, list[int], list[int]]:
    """(dims of one MoE layer, decode batches, prefill token counts)."""
    model = model or {}
    moe = model.get("moe") or {}
    if not (model.get("hidden") and moe.get("experts") and moe.get("top_k") and moe.get("expert_intermediate")):
        model, moe = DEFAULT_MODEL, DEFAULT_MODEL["moe"]
    bench = model.get("bench") or {}
    dims = dict(
        hidden=int(model["hidden"]),
        experts=int(moe["experts"]),
        top_k=int(moe["top_k"]),
        inter=int(moe["expert_intermediate"]),
    )
    decode = [int(b) for b in bench.get("decode_batches") or DEFAULT_MODEL["bench"]["decode_batches"]]
    prefill = [int(t) for t in bench.get("prefill_tokens") or DEFAULT_MODEL["bench"]["prefill_tokens"]]
    return dims, decode, prefill


def label(d: Mapping[str, int], extra: str = "") -> str:
    hidden = f" h{d['hidden']}" if "hidden" in d else ""
    inter = f" i{d['inter']}" if "inter" in d else ""
    return f"{extra}rows{d['rows']}{hidden}{inter} e{d['experts']} k{d['top_k']}"


def shape_of(d: dict, extra: str = "") -> Shape:
    return Shape(label(d, extra), d)


def random_routing(rng: np.random.Generator, rows: int, experts: int, k: int):
    """k distinct experts a row, and softmax weights of normal logits."""
    ids = np.argsort(rng.random((rows, experts), dtype=np.float32), axis=1)[:, :k].astype(np.int32)
    z = np.exp(rng.standard_normal((rows, k)))
    return ids, (z / z.sum(axis=1, keepdims=True)).astype(np.float32)


def random_x(rng: np.random.Generator, rows: int, hidden: int) -> np.ndarray:
    """fp16 activations that bf16 holds exactly too."""
    a = rng.standard_normal((rows, hidden), dtype=np.float32)
    return bits.bf16_to_f32_np(bits.f32_to_bf16_np(a)).astype(np.float16)


def touched(ids: np.ndarray) -> list[int]:
    return [int(e) for e in np.unique(ids)]


def expected_experts(shape: Shape) -> float:
    """Experts a batch of ``rows`` uniformly routed rows touches, on average."""
    e, k, r = shape["experts"], shape["top_k"], shape["rows"]
    return e * (1.0 - (1.0 - k / e) ** r)


def topk_outputs(shape: Shape) -> dict:
    rk = (shape["rows"], shape["top_k"])
    return {"ids": (rk, "int32"), "weights": (rk, "float32")}


def variants(specs: Mapping[str, dict]) -> dict[str, Variant]:
    return {v: Variant(v, **kw) for v, kw in specs.items()}


def stage_shapes(preset: str, model) -> list[Shape]:
    if preset == "smoke":
        # NVFP4 needs K a multiple of 16; 48 and 32 are not multiples of the
        # kernels' K step of 64, nor of the 128-input int4 group.
        base = dict(hidden=48, inter=32, experts=8, top_k=2)
        return [
            shape_of(dict(rows=3, prefill=0, **base), "decode "),
            shape_of(dict(rows=5, prefill=1, **base), "prefill "),
        ]
    check_preset(preset)
    dims, decode, prefill = sizes(model)
    return [shape_of(dict(rows=r, prefill=0, **dims), "decode ") for r in decode] + [
        shape_of(dict(rows=r, prefill=1, **dims), "prefill ") for r in prefill
    ]


# The memory trace's blocks a launch: each projection's row length is the
# other's row count, so no shape keeps both with few rows; as
# ``w4a16.ffn_decode``'s, the trace keeps both and runs this many blocks of
# each launch, spread over its grid, scaling their counts to the whole grid.
PROFILE_BLOCKS = 16


def profile_shape(shape: Shape) -> Shape:
    """The memory trace's shape: the model's expert rows (``hidden`` and
    ``inter``, their lengths and strides), one row routed to one of two
    experts."""
    d = {**shape.dims, "rows": 1, "top_k": 1, "experts": 2}
    if "prefill" in d:
        d["prefill"] = 0
    return shape_of(d, "profile ")


def stage_launches(shape: Shape) -> int:
    return 3 if shape["prefill"] else 1


def down_launches(shape: Shape) -> int:
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


# ── the whole routed FFN: FP8 grouped decode, multi-sequence, via prefill ──


def ffn_inputs(fmt: str):
    def make(shape: Shape, rng: np.random.Generator) -> dict:
        hidden, inter, experts = shape["hidden"], shape["inter"], shape["experts"]

        def draw(hit):
            wgu = formats.draw_int4(rng, experts, 2 * inter, hidden, hit)
            wd = formats.draw_int4(rng, experts, hidden, inter, hit)
            if fmt == "fp8":
                wgu, wd = formats.fp8_from(wgu, hit), formats.fp8_from(wd, hit)
            return wgu, wd

        return _ffn_inputs(fmt, shape, rng, draw)

    return make


def _ffn_inputs(fmt: str, shape: Shape, rng: np.random.Generator, weights) -> dict:
    """Routing, ``weights(touched experts) -> (gate/up, down)`` in ``fmt``, x."""
    rows, hidden, experts, k = shape["rows"], shape["hidden"], shape["experts"], shape["top_k"]
    ids, rw = random_routing(rng, rows, experts, k)
    wgu, wd = weights(touched(ids))
    out = {"x": random_x(rng, rows, hidden), "ids": ids, "rw": rw}
    formats.put(out, f"wgu_{fmt}", wgu)
    formats.put(out, f"wd_{fmt}", wd)
    return out


def ffn_reference(fmt: str):
    dec = formats.DECODE[fmt]

    def reference(shape: Shape, inputs: dict) -> dict:
        wgu, wd = formats.get(inputs, f"wgu_{fmt}"), formats.get(inputs, f"wd_{fmt}")
        return {
            "y": naive.naive_moe(inputs["x"], inputs["ids"], inputs["rw"], lambda e: dec(wgu, e), lambda e: dec(wd, e))
        }

    return reference


def ffn_traffic(fmt: str, tc: bool = False):
    """Each touched expert's weights once, x, the SiLU products written and
    read back, y; FLOPs of gate/up, down and the combine (``tc``: the two
    GEMMs' on the tensor cores, ``tc_flops``)."""

    def traffic(shape: Shape) -> Traffic:
        r, h, i, k = shape["rows"], shape["hidden"], shape["inter"], shape["top_k"]
        w = int(expected_experts(shape) * (formats.weight_bytes(fmt, 2 * i, h) + formats.weight_bytes(fmt, h, i)))
        mm = 2 * r * k * 3 * i * h
        return Traffic(
            bytes_read=w + 2 * r * h + 8 * r * k + 4 * r * k * i,
            bytes_written=4 * r * k * i + 4 * r * h,
            flops=mm + 4 * r * k * i + 2 * r * k * h,
            tc_flops=mm if tc else None,
        )

    return traffic


# ── on a model file's experts (``WeightUse``; ``file_weights``) ──

# What each format's kernels need of K (a kernel chunk is 8 inputs; an NVFP4
# block scale covers 16).
K_MULTIPLE = {"int4": 8, "fp8": 8, "nvfp4": bits.NVFP4_BLOCK}


def file_shapes(shapes, tag: str, hidden: int, inter: int, experts: int):
    """``shapes`` (the path's own: rows, stage, layer kind) with the file's
    sizes and expert count, ``top_k`` the path's capped at the experts,
    labelled with ``tag``."""

    def on_file(preset: str, model) -> list[Shape]:
        out = []
        for s in shapes(preset, model):
            prefix = s.label[: len(s.label) - len(label(s.dims))]
            d = {**s.dims, "hidden": hidden, "inter": inter, "experts": experts}
            d["top_k"] = fw.top_k(s["top_k"], experts)
            out.append(Shape(f"{tag} {prefix}{label(d)}", d))
        return out

    return on_file


def ffn_on_weights(fmt: str):
    """``apply`` of a whole routed FFN path in ``fmt`` (int4 or fp8): a
    layer's gate, up and down experts; int4 made from the decoded values,
    FP8 as stored where the file holds it in 128 x 128 blocks (else
    encoded from the decoded values)."""

    def apply(path, tensors):
        up, down = fw.routed(tensors, path.name, True, K_MULTIPLE[fmt], f"{fmt} expert weights")
        stored = {"int4": fw.never, "fp8": fw.Stack.fp8_stored}[fmt]
        tag = fw.describe([up, down], {fmt: stored})
        encode = (lambda st, hit: st.int4(hit)) if fmt == "int4" else (lambda st, hit: st.fp8(hit))

        def inputs(shape: Shape, rng: np.random.Generator) -> dict:
            return _ffn_inputs(fmt, shape, rng, lambda hit: (encode(up, hit), encode(down, hit)))

        shapes = file_shapes(path.shapes, tag, up.k, down.k, up.experts)
        return dataclasses.replace(path, shapes=shapes, make_inputs=inputs)

    return apply


# A layer's routed experts, gate and up read together.
ROUTED_FFN = (("ffn_gate_exps", "ffn_up_exps", "ffn_down_exps"),)


def decode_shapes(preset: str, model, smoke_rows=(3,)) -> list[Shape]:
    if preset == "smoke":
        # 40 and 24: partial 16-output blocks and a partial 64-input K step
        return [shape_of(dict(rows=r, hidden=40, inter=24, experts=8, top_k=2)) for r in smoke_rows]
    check_preset(preset)
    dims, decode, _ = sizes(model)
    return [shape_of(dict(rows=r, **dims)) for r in decode]


# The reference reads the variant's own weights exactly (FP8 codes and
# block scales; int4 words and group scales): only float32 sums differ.
FFN_TOLERANCE = Tolerance(rel=1e-4, abs_of_max=1e-4)
# The grouped variants run both GEMMs on fp16 tensor cores: each weight, and
# down's float32 input, rounds once to fp16 (2^-11), the expert stages' bound.
FFN_TC_TOLERANCE = STAGE_TOLERANCES["int4_tc"]


def ffn_outputs(shape: Shape) -> dict:
    return {"y": ((shape["rows"], shape["hidden"]), "float32")}

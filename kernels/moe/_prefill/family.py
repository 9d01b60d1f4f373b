"""What the MoE prefill paths share (``moe.prefill_grouped``,
``moe.prefill_sorted``, ``moe.shared_expert``): shapes, inputs, references,
traffic, tolerances and lever binding (NumPy only at import)."""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

import numpy as np

from ...common import bits
from ...common.path import Shape, Tolerance, Traffic, check_preset
from ...selection.moe import PREFILL_GROUPED
from .. import file_weights as fw
from .. import naive
from . import bounds, grouped, inputs

# Against the float64 layer on the model's (NVFP4) weights. "exact" is
# the fp16 rounding the tensor cores need, derived: a value rounded once to
# fp16 carries a relative error of at most u = 2^-11 (4.9e-4), spread
# uniformly, u / sqrt(3) = 2.8e-4 RMS. An output summing many products whose
# errors are independent has about the products' RMS relative error again
# (the error's norm and the sum's both grow as the root of the count).
# Gate/up: the weights round (the fp16 tokens enter exactly), 2.8e-4 in gate
# and in up, ~4e-4 in their SiLU-GLU product; down adds the intermediate's
# rounding and its weights' (2.8e-4 each), ~5.6e-4; the fp16 output another
# 2.8e-4: ~6.3e-4 in all, under 3e-3 with more than four times to spare
# (the simulator's smoke records: 4.2e-4 routed, 3.3e-4 for the shared
# expert's float32 output; 2.5e-4 and 4e-7 on the FP32 cores before). The
# largest element's error is a few of those RMS errors of the output's RMS,
# and the output's largest value a few RMS too: ~1e-3 of it, under 5e-3.
# E4M3 activations and weights in the down projection (3 mantissa bits
# each) cost a few percent; NVFP4 activations (1 mantissa bit, one tensor
# scale) far more, the x20 outlier channels setting the scale. A dropped
# row fails on its own (rows_lost).
TOLERANCES = {
    "exact": Tolerance(rel=3e-3, abs_of_max=5e-3),
    "fp8": Tolerance(rel=0.08, abs_of_max=0.15),
    "w4a4": Tolerance(rel=0.45, abs_of_max=0.8),
}

# What every variant runs on (each launch says so too: ``grouped.launcher``).
TC = {"tensor_cores": grouped.TENSOR_CORES, "tc_dtype": grouped.TC_DTYPE}

SKEWS = ("uniform", "skewed")

# Qwen3-Next-80B-A3B's MoE: the `model` preset of the routed path when the
# recipe has no [model.moe] table.
QWEN3_NEXT = {"hidden": 2048, "experts": 512, "top_k": 10, "expert_intermediate": 512}
# NVIDIA Nemotron-3 Nano 30B-A3B (recipes/nemotron-3-nano-30b-a3b-metrale.toml):
# the sorted prefill's and the shared expert's default model.
NEMOTRON_3_NANO = {
    "hidden": 2688,
    "experts": 128,
    "top_k": 6,
    "expert_intermediate": 1856,
    "shared_intermediate": 3712,
    "latent_size": 0,
}
DEFAULT_PREFILL_TOKENS = (1024, 4096)

# Smoke: 4 experts, top-1, widths that are whole NVFP4 blocks (16) but not
# whole GEMM tiles (32 columns); 9 tokens, one more than an 8-row bound tile, so
# a one-tile bound (the estimate, a load factor of 1) drops the hot expert's
# last row under skewed routing, while a factor of 4 and the worst case keep
# it. One K stage each: the sweep runs the smoke shapes of every lever set,
# and the tests take more K (``tests/kernels/moe/``). Four experts, not
# eight: each expert with rows is a 128-thread block of the grouped GEMM,
# and the simulator's time goes by blocks (8 experts top-2 took ~25 s a
# record, 4 top-1 ~13 s).
SMOKE = {"t": 9, "h": 16, "i": 16, "e": 4, "k": 1}


def label(d: Mapping[str, Any]) -> str:
    return f"{SKEWS[d['skew']]} t{d['t']} e{d['e']} top{d['k']} h{d['h']} i{d['i']}"


def moe_dims(model: Mapping[str, Any] | None, default: Mapping[str, Any]) -> tuple[dict, tuple[int, ...]]:
    """(``h``, ``i``, ``e``, ``k`` and the extras of the recipe's MoE, the
    prefill token counts), from the recipe's ``[model]`` or ``default``."""
    model = model or {}
    moe = model.get("moe") or {}
    if not (model.get("hidden") and moe.get("experts") and moe.get("top_k") and moe.get("expert_intermediate")):
        model, moe = {"hidden": default["hidden"]}, dict(default)
    dims = {
        "h": int(model["hidden"]),
        "i": int(moe["expert_intermediate"]),
        "e": int(moe["experts"]),
        "k": int(moe["top_k"]),
        "s": int(
            moe.get("shared_intermediate")
            or moe.get("shared_expert_intermediate")
            or default.get("shared_intermediate", 0)
        ),
        "latent": int(bool(moe.get("latent_size", default.get("latent_size", 0)))),
    }
    tokens = tuple(int(t) for t in ((model.get("bench") or {}).get("prefill_tokens") or DEFAULT_PREFILL_TOKENS))
    return dims, tokens


def routed_shapes(preset: str, model, default, extra: Mapping[str, int]) -> list[Shape]:
    """Every token count at both routings."""
    check_preset(preset)
    if preset == "smoke":
        base, tokens = dict(SMOKE), (SMOKE["t"],)
    else:
        dims, tokens = moe_dims(model, default)
        base = {k: dims[k] for k in ("h", "i", "e", "k")}
    out = []
    for t in tokens:
        for skew in (0, 1):
            d = {**base, "t": int(t), "skew": skew, **extra}
            if preset == "model" and "latent" in extra:
                d["latent"] = moe_dims(model, default)[0]["latent"]
            out.append(Shape(label(d), d))
    return out


# The memory trace's shape (``profile_shape``): the model's expert rows
# (``h`` and ``i`` long, so the operands' strides and alignment are the
# model's), two experts, one choice a token and the tokens dealt evenly,
# so each expert holds one whole 64-row tile of the grouped GEMMs, as the
# model's busy experts hold many. Every launch is traced at its first and
# last blocks: a tile walks the whole K (seconds of the simulator's time
# per 1024 of it), and the walking schedule's grid (a tile a block) ends
# in blocks that find no tile, so the two together average its blocks.
PROFILE_TOKENS = 128
PROFILE_EXPERTS = 2
PROFILE_BLOCKS = 2


def profile_shape(shape: Shape) -> Shape:
    """The trace's shape for routed model ``shape`` (:data:`PROFILE_TOKENS`
    tokens, uniform, top-1 of :data:`PROFILE_EXPERTS`); a tile-bounded grid's
    bound (``m_tiles``, where the levers gave one) is each expert's rows,
    so no block of it is empty and no row is dropped."""
    d = {**shape.dims, "t": PROFILE_TOKENS, "e": PROFILE_EXPERTS, "k": 1, "skew": 0}
    if d.get("m_tiles"):
        d["m_tiles"] = bounds.tiles(PROFILE_TOKENS // PROFILE_EXPERTS)
    return Shape("profile " + label(d), d)


def routed_inputs(shape: Shape, rng: np.random.Generator, *, gated: bool, fp8_down: bool) -> dict:
    h, i, e = shape["h"], shape["i"], shape["e"]

    def draw(_touched):
        return inputs.expert_weights(rng, e, (2 if gated else 1) * i, h), inputs.expert_weights(rng, e, h, i)

    return _routed_inputs(shape, rng, draw, fp8_down)


def _routed_inputs(shape: Shape, rng: np.random.Generator, weights, fp8_down: bool) -> dict:
    """Tokens, routing, ``weights(touched experts) -> (up, down)`` in NVFP4
    (``fp4``, ``sc``, ``ts``), and down's E4M3 rows re-encoded from them."""
    t, h, e, k = shape["t"], shape["h"], shape["e"], shape["k"]
    x = inputs.tokens_in(rng, t, h)
    ids, wts = inputs.routing(rng, t, e, k, bool(shape["skew"]))
    up, dn = weights([int(v) for v in np.unique(ids)])
    out = {
        "x": x,
        "ids": ids,
        "wts": wts,
        "up_fp4": up["fp4"],
        "up_sc": up["sc"],
        "up_ts": up["ts"],
        "dn_fp4": dn["fp4"],
        "dn_sc": dn["sc"],
        "dn_ts": dn["ts"],
    }
    if fp8_down:
        q8 = inputs.e4m3_rows(inputs.decode(dn))
        out.update(dn_q8=q8["q"], dn_s8=q8["s"])
    return out


def routed_on_weights(*, gated: bool, fp8_down: bool):
    """``apply`` of a routed prefill path on a layer's experts from a model
    file: up ``[E, I, H]`` (gate and up stacked, gate first, where
    ``gated``), down ``[E, H, I]``, in NVFP4 (the reference's format) as
    stored where the file holds NVFP4 (gate and up with one global scale
    per expert), otherwise encoded from the decoded values; the FP8 down
    route's E4M3 rows re-encoded from the NVFP4 down, as for drawn weights.
    Only the experts the routing touches are encoded; the shapes keep the
    file's expert count."""

    def apply(path, tensors):
        up, down = fw.routed(tensors, path.name, gated, bits.NVFP4_BLOCK, "NVFP4 block scales cover 16 inputs")
        arms = {"nvfp4": fw.Stack.nvfp4_stored}
        tag = fw.describe([up, down], [arms, {**arms, "fp8": fw.never}] if fp8_down else arms)

        def shapes(preset, model):
            out = []
            for s in path.shapes(preset, model):
                d = {**s.dims, "h": up.k, "i": down.k, "e": up.experts, "k": fw.top_k(s["k"], up.experts)}
                out.append(Shape(f"{tag} {label(d)}", d))
            return out

        def make(shape, rng):
            return _routed_inputs(shape, rng, lambda hit: (up.nvfp4(hit), down.nvfp4(hit)), fp8_down)

        return dataclasses.replace(path, shapes=shapes, make_inputs=make)

    return apply


def decoded(inputs_: Mapping[str, np.ndarray], which: str) -> np.ndarray:
    """The model's weights ``[E, n, k]`` (NVFP4, decoded exactly)."""
    fp4, sc, ts = inputs_[f"{which}_fp4"], inputs_[f"{which}_sc"], inputs_[f"{which}_ts"]
    return np.stack([bits.nvfp4_decode_np(fp4[e], sc[e], ts[e]) for e in range(fp4.shape[0])])


def routed_reference(inputs_: Mapping[str, np.ndarray], act: str) -> dict:
    return {
        "y": naive.naive_routed_moe(
            inputs_["x"], inputs_["ids"], inputs_["wts"], decoded(inputs_, "up"), decoded(inputs_, "dn"), act
        )
    }


def routed_traffic(shape: Shape, *, gated: bool, fp8_down: bool = False) -> Traffic:
    """The weights of every expert the batch touches (at most ``E``, at most
    one per routed row) in NVFP4 (down in E4M3 for the FP8 route), the
    tokens read and the output written in fp16, the routing, and the
    float32 scratch written once and read back; FLOPs of both GEMMs over
    every routed row."""
    t, h, i, e, k = shape["t"], shape["h"], shape["i"], shape["e"], shape["k"]
    rows = t * k
    touched = min(e, rows)
    n_up = (2 if gated else 1) * i
    nvfp4 = lambda n, kk: n * kk // 2 + n * kk // bits.NVFP4_BLOCK  # noqa: E731
    down = h * i + 4 * h if fp8_down else nvfp4(h, i)
    scratch = 4 * rows * (i + h)
    return Traffic(
        bytes_read=touched * (nvfp4(n_up, h) + down) + 2 * t * h + 8 * rows + scratch,
        bytes_written=2 * t * h + scratch,
        flops=2 * rows * (n_up * h + h * i),
    )


def rows_lost(variant: str, shape: Shape, launch) -> int:
    """Routed rows the last run's tile bound left uncomputed (``pipeline``)."""
    from . import pipeline as _pipeline

    return _pipeline.rows_lost(launch)


def bind_grouped(levers: Mapping[str, Any], shape: Shape, engine: str = "") -> Shape:
    """What the routed prefill's levers give the run: ``zero``, and, where
    the selected variant has a tile-bounded GEMM, ``m_tiles``, its bound
    (0: exact, read back from the device). Exact tiles are the tri-state
    resolved as the call site does (unset: on for NVFP4 experts; graph
    capture forces it off); without them the bound is the worst case, capped
    by the load factor. Only what reaches the run is recorded, so lever sets
    that run the same kernels on the same grid share one simulated run."""
    dims = {**shape.dims, "zero": int(bool(levers.get("moe_prefill_zero")))}
    if PREFILL_GROUPED.select(levers, shape).variant != "grouped":
        exact = levers.get("moe_prefill_exact_tiles")
        if exact is None:
            exact = bool(shape.get("nvfp4", 1))
        if shape.get("graph", 0):
            exact = False
        t, e, k = shape["t"], shape["e"], shape["k"]
        lf = int(levers.get("moe_prefill_max_load_factor") or 0)
        dims["m_tiles"] = 0 if exact else bounds.load_factor_cap(t, k, e, lf) if lf else bounds.worst_case(t)
    return Shape(shape.label, dims)


def bind_sorted(levers: Mapping[str, Any], shape: Shape, engine: str = "") -> Shape:
    """The sorted prefill's grid bound ``m_tiles`` (the worst case, or the
    estimate) and zeroing (``zero``; on unless its NO_ variable is
    present)."""
    zero = levers.get("moe_zero_intermediates")
    t, e, k = shape["t"], shape["e"], shape["k"]
    mt = bounds.estimate(t, k, e) if levers.get("moe_max_m_tiles_estimate") else bounds.worst_case(t)
    return Shape(shape.label, {**shape.dims, "m_tiles": mt, "zero": int(True if zero is None else bool(zero))})

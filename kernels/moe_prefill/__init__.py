"""MoE prefill (Metrale): the routed experts of a batch of prompt tokens,
rows sorted by expert, on grouped GEMMs; Nemotron's sorted prefill; and
its shared expert.

======================  =========================================================================
path / variant          what runs
======================  =========================================================================
moe.prefill_grouped     SiLU-GLU experts (Qwen3-Next), NVFP4 weights
  grouped               gate/up and down on the single-launch grouped GEMM (every row computed)
  grouped+fp8_down      down on the FP8 grouped GEMM (E4M3 activations per row, E4M3 weights)
  grouped+bounded_down  down on the tile-bounded grouped GEMM
  bounded+fp8_down      gate/up tile-bounded, down FP8 (tile-bounded)
  bounded               both tile-bounded: the engine's route without the levers
moe.prefill_sorted      squared-ReLU experts (Nemotron-3 Nano), both GEMMs tile-bounded
  a16 / w4a4_up         the up projection on fp16 activations / on NVFP4 ones
moe.shared_expert       one squared-ReLU expert on every token
  a16, w4a4_up,         W4A4 (activations to NVFP4 per GEMM) for neither, the up, the down,
  w4a4_down, w4a4       or both projections
======================  =========================================================================

Every GEMM here is ``_grouped``'s, on tensor cores: warp MMA
``mma.sync`` m16n8k16 with fp16 inputs and f32 accumulators (the records
say ``tensor_cores: "mma.sync"``, ``tc_dtype: "f16"``); the weights, and
E4M3 or NVFP4 activations, are decoded to float32 and rounded once to fp16
as they enter the MMA. What the levers trade is the grid: a
*tile-bounded* GEMM is sized on the host by a per-expert tile bound
(``bounds``), and rows of an expert past it are never computed. The
shapes come in two routings (``uniform``, ``skewed``: one expert is every
token's first choice), and the label says which, so a sweep shows the lever
sets that are right only under uniform load. A record's ``rows_lost`` is
the routed rows the run's bound dropped, read from the device's counts;
any is a FAIL. The scratch the GEMMs write (``launch.workspace``) is filled
with NaN by the bench before the run: a dropped row reaches the output as
NaN unless the levers zero the scratch first, and then as zeros.

The reference is the float64 layer with the NVFP4 weights decoded
exactly (``naive``), so each record's error is what its arithmetic costs.
"""
from __future__ import annotations

import numpy as np

from ..common import bits
from ..common.path import Shape, Tolerance, Traffic, Variant, declared_path, check_preset
from ..selection import MOE_PREFILL_GROUPED, MOE_PREFILL_SORTED, MOE_SHARED_EXPERT, check_declaration
from . import (_grouped, bounded, bounded_fp8_down, bounds, grouped, grouped_bounded_down, grouped_fp8_down, inputs,
               naive, shared_a16, shared_w4a4, shared_w4a4_down, shared_w4a4_up, sorted_a16, sorted_w4a4_up, spec)

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

# What every variant runs on (each launch says so too: ``_grouped.launcher``).
TC = {"tensor_cores": _grouped.TENSOR_CORES, "tc_dtype": _grouped.TC_DTYPE}


def _routed_variant(name, mod, summary, tol, fp8_down=False):
    return Variant(name, summary, mod.build, tolerance=TOLERANCES[tol], launches=mod.launches,
                   traffic=lambda s: spec.routed_traffic(s, gated=True, fp8_down=fp8_down), **TC)


GROUPED_VARIANTS = {
    "grouped": _routed_variant("grouped", grouped, "single-launch grouped NVFP4 GEMMs over the exact tile list "
                               "(gate/up with SiLU-GLU, then down)", "exact"),
    "grouped+fp8_down": _routed_variant("grouped+fp8_down", grouped_fp8_down,
                                        "gate/up single-launch grouped; down E4M3 x E4M3 on the tile-bounded grid",
                                        "fp8", fp8_down=True),
    "grouped+bounded_down": _routed_variant("grouped+bounded_down", grouped_bounded_down,
                                            "gate/up single-launch grouped; down on the tile-bounded grid", "exact"),
    "bounded+fp8_down": _routed_variant("bounded+fp8_down", bounded_fp8_down,
                                        "gate/up on the tile-bounded grid; down E4M3 x E4M3, tile-bounded", "fp8",
                                        fp8_down=True),
    "bounded": _routed_variant("bounded", bounded, "gate/up and down on the tile-bounded grid (E x max_m_tiles "
                               "tile rows)", "exact"),
}


def _grouped_shapes(preset, model):
    return spec.routed_shapes(preset, model, spec.QWEN3_NEXT, {"nvfp4": 1, "graph": 0, "fp8_loaded": 1})


PREFILL_GROUPED = declared_path(
    MOE_PREFILL_GROUPED, "moe_prefill", GROUPED_VARIANTS,
    shapes=_grouped_shapes,
    make_inputs=lambda s, rng: spec.routed_inputs(s, rng, gated=True, fp8_down=True),
    outputs=lambda s: {"y": ((s["t"], s["h"]), "float16")},
    reference=lambda s, x: spec.routed_reference(x, "silu_glu"),
    traffic=lambda s: spec.routed_traffic(s, gated=True),
    tolerance=TOLERANCES["exact"],
    notes="grouped GEMMs on mma.sync (fp16 in, f32 accumulators); the levers size the grid, and a bound below "
          "the routing's load drops rows",
    extra={"rows_lost": spec.rows_lost, "model_sections": ("moe",)},
    bind=spec.bind_grouped,
)


def _sorted_shapes(preset, model):
    return spec.routed_shapes(preset, model, spec.NEMOTRON_3_NANO, {"latent": 0})


SORTED_VARIANTS = {
    "a16": Variant("a16", "squared-ReLU experts, NVFP4 weights, fp16 activations, tile-bounded grouped GEMMs",
                   sorted_a16.build, tolerance=TOLERANCES["exact"], launches=sorted_a16.launches,
                   traffic=lambda s: spec.routed_traffic(s, gated=False), **TC),
    "w4a4_up": Variant("w4a4_up", "as a16, the up projection's activations quantised to NVFP4 first",
                       sorted_w4a4_up.build, tolerance=TOLERANCES["w4a4"], launches=sorted_w4a4_up.launches,
                       traffic=lambda s: spec.routed_traffic(s, gated=False), **TC),
}

PREFILL_SORTED = declared_path(
    MOE_PREFILL_SORTED, "moe_prefill", SORTED_VARIANTS,
    shapes=_sorted_shapes,
    make_inputs=lambda s, rng: spec.routed_inputs(s, rng, gated=False, fp8_down=False),
    outputs=lambda s: {"y": ((s["t"], s["h"]), "float16")},
    reference=lambda s, x: spec.routed_reference(x, "relu2"),
    traffic=lambda s: spec.routed_traffic(s, gated=False),
    tolerance=TOLERANCES["exact"],
    notes="grouped GEMMs on mma.sync (fp16 in, f32 accumulators) on a grid sized by the worst case or the estimate",
    # Nemotron's hybrid (Mamba-2 + MoE) models: a recipe whose model has MoE
    # layers but no Mamba-2 ones (Qwen3-Next, DeepSeek-V3) has no sorted prefill.
    extra={"rows_lost": spec.rows_lost, "model_sections": ("mamba2",)},
    bind=spec.bind_sorted,
)

# ── the shared expert ──────────────────────────────────────────────────────

SHARED_SMOKE = {"t": 9, "h": 48, "s": 16}


def shared_shapes(preset, model):
    check_preset(preset)
    if preset == "smoke":
        dims, tokens = {"h": SHARED_SMOKE["h"], "s": SHARED_SMOKE["s"]}, (SHARED_SMOKE["t"],)
    else:
        dims, tokens = spec.moe_dims(model, spec.NEMOTRON_3_NANO)
    return [Shape(f"t{t} h{dims['h']} s{dims['s']}", {"t": t, "h": dims["h"], "s": dims["s"], "fp8_shared_up": 0})
            for t in tokens]


def shared_inputs(shape, rng):
    t, h, s = shape["t"], shape["h"], shape["s"]
    up = inputs.expert_weights(rng, 1, s, h)
    dn = inputs.expert_weights(rng, 1, h, s)
    return {"x": inputs.tokens_in(rng, t, h), "off": np.array([0, t], np.int32),
            "tile_off": np.array([0, bounds.tiles(t)], np.int32),
            "up_fp4": up["fp4"], "up_sc": up["sc"], "up_ts": up["ts"],
            "dn_fp4": dn["fp4"], "dn_sc": dn["sc"], "dn_ts": dn["ts"]}


def shared_reference(shape, x):
    return {"y": naive.naive_shared_expert(x["x"], spec.decoded(x, "up")[0], spec.decoded(x, "dn")[0])}


def shared_traffic(shape) -> Traffic:
    t, h, s = shape["t"], shape["h"], shape["s"]
    w = 2 * (s * h // 2 + s * h // bits.NVFP4_BLOCK)
    return Traffic(bytes_read=w + 2 * t * h + 4 * t * s, bytes_written=4 * t * h + 4 * t * s, flops=4 * t * s * h)


def _shared_variant(name, mod, summary):
    tol = "w4a4" if (mod.W4A4_UP or mod.W4A4_DOWN) else "exact"
    return Variant(name, summary, mod.build, tolerance=TOLERANCES[tol], launches=mod.launches, **TC)


SHARED_VARIANTS = {
    "a16": _shared_variant("a16", shared_a16, "NVFP4 weights, fp16 / float32 activations (fp16 into mma.sync)"),
    "w4a4_up": _shared_variant("w4a4_up", shared_w4a4_up, "the up projection's activations to NVFP4 first"),
    "w4a4_down": _shared_variant("w4a4_down", shared_w4a4_down, "the down projection's activations to NVFP4 first"),
    "w4a4": _shared_variant("w4a4", shared_w4a4, "both projections' activations to NVFP4 first"),
}

SHARED_EXPERT = declared_path(
    MOE_SHARED_EXPERT, "moe_prefill", SHARED_VARIANTS,
    shapes=shared_shapes,
    make_inputs=shared_inputs,
    outputs=lambda s: {"y": ((s["t"], s["h"]), "float32")},
    reference=shared_reference,
    traffic=shared_traffic,
    tolerance=TOLERANCES["exact"],
    notes="GEMMs on mma.sync (fp16 in, f32 accumulators); W4A4 trades activation precision for a quarter of the "
          "activation bytes",
    extra={"model_sections": ("mamba2",)},
)

PATHS = (PREFILL_GROUPED, PREFILL_SORTED, SHARED_EXPERT)

for _declared in PATHS:
    check_declaration(_declared)

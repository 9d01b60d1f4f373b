"""``moe.prefill_grouped`` (Metrale): the routed experts of a prompt (SiLU-GLU,
Qwen3-Next), rows sorted by expert, on the single-launch grouped NVFP4 GEMMs
or the tile-bounded ones, down optionally in FP8. A variant is the route of
each GEMM through the shared pipeline (``moe._prefill.pipeline``)."""

from __future__ import annotations

from ...common.model_weights import WeightUse
from ...common.path import Variant, declared_path
from ...selection.moe import PREFILL_GROUPED as TABLE
from .._prefill import family as F
from .._prefill import pipeline

# variant: (gate/up route, down route, tolerance, what runs)
ROUTES = {
    "grouped": (
        "grouped",
        "grouped",
        "exact",
        "single-launch grouped NVFP4 GEMMs over the exact tile list (gate/up with SiLU-GLU, then down)",
    ),
    "grouped+fp8_down": (
        "grouped",
        "fp8",
        "fp8",
        "gate/up single-launch grouped; down E4M3 x E4M3 on the tile-bounded grid",
    ),
    "grouped+bounded_down": (
        "grouped",
        "bounded",
        "exact",
        "gate/up single-launch grouped; down on the tile-bounded grid",
    ),
    "bounded+fp8_down": ("bounded", "fp8", "fp8", "gate/up on the tile-bounded grid; down E4M3 x E4M3, tile-bounded"),
    "bounded": ("bounded", "bounded", "exact", "gate/up and down on the tile-bounded grid (E x max_m_tiles tile rows)"),
}


def _variant(name: str, up: str, down: str, tol: str, summary: str) -> Variant:
    return Variant(
        name,
        summary,
        lambda s: pipeline.build(s, up, down),
        tolerance=F.TOLERANCES[tol],
        launches=lambda s: pipeline.launches(s, down),
        traffic=lambda s: F.routed_traffic(s, gated=True, fp8_down=down == "fp8"),
        **F.TC,
    )


def shapes(preset, model):
    return F.routed_shapes(preset, model, F.QWEN3_NEXT, {"nvfp4": 1, "graph": 0, "fp8_loaded": 1})


PATH = declared_path(
    TABLE,
    {name: _variant(name, *route) for name, route in ROUTES.items()},
    shapes=shapes,
    make_inputs=lambda s, rng: F.routed_inputs(s, rng, gated=True, fp8_down=True),
    outputs=lambda s: {"y": ((s["t"], s["h"]), "float16")},
    reference=lambda s, x: F.routed_reference(x, "silu_glu"),
    traffic=lambda s: F.routed_traffic(s, gated=True),
    tolerance=F.TOLERANCES["exact"],
    notes="grouped GEMMs on mma.sync (fp16 in, f32 accumulators); the levers size the grid, and a bound below "
    "the routing's load drops rows",
    extra={
        "rows_lost": F.rows_lost,
        "profile_shape": F.profile_shape,
        "profile_blocks": F.PROFILE_BLOCKS,
        "model_sections": ("moe",),
        "weights": WeightUse(
            (("ffn_gate_exps", "ffn_up_exps", "ffn_down_exps"),), F.routed_on_weights(gated=True, fp8_down=True)
        ),
    },
    bind=F.bind_grouped,
)

"""``moe.prefill_sorted`` (Metrale, Nemotron): squared-ReLU experts, up and
down on the tile-bounded grouped NVFP4 GEMMs, the up projection's
activations in fp16 or quantised to NVFP4 first (W4A4, ``moe_w4a4``); the
grid's M-tile bound and the zeroing from the levers (``bind_sorted``)."""

from __future__ import annotations

from ...common.model_weights import WeightUse
from ...common.path import Variant, declared_path
from ...selection.moe import PREFILL_SORTED as TABLE
from .._prefill import family as F
from .._prefill import grouped, pipeline


def _variant(name: str, w4a4_up: bool, tol: str, summary: str) -> Variant:
    return Variant(
        name,
        summary,
        lambda s: pipeline.build(s, "bounded", "bounded", act=grouped.RELU2, w4a4_up=w4a4_up),
        tolerance=F.TOLERANCES[tol],
        launches=lambda s: pipeline.launches(s, "bounded", w4a4_up),
        traffic=lambda s: F.routed_traffic(s, gated=False),
        **F.TC,
    )


def shapes(preset, model):
    return F.routed_shapes(preset, model, F.NEMOTRON_3_NANO, {"latent": 0})


PATH = declared_path(
    TABLE,
    {
        "a16": _variant(
            "a16", False, "exact", "squared-ReLU experts, NVFP4 weights, fp16 activations, tile-bounded grouped GEMMs"
        ),
        "w4a4_up": _variant(
            "w4a4_up", True, "w4a4", "as a16, the up projection's activations quantised to NVFP4 first"
        ),
    },
    shapes=shapes,
    make_inputs=lambda s, rng: F.routed_inputs(s, rng, gated=False, fp8_down=False),
    outputs=lambda s: {"y": ((s["t"], s["h"]), "float16")},
    reference=lambda s, x: F.routed_reference(x, "relu2"),
    traffic=lambda s: F.routed_traffic(s, gated=False),
    tolerance=F.TOLERANCES["exact"],
    notes="grouped GEMMs on mma.sync (fp16 in, f32 accumulators) on a grid sized by the worst case or the estimate",
    # Nemotron's hybrid (Mamba-2 + MoE) models: a recipe whose model has MoE
    # layers but no Mamba-2 ones (Qwen3-Next, DeepSeek-V3) has no sorted prefill.
    extra={
        "rows_lost": F.rows_lost,
        "profile_shape": F.profile_shape,
        "profile_blocks": F.PROFILE_BLOCKS,
        "model_sections": ("mamba2",),
        # squared-ReLU experts: up and down, no gate
        "weights": WeightUse((("ffn_up_exps", "ffn_down_exps"),), F.routed_on_weights(gated=False, fp8_down=False)),
    },
    bind=F.bind_sorted,
)

"""``moe.decode_via_prefill``: one row's routed FFN (int4) through the decode kernels or the
prefill path (expert-sorted rows) on DFlash capture layers (Metrale)."""

from __future__ import annotations

from ...common.model_weights import WeightUse
from ...common.path import Shape, check_preset, declared_path
from ...selection.moe import DECODE_VIA_PREFILL as TABLE
from .. import _builds
from .. import family as F


def via_prefill_shapes(preset: str, model) -> list[Shape]:
    """One row, on a DFlash capture layer and on another layer
    (``capture_layer`` in the shape, so the record says which)."""
    check_preset(preset)
    if preset == "smoke":
        dims = dict(hidden=40, inter=24, experts=8, top_k=2)
    else:
        dims = F.sizes(model)[0]
    return [
        F.shape_of(dict(rows=1, capture_layer=cap, **dims), "capture layer " if cap else "other layer ")
        for cap in (1, 0)
    ]


PATH = declared_path(
    TABLE,
    F.variants(
        {
            "decode": dict(
                summary="the decode kernels: gate/up per routed expert, down summing them",
                build=_builds.moe_per_row("int4"),
                launches=2,
            ),
            "prefill": dict(
                summary="the prefill path with one row: routing sort, grouped gate/up and down on mma.sync "
                "fp16, combine",
                build=_builds.moe_grouped("int4"),
                launches=5,
                tensor_cores="mma.sync",
                tc_dtype="f16",
                tolerance=F.FFN_TC_TOLERANCE,
                traffic=F.ffn_traffic("int4", tc=True),
            ),
        }
    ),
    shapes=via_prefill_shapes,
    make_inputs=F.ffn_inputs("int4"),
    outputs=F.ffn_outputs,
    reference=F.ffn_reference("int4"),
    traffic=F.ffn_traffic("int4"),
    tolerance=F.FFN_TOLERANCE,
    notes="a diagnostic: the prefill path's sort and extra launches cost a single row",
    extra={
        "model_sections": ("moe",),
        "profile_shape": F.profile_shape,
        "profile_blocks": F.PROFILE_BLOCKS,
        "weights": WeightUse(F.ROUTED_FFN, F.ffn_on_weights("int4")),
    },
)

"""``moe.decode_multi_seq``: the routed FFN (int4) of a multi-sequence decode, token-major
launches vs the legacy per-token path (Metrale)."""

from __future__ import annotations

from ...common.model_weights import WeightUse
from ...common.path import declared_path
from ...selection.moe import DECODE_MULTI_SEQ as TABLE
from .. import _builds
from .. import family as F

PATH = declared_path(
    TABLE,
    F.variants(
        {
            "token_major": dict(
                summary="gate/up and down for every token of the batch in one launch each",
                build=_builds.moe_per_row("int4"),
                launches=2,
            ),
            "per_token": dict(
                summary="gate/up and down launched once per token",
                build=_builds.moe_per_row("int4", per_token=True),
                launches=lambda s: 2 * s["rows"],
            ),
        }
    ),
    shapes=F.decode_shapes,
    make_inputs=F.ffn_inputs("int4"),
    outputs=F.ffn_outputs,
    reference=F.ffn_reference("int4"),
    traffic=F.ffn_traffic("int4"),
    tolerance=F.FFN_TOLERANCE,
    notes="the same kernels either way: the per-token path pays a launch pair per token",
    extra={
        "model_sections": ("moe",),
        "profile_shape": F.profile_shape,
        "profile_blocks": F.PROFILE_BLOCKS,
        "weights": WeightUse(F.ROUTED_FFN, F.ffn_on_weights("int4")),
    },
)

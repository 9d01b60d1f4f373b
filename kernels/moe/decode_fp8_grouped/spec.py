"""``moe.decode_fp8_grouped``: the routed FFN of a multi-row decode with FP8 weights (128 x 128
block scales), cross-row grouped kernels vs per-row kernels (Metrale)."""

from __future__ import annotations

from ...common.model_weights import WeightUse
from ...common.path import declared_path
from ...selection.moe import DECODE_FP8_GROUPED as TABLE
from .. import _builds
from .. import family as F

PATH = declared_path(
    TABLE,
    F.variants(
        {
            "grouped": dict(
                summary="routing sort, then gate/up and down expert by expert for all its rows on mma.sync "
                "fp16, combine",
                build=_builds.moe_grouped("fp8"),
                launches=5,
                tensor_cores="mma.sync",
                tc_dtype="f16",
                tolerance=F.FFN_TC_TOLERANCE,
                traffic=F.ffn_traffic("fp8", tc=True),
            ),
            "per_row": dict(
                summary="gate/up per (row, expert), down per row summing its experts",
                build=_builds.moe_per_row("fp8"),
                launches=2,
            ),
        }
    ),
    shapes=F.decode_shapes,
    make_inputs=F.ffn_inputs("fp8"),
    outputs=F.ffn_outputs,
    reference=F.ffn_reference("fp8"),
    traffic=F.ffn_traffic("fp8"),
    tolerance=F.FFN_TOLERANCE,
    notes="memory-bound: the routed experts' FP8 weights; grouping reads an expert shared by rows once",
    extra={
        "model_sections": ("moe",),
        "profile_shape": F.profile_shape,
        "profile_blocks": F.PROFILE_BLOCKS,
        "weights": WeightUse(F.ROUTED_FFN, F.ffn_on_weights("fp8")),
    },
)

"""``lora.proj`` (Atlas): the adapter applied per forward, or merged into
the weights at load (``lora_eager``)."""

from __future__ import annotations

from ...common.path import Variant
from ...selection.lora import PROJ as TABLE
from .. import family
from . import merged, per_forward

PER_FORWARD = Variant(
    "per_forward",
    "x A^T into an fp32 [m, r] buffer, then the fp16 base projection with s t B^T fused in (FP32 cores); swap: pointer",
    per_forward.build,
    traffic=family.traffic_per_forward,
    launches=2,
)

PATH = family.declare(
    TABLE,
    {
        "per_forward": PER_FORWARD,
        "merged": Variant(
            "merged",
            "the fp16 base projection on W' = W + s B A, merged once at load (FP32 cores); "
            "swap: re-merge from the base weights",
            merged.build,
            traffic=family.traffic_merged,
        ),
    },
)

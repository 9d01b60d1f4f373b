"""MoE variant: FP8 routed FFN, rows sharing an expert processed together (cross-row grouped kernels) (kernels in ``_experts``, ``_router``, ``_union``; build in ``_builds``)."""
from __future__ import annotations

from ._builds import moe_grouped

build = moe_grouped("fp8")

"""MoE variant: FP8 routed FFN through the per-row decode kernels (kernels in ``_experts``, ``_router``, ``_union``; build in ``_builds``)."""
from __future__ import annotations

from ._builds import moe_per_row

build = moe_per_row("fp8")

"""MoE variant: one row's routed FFN through the decode kernels (kernels in ``_experts``, ``_router``, ``_union``; build in ``_builds``)."""
from __future__ import annotations

from ._builds import moe_per_row

build = moe_per_row("int4")

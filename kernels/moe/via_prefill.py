"""MoE variant: one row's routed FFN through the prefill path (routing sort, grouped experts, combine) (kernels in ``_experts``, ``_router``, ``_union``; build in ``_builds``)."""
from __future__ import annotations

from ._builds import moe_grouped

build = moe_grouped("int4")

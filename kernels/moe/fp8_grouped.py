"""MoE variant: FP8 routed FFN, rows sharing an expert processed together (cross-
row grouped kernels). The kernels are ``_experts``', ``_router``'s and
``_union``'s; the build is ``_builds``'."""
from __future__ import annotations

from ._builds import moe_grouped

build = moe_grouped("fp8")

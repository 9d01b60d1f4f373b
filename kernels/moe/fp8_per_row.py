"""MoE variant: FP8 routed FFN through the per-row decode kernels. The kernels
are ``_experts``', ``_router``'s and ``_union``'s; the build is ``_builds``'."""
from __future__ import annotations

from ._builds import moe_per_row

build = moe_per_row("fp8")

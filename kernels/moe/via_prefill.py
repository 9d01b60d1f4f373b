"""MoE variant: one row's routed FFN through the prefill path (routing sort,
grouped experts, combine). The kernels are ``_experts``', ``_router``'s and
``_union``'s; the build is ``_builds``'."""
from __future__ import annotations

from ._builds import moe_grouped

build = moe_grouped("int4")

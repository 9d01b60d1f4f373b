"""MoE variant: int4 routed FFN launched once per token (the legacy per-token
path). The kernels are ``_experts``', ``_router``'s and ``_union``'s; the
build is ``_builds``'."""
from __future__ import annotations

from ._builds import moe_per_row

build = moe_per_row("int4", per_token=True)

"""MoE variant: down projection and combine with W4A16 int4 expert weights (kernels in ``_experts``, ``_router``, ``_union``; build in ``_builds``)."""
from __future__ import annotations

from ._builds import down

build = down("int4")

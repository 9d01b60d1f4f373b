"""MoE variant: down projection and combine with NVFP4 (holo) expert weights (kernels in ``_experts``, ``_router``, ``_union``; build in ``_builds``)."""
from __future__ import annotations

from ._builds import down

build = down("nvfp4")

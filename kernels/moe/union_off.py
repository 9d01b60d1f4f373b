"""MoE variant: top-k routing only (kernels in ``_experts``, ``_router``, ``_union``; build in ``_builds``)."""
from __future__ import annotations

from ._builds import union

build = union(False)

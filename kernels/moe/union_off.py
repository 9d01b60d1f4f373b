"""MoE variant: top-k routing only. The kernels are ``_experts``', ``_router``'s
and ``_union``'s; the build is ``_builds``'."""
from __future__ import annotations

from ._builds import union

build = union(False)

"""MoE variant: top-k routing, then the union count kernel. The kernels are
``_experts``', ``_router``'s and ``_union``'s; the build is ``_builds``'."""
from __future__ import annotations

from ._builds import union

build = union(True)

"""MoE variant: gate/up and SiLU product with W4A16 int4 expert weights. The
kernels are ``_experts``', ``_router``'s and ``_union``'s; the build is
``_builds``'."""
from __future__ import annotations

from ._builds import gateup

build = gateup("int4")

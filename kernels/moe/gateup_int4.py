"""MoE variant: gate/up and SiLU product with W4A16 int4 expert weights (kernels in ``_experts``, ``_router``, ``_union``; build in ``_builds``)."""
from __future__ import annotations

from ._builds import gateup

build = gateup("int4")

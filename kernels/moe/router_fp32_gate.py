"""MoE variant: the gate GEMM on a BF16 router input with FP32 logits
(fp32_gate). The kernels are ``_experts``', ``_router``'s and ``_union``'s;
the build is ``_builds``'."""
from __future__ import annotations

from ._builds import router

build = router("fp32_gate")

"""MoE variant: the gate GEMM on a BF16 router input with FP32 logits (fp32_gate) (kernels in ``_experts``, ``_router``, ``_union``; build in ``_builds``)."""
from __future__ import annotations

from ._builds import router

build = router("fp32_gate")

"""MoE variant: the gate GEMM on a BF16 router input, logits rounded to BF16, then softmax and top-k (kernels in ``_experts``, ``_router``, ``_union``; build in ``_builds``)."""
from __future__ import annotations

from ._builds import router

build = router("bf16")

"""MoE variant: the gate GEMM on a BF16 router input, logits rounded to BF16, then
softmax and top-k. The kernels are ``_experts``', ``_router``'s and
``_union``'s; the build is ``_builds``'."""
from __future__ import annotations

from ._builds import router

build = router("bf16")

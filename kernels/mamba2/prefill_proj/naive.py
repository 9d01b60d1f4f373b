"""The float64 reference of ``mamba2.prefill_proj``: the product with the
model's weights as the W4A16 GEMM stores them (exact in float32), so every
arm's error is what its own arithmetic adds."""

from __future__ import annotations

from ...ffn.prefill.naive import naive_gemm


def reference(shape, inputs: dict) -> dict:
    return {"c": naive_gemm(inputs["a"], inputs["w"])}

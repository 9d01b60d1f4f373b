"""Routed prefill: gate/up on the single-launch grouped NVFP4 GEMM, down on the FP8 grouped GEMM (activations to E4M3 per row).
The pipeline is ``_pipeline``'s."""
from __future__ import annotations

from . import _pipeline

UP, DOWN = "grouped", "fp8"


def build(shape):
    return _pipeline.build(shape, UP, DOWN)


def launches(shape) -> int:
    return _pipeline.launches(shape, DOWN)

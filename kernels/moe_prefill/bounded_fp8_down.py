"""Routed prefill: gate/up on the tile-bounded grouped GEMM, down on the tile-bounded FP8 grouped GEMM.
The pipeline is ``_pipeline``'s."""
from __future__ import annotations

from . import _pipeline

UP, DOWN = "bounded", "fp8"


def build(shape):
    return _pipeline.build(shape, UP, DOWN)


def launches(shape) -> int:
    return _pipeline.launches(shape, DOWN)

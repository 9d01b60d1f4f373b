"""Routed prefill: gate/up on the single-launch grouped NVFP4 GEMM, down on the tile-bounded grouped GEMM.
The pipeline is ``_pipeline``'s."""
from __future__ import annotations

from . import _pipeline

UP, DOWN = "grouped", "bounded"


def build(shape):
    return _pipeline.build(shape, UP, DOWN)


def launches(shape) -> int:
    return _pipeline.launches(shape, DOWN)

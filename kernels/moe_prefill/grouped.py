"""Routed prefill: single-launch grouped NVFP4 GEMMs for gate/up and down (moe_grouped_cutlass + moe_grouped_down).
The pipeline is ``_pipeline``'s."""
from __future__ import annotations

from . import _pipeline

UP, DOWN = "grouped", "grouped"


def build(shape):
    return _pipeline.build(shape, UP, DOWN)


def launches(shape) -> int:
    return _pipeline.launches(shape, DOWN)

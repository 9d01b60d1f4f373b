"""Routed prefill: gate/up and down on the tile-bounded grouped GEMMs (the engine's default route).
The pipeline is ``_pipeline``'s."""
from __future__ import annotations

from . import _pipeline

UP, DOWN = "bounded", "bounded"


def build(shape):
    return _pipeline.build(shape, UP, DOWN)


def launches(shape) -> int:
    return _pipeline.launches(shape, DOWN)

"""Shared expert: both projections W4A4 (``_shared``)."""
from __future__ import annotations

from . import _shared

W4A4_UP, W4A4_DOWN = True, True


def build(shape):
    return _shared.build(shape, W4A4_UP, W4A4_DOWN)


def launches(shape) -> int:
    return _shared.launches(W4A4_UP, W4A4_DOWN)

"""Shared expert: the up projection W4A4 (shared_w4a4) (``_shared``)."""
from __future__ import annotations

from . import _shared

W4A4_UP, W4A4_DOWN = True, False


def build(shape):
    return _shared.build(shape, W4A4_UP, W4A4_DOWN)


def launches(shape) -> int:
    return _shared.launches(W4A4_UP, W4A4_DOWN)

"""Nemotron sorted prefill: squared-ReLU experts, up and down on the
bounded grouped NVFP4 GEMMs with fp16 (up) and float32 (down) activations;
the grid's M-tile bound and the zeroing from the levers (``spec.bind_sorted``)."""
from __future__ import annotations

from . import _grouped as G
from . import _pipeline

W4A4_UP = False


def build(shape):
    return _pipeline.build(shape, "bounded", "bounded", act=G.RELU2, w4a4_up=W4A4_UP)


def launches(shape) -> int:
    return _pipeline.launches(shape, "bounded", W4A4_UP)

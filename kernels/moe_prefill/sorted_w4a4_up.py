"""Nemotron sorted prefill: squared-ReLU experts, up and down on the
bounded grouped NVFP4 GEMMs, the up projection's activations quantised to NVFP4 first (W4A4, ``moe_w4a4``);
the grid's M-tile bound and the zeroing from the levers (``spec.bind_sorted``)."""
from __future__ import annotations

from . import _grouped as G
from . import _pipeline

W4A4_UP = True


def build(shape):
    return _pipeline.build(shape, "bounded", "bounded", act=G.RELU2, w4a4_up=W4A4_UP)


def launches(shape) -> int:
    return _pipeline.launches(shape, "bounded", W4A4_UP)

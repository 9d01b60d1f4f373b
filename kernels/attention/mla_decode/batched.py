"""``attention.mla_decode`` variant ``batched`` (``mla_perseq_fallback``
off): one launch decodes the whole batch, a block row per sequence.
Kernel: ``_mla``."""

from __future__ import annotations

from ._mla import launcher

NAME = "batched"
SUMMARY = "one launch for the batch: a row of head-tile blocks per sequence"


def build(shape):
    return launcher(shape, per_sequence=False)

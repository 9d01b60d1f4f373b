"""``attention.mla_decode`` variant ``per_sequence`` (Metrale's
``mla_perseq_fallback``): the batch decoded one sequence at a time, one
launch each of the same kernel as ``batched`` (``_mla``), so the same bits;
what it adds is ``N`` launches of ``H / 8`` blocks each (16 at
DeepSeek-V3's 128 heads), too few to fill the GPU."""

from __future__ import annotations

from ._mla import launcher

NAME = "per_sequence"
SUMMARY = "one launch per sequence of the batched kernel: same bits, N launches"


def build(shape):
    return launcher(shape, per_sequence=True)

"""``decode.per_sequence`` variant ``per_sequence`` (Metrale's
``hc_perseq_decode`` on a model with hyper-connections, or
``mla_perseq_fallback`` on an MLA model): the whole step run once per
sequence, every launch on that sequence's batch-1 views (its rows of the
inputs and outputs, its state slot, block-table row and length), the same
kernels as ``batched`` (``_step``), so the same bits.

What it adds is ``n`` times the launches, each ``n`` times smaller: at
DeepSeek-V3's 128 heads an MLA launch of one sequence is 16 blocks, a
GDN launch of one Qwen3-Next sequence 128, a paged split launch a few
dozen; none fills an H200's 132 SMs, and each pays the host's launch cost.
"""

from __future__ import annotations

from ._step import launcher

NAME = "per_sequence"
SUMMARY = "the whole step once per sequence, each launch on that sequence's batch-1 views"


def build(shape):
    return launcher(shape, per_sequence=True)

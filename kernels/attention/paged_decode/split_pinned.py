"""``attention.paged_decode`` variant ``split_pinned``: the engines' paged
decode. One launch of the split kernel for the whole batch, one of the
merge; every sequence's split count follows from its own length and
``max_decode_seqs`` (the serve setting), so a sequence decoded alone gets
the bits it gets in any batch.

Kernels and split policy: ``_paged``. Memory-bound: each sequence's K and V
(2 x 16 KiB per 16-token block at Hkv = 2, d = 256) are read once per KV
head group, by the block that runs its ``G`` query heads together.
"""

from __future__ import annotations

from .._paged import launcher

NAME = "split_pinned"
SUMMARY = "one launch for the batch; split count from each sequence's length and max_decode_seqs"


def build(shape):
    mds = shape.get("max_decode_seqs", 1)
    return launcher(shape, lambda nseq: mds)

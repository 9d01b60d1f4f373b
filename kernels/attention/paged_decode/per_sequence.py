"""``attention.paged_decode`` variant ``per_sequence`` (Metrale's
``hc_perseq_decode``, on a model with hyper-connections): the batch decoded
one sequence at a time, a split launch and a merge launch per sequence.

Same kernels and split count as ``split_pinned`` (``_paged``), so its
output is bit for bit the batched one; what it adds is ``2 N`` launches,
each too small to fill the GPU on its own.
"""

from __future__ import annotations

from .._paged import launcher

NAME = "per_sequence"
SUMMARY = "one split and one merge launch per sequence; split count as split_pinned"


def build(shape):
    mds = shape.get("max_decode_seqs", 1)
    return launcher(shape, lambda nseq: mds, per_sequence=True)

"""``attention.paged_decode`` baseline ``split_live_batch``, which no lever
selects: the split count taken from the number of sequences in the launch
(the live batch), as some serving libraries do to fill the GPU at every
batch size.

Same kernels as ``split_pinned`` (``_paged``). A sequence decoded alone
gets more splits than in a batch, so a different merge tree and, in
general, different bits: the bench's batch invariance check reports it as
not invariant. It runs beside the selected variant for contrast.
"""

from __future__ import annotations

from .._paged import launcher

NAME = "split_live_batch"
SUMMARY = "baseline, no lever: split count from the live batch size (not batch-invariant)"


def build(shape):
    return launcher(shape, lambda nseq: nseq)

"""``gdn.prefill`` variant ``regresident`` (lever ``gdn_regresident`` on).

The state slice of each block (``dk x BV`` fp32, 16 KiB at the model shape)
is loaded into shared memory once, stays there across the whole chunk loop,
and is written back once: the state costs ``2 * Hv * dk * dv * 4`` bytes per
call whatever the sequence length. Kernel and launch: ``_prefill``; the
chunk's WY algebra and shared-memory layout: ``_chunk``.
"""

from __future__ import annotations

from .._mma_qk import TC_FORM
from .._prefill import build_prefill, make_prefill

NAME = "regresident"
TENSOR_CORES = TC_FORM  # A and P on mma.sync (``_mma_qk``)
SUMMARY = "chunked WY prefill, state slice kept in shared memory across all chunks"


def make_prefill_regresident(C: int, DK: int, DV: int):
    return make_prefill(C, DK, DV, True)


def build(shape):
    return build_prefill(shape, resident=True)

"""``attention.dflash_contig`` variant ``contig`` (``dflash_contig_attn``
on): the draft block reads K and V from one contiguous buffer per
sequence, token ``j`` at row ``j``: no block table, and each KV block's
address is known before its load. Same kernel code as ``paged``
(``_dflash``), the layout a compile-time constant, so the same bits."""

from __future__ import annotations

from ._dflash import launcher

NAME = "contig"
SUMMARY = "draft block over a contiguous KV buffer per sequence: no block-table reads, split-K and a merge"


def build(shape):
    return launcher(shape, paged=False)

"""``attention.dflash_contig`` variant ``paged`` (the lever off): the draft
block reads the target's K and V through the sequence's block table, 16
tokens a block, as the paged decode does. Kernels: ``_dflash`` with
``PAGED``."""

from __future__ import annotations

from ._dflash import launcher

NAME = "paged"
SUMMARY = "draft block over the paged KV: one block-table read per 16 tokens, split-K and a merge"


def build(shape):
    return launcher(shape, paged=True)

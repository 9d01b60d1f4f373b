"""``gdn.proj_gemv_batch`` variant ``batch16`` (``ssm_gemv_batch4`` on, 5 to
16 rows): the contiguous-batch GEMV tier's 16-row kernel (``batch_gemv``):
each int4 weight read once for up to 16 rows, activations staged in chunks
of 512 inputs (16 rows of them fill the same 33 KiB as batch4's 2048)."""

from __future__ import annotations

from .batch_gemv import make_build

NAME = "batch16"
SUMMARY = "16-row contiguous-batch W4A16 GEMV: each weight read once for every row, warp per output"
MROWS = 16
KCHUNK = 512

build = make_build(MROWS, KCHUNK)

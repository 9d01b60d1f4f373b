"""``gdn.proj_gemv_batch`` variant ``batch4`` (``ssm_gemv_batch4`` on, up to
4 rows): the contiguous-batch GEMV tier's 4-row kernel (``batch_gemv``):
each int4 weight read once for the 4 rows, activations staged in chunks of
2048 inputs."""

from __future__ import annotations

from .batch_gemv import make_build

NAME = "batch4"
SUMMARY = "4-row contiguous-batch W4A16 GEMV: each weight read once for every row, warp per output"
MROWS = 4
KCHUNK = 2048

build = make_build(MROWS, KCHUNK)

"""``gdn.proj_gemv_batch`` variant ``per_row`` (``ssm_gemv_batch4`` off, or
more than 16 rows): what the engine runs without the contiguous-batch
tier is not named by its lever file; leverctl's choice is one launch of
the single-row W4A16 GEMV (``w4a16.gemv_sw``, one warp per output) per
row of the batch, so the weights are read once per row."""

from __future__ import annotations

from ...w4a16.gemv import gemv_sw

NAME = "per_row"
SUMMARY = "one W4A16 GEMV launch (w4a16 gemv_sw) per row: the weights read once per row"


def build(shape):
    run = gemv_sw.make_launch(shape["n"], shape["k"])

    def launch(bufs):
        y, x, qw, sc = bufs["y"], bufs["x"], bufs["qweight"], bufs["scales"]
        for r in range(shape["m"]):
            run(y[r], qw, sc, x[r])

    return launch


def launches(shape) -> int:
    return shape["m"]

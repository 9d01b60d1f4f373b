"""``decode.per_sequence`` variant ``batched`` (both levers off, or the
model is not of the kind a lever that is on names): the step's kernels
each launched once for the whole batch, a block row per sequence
(``_step``)."""

from __future__ import annotations

from ._step import launcher

NAME = "batched"
SUMMARY = "the step's kernels each launched once for the whole batch"


def build(shape):
    return launcher(shape, per_sequence=False)

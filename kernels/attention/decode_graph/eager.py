"""``attention.decode_graph`` variant ``eager``: the decode step's kernels
launched one by one every step (``_step``), as Metrale does when
capture is forbidden (``ms_profile``; ``lora_eager`` with a LoRA pool) or
not permitted (a communicator without ``ep_graphs``/``gdn_decode_graph``).
Every launch pays the host's launch cost."""

from __future__ import annotations

from numba import cuda

from ._step import make_step

NAME = "eager"
SUMMARY = "the step's kernels launched one by one on a stream, every step"


def build(shape):
    step, workspace = make_step(shape)
    stream = cuda.stream()

    def launch(b):
        step(b, stream)

    launch.workspace = workspace
    launch.captured = False
    launch.step, launch.stream = step, stream
    return launch

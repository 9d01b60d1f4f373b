"""``attention.decode_graph`` variant ``graph``: the decode step's kernels
(``_step``) captured once as a CUDA graph on the stream and the
graph replayed each step: one launch for the whole step.

A graph records its buffers' addresses, so the launch captures once per
set of buffers (the check's fresh ones, the timing's reused ones) and
replays after; capture happens outside any timed call. Before its first
capture the launch runs the step once eagerly, so every kernel is compiled
and loaded (neither is legal inside a capture), and then puts back what
that run wrote (the state it advanced, the outputs and scratch it
overwrote): the check still sees its poison and the state it drew.

In the CUDA simulator there are no graphs: the launch runs the step
eagerly, ``launch.captured`` stays False and the record's note says so.
Capture and replay: ``_cuda_graph``.
"""

from __future__ import annotations

from numba import config, cuda

from ._cuda_graph import capture
from ._step import make_step

NAME = "graph"
SUMMARY = "the step captured once as a CUDA graph (stream capture), then one graph launch per step"

WRITTEN = ("o", "state", "ao")  # what a step writes besides its scratch


def build(shape, driver=None):
    step, workspace = make_step(shape)
    stream = cuda.stream()
    held: dict = {"bufs": None, "graph": None, "warm": False}

    def _warm(b) -> None:
        saved = {}
        for name, arr in [*((n, b[n]) for n in WRITTEN), *workspace.items()]:
            copy = cuda.device_array(arr.shape, arr.dtype)
            copy.copy_to_device(arr)
            saved[name] = (arr, copy)
        step(b, stream)
        stream.synchronize()
        for arr, copy in saved.values():
            arr.copy_to_device(copy)
        cuda.synchronize()
        held["warm"] = True

    def launch(b):
        if config.ENABLE_CUDASIM:
            step(b, stream)
            return
        key = tuple(id(b[n]) for n in sorted(b))
        if held["graph"] is None or held["key"] != key:
            if not held["warm"]:
                _warm(b)
            if held["graph"] is not None:
                held["graph"].close()
            held["graph"] = capture(stream.handle, lambda: step(b, stream), driver)
            held["bufs"], held["key"] = dict(b), key  # the graph addresses these: keep them alive
            launch.captured = True
        held["graph"].replay()

    launch.workspace = workspace
    launch.captured = False
    launch.step, launch.stream = step, stream
    return launch

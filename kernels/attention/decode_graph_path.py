"""The declaration of ``attention.decode_graph`` (Metrale's decode CUDA graph).

==========================  ======================  =======  =====================================
path                        levers (default)        variant  chosen when
==========================  ======================  =======  =====================================
attention.decode_graph      ep_graphs (off),        eager    ms_profile on; or lora_eager on with
                            gdn_decode_graph (off),          a LoRA pool loaded; or a communicator
                            ms_profile (off),                present and neither ep_graphs nor
                            lora_eager (off)                 gdn_decode_graph on
                                                    graph    otherwise
==========================  ======================  =======  =====================================

Whether an expert-parallel communicator is present and whether a LoRA pool
is loaded are facts of the serving process, not levers: the shapes carry
them (``communicator``, ``lora_pool``), so ``select()`` reads them and every
record's shape states them. The step is the GDN decode of every GDN layer
and the paged decode attention of every attention layer
(``_decode_step``); ``graph`` replays it as one CUDA graph, ``eager``
launches its kernels one by one. Both write the same bits (the graph runs
the same kernels on the same buffers): on a GPU each record's ``findings``
say whether a replay and an eager step from the same state agreed bit for
bit and give both times; in the simulator the graph variant runs eagerly
and its note says so.
"""
from __future__ import annotations

import numpy as np

from ..common.path import KernelPath, Tolerance, Variant
from ..selection import ATTENTION_DECODE_GRAPH as TABLE, check_declaration
from . import decode_eager, decode_graph_replay, decode_graph_spec as spec
from ._decode_step import launches

# The GDN decode's and the paged attention's own bounds, the looser of each.
TOL = Tolerance(rel=5e-4, abs_of_max=1e-4)
SIM_NOTE = "simulator: no CUDA graphs here, the graph variant launched its kernels eagerly"
TIMED_STEPS = 20


def _clone(b: dict, cuda) -> dict:
    out = {}
    for name, arr in b.items():
        copy = cuda.device_array(arr.shape, arr.dtype)
        copy.copy_to_device(arr)
        out[name] = copy
    return out


def _median_us(fn, stream, cuda, steps: int = TIMED_STEPS) -> float:
    times = []
    for _ in range(steps):
        start, end = cuda.event(), cuda.event()
        start.record(stream)
        fn()
        end.record(stream)
        end.synchronize()
        times.append(cuda.event_elapsed_time(start, end) * 1e3)
    return float(f"{float(np.median(times)):.4g}")


def findings(variant: str, shape, launch, bufs, cuda, on_gpu: bool = False) -> dict:
    """The record's ``findings``: the serving facts select() read, whether
    the step ran as a graph, and on a GPU (graph variant) whether a replay
    equals an eager step from the same state bit for bit, with both
    times (CUDA events on the step's stream, median of 20)."""
    out = {"communicator": bool(shape["communicator"]), "lora_pool": bool(shape["lora_pool"]),
           "captured": bool(getattr(launch, "captured", False))}
    if not on_gpu:
        if variant == "graph":
            out["note"] = SIM_NOTE
        return out
    if variant != "graph":
        return out
    start = _clone(bufs, cuda)
    eager = _clone(start, cuda)
    launch.step(eager, launch.stream)
    for name in decode_graph_replay.WRITTEN:
        bufs[name].copy_to_device(start[name])
    launch(bufs)  # a replay: the graph was captured on these buffers by the check
    cuda.synchronize()
    differing = [name for name in spec.outputs(shape)
                 if not np.array_equal(eager[name].copy_to_host().view(np.uint32),
                                       bufs[name].copy_to_host().view(np.uint32))]
    out.update(identical=not differing, differing=differing,
               eager_us=_median_us(lambda: launch.step(eager, launch.stream), launch.stream, cuda),
               graph_us=_median_us(lambda: launch(bufs), launch.stream, cuda))
    if differing:
        out["note"] = f"graph replay differs from the eager step in {', '.join(differing)}"
    return out


DECODE_GRAPH = KernelPath(
    name=TABLE.path,
    family="attention",
    summary=TABLE.summary,
    levers=TABLE.levers,
    lever_defaults={"ep_graphs": False, "gdn_decode_graph": False, "ms_profile": False, "lora_eager": False},
    variants={v.name: v for v in (
        Variant(decode_graph_replay.NAME, decode_graph_replay.SUMMARY, decode_graph_replay.build, launches=1),
        Variant(decode_eager.NAME, decode_eager.SUMMARY, decode_eager.build, launches=launches),
    )},
    select=TABLE.select,
    shapes=spec.shapes,
    make_inputs=spec.make_inputs,
    outputs=spec.outputs,
    reference=spec.reference,
    traffic=spec.traffic,
    tolerance=TOL,
    engines=TABLE.engines,
    notes="Launch-bound at small batches: the graph turns the step's launches into one.",
    extra={"model_sections": ("gdn", "attention"), "findings": findings},
)

check_declaration(DECODE_GRAPH)

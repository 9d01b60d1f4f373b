"""What every family's variants declare about themselves, against what they
do, at every smoke shape of every registered path, without running a
kernel: the kernel launches one call makes (the roofline's launch term and
the host-inclusive timing rely on them), and the device scratch ``build``
allocates (the check poisons only the scratch a launch declares as its
``workspace``)."""

from __future__ import annotations

import os
from dataclasses import replace

import numpy as np
import pytest
from numba import cuda
from numba.cuda.simulator.kernel import FakeCUDAKernel

from leverctl_kernels.common.path import Shape, Variant, workspace_of
from leverctl_kernels.gdn.fused_conv.fused import eligible
from leverctl_kernels.registry import all_paths, get_path


def buildable(path, variant: str, shape) -> bool:
    """Whether ``variant`` exists at ``shape`` at all: ``select`` never
    picks it elsewhere and its builder refuses those shapes. WY-17 only at
    T = 17; the fused conv kernel only where it is eligible; batch4 up to 4
    rows; the Q4_K MMQ arm only where k is a whole number of Q4_K
    super-blocks (elsewhere the table's guard sends ``ffn_mmq`` to the
    arms after it)."""
    if variant == "wy17":
        return shape["t"] == 17
    if path.name == "gdn.fused_conv" and variant == "fused":
        return eligible(shape)[0]
    if path.name == "gdn.proj_gemv_batch" and variant == "batch4":
        return shape["m"] <= 4
    if path.name == "ffn.prefill" and variant == "q4k_mmq":
        return shape["k"] % 256 == 0
    return True


# Variants whose first call with a set of buffers also does the model's
# load-time work, once, outside any timed call: (path, variant) -> (kernel
# launches of that load, device arrays ``build`` allocates for what the load
# keeps for the model's life, which are not scratch: poisoning them would
# stand for a model whose weights were never loaded).
LOADS = {
    # the Q/K/V weights rotated at load (``w_rot``), by one rotation kernel
    ("attention.rotation", "pre_rotated"): (1, 1),
    # W' = W + s B A by one merge kernel (``merged``), and the fused
    # epilogue's operand, which the merged projection never reads
    ("lora.proj", "merged"): (1, 2),
}


def declared_launches(path, variant: str, shape) -> int:
    """The launches a warm call of ``variant`` makes in the simulator: what
    it declares, except the CUDA-graph variant of the decode step, whose
    one declared launch is a graph replay. The simulator has no graphs: that
    variant launches the step's kernels eagerly (its record says so), as
    many as the eager variant declares; its own count holds on a GPU."""
    if path.name == "attention.decode_graph" and variant == "graph":
        return path.variant_launches("eager", shape)
    return path.variant_launches(variant, shape)


# Launches are counted by the simulator's kernel objects.
pytestmark = pytest.mark.skipif(os.environ.get("NUMBA_ENABLE_CUDASIM") != "1", reason="counts simulator launches")


def bound(path, variant: str, shape):
    """``shape`` as ``variant`` runs it where its lever reaches the run
    (moe.union_stats: the counts are taken only when the lever is on)."""
    if path.name == "moe.union_stats":
        return path.bind({"moe_union_stats": variant == "on"}, shape, "atlas")
    return shape


CASES = [
    (p, v, bound(p, v, s))
    for p in all_paths()
    for s in p.shapes("smoke", None)
    for v in p.variants
    if buildable(p, v, s)
]


def _id(case) -> str:
    p, v, s = case
    return f"{p.name}/{v}/{s.label}"


def count_launches(monkeypatch, launch, bufs) -> int:
    """Kernel launches ``launch(bufs)`` makes; no kernel runs."""
    calls = []
    monkeypatch.setattr(FakeCUDAKernel, "__call__", lambda self, *a, **k: calls.append(self))
    launch(bufs)
    monkeypatch.undo()
    return len(calls)


def fake_bufs(path, shape) -> dict:
    """Device arrays of the right shapes (contents irrelevant: nothing runs)."""
    x = path.make_inputs(shape, np.random.default_rng(0))
    outs = {n: np.zeros(s, d) for n, (s, d) in path.outputs(shape).items() if n not in x}
    return {n: cuda.to_device(np.ascontiguousarray(a)) for n, a in {**x, **outs}.items()}


def scratch_allocated(monkeypatch, build, shape) -> tuple[int, object]:
    """(device arrays ``build(shape)`` allocated, the launch it returned)."""
    made = []
    real = cuda.device_array

    def counting(*a, **k):
        arr = real(*a, **k)
        made.append(arr)
        return arr

    monkeypatch.setattr(cuda, "device_array", counting)
    launch = build(shape)
    monkeypatch.undo()
    return len(made), launch


@pytest.mark.parametrize("case", CASES, ids=_id)
def test_a_variant_makes_the_launches_it_declares(case, monkeypatch):
    """A warm call (the second with the same buffers) makes the declared
    launches; the first only adds a load that the variant does at load."""
    path, variant, shape = case
    launch = path.variants[variant].build(shape)
    bufs = fake_bufs(path, shape)
    first = count_launches(monkeypatch, launch, bufs)
    warm = count_launches(monkeypatch, launch, bufs)
    assert warm == declared_launches(path, variant, shape)
    assert first == warm + LOADS.get((path.name, variant), (0, 0))[0]


@pytest.mark.parametrize("case", CASES, ids=_id)
def test_all_the_scratch_a_variant_allocates_is_its_declared_workspace(case, monkeypatch):
    path, variant, shape = case
    allocated, launch = scratch_allocated(monkeypatch, path.variants[variant].build, shape)
    assert allocated == len(workspace_of(launch)) + LOADS.get((path.name, variant), (0, 0))[1]


def test_every_family_is_checked_and_every_variant_somewhere():
    checked = {(p.name, v) for p, v, _ in CASES}
    assert {p.family for p, _, _ in CASES} == {"w4a16", "gdn", "attention", "decode", "ffn", "lora", "mamba2", "moe"}
    assert checked == {(p.name, v) for p in all_paths() for v in p.variants}
    assert set(LOADS) <= checked


def test_the_launch_count_varies_exactly_where_a_lever_changes_the_number_of_launches():
    def vary(name, shape):
        return get_path(name).launches_vary(shape)

    assert vary("w4a16.ffn_decode", Shape("s", {"hidden": 72, "inter": 40, "m": 1}))
    assert vary("gdn.fused_conv", Shape("s", {"n": 1}))
    assert vary("gdn.decode", Shape("s", {"n": 3})) and not vary("gdn.decode", Shape("s", {"n": 1}))
    assert not vary("w4a16.gemv", Shape("s", {})) and not vary("gdn.verify", Shape("s", {}))


# -- the checks above catch what they are for ----------------------------------


def test_a_miscounted_launch_declaration_is_caught(monkeypatch):
    path, _, shape = next(c for c in CASES if c[0].name == "gdn.decode" and c[2]["n"] > 1)
    wrong = replace(path.variants["per_sequence"], launches=1)  # as if it were one launch
    counted = count_launches(monkeypatch, wrong.build(shape), fake_bufs(path, shape))
    assert counted == shape["n"] and counted != wrong.launches


def test_a_load_that_ran_at_every_call_would_be_caught(monkeypatch):
    """The warm call is where a load-time kernel would show if the variant
    ran it at every call: a new weight buffer each call makes it do so."""
    path, variant, shape = next(c for c in CASES if (c[0].name, c[1]) == ("attention.rotation", "pre_rotated"))
    launch = path.variants[variant].build(shape)
    counted = [count_launches(monkeypatch, launch, fake_bufs(path, shape)) for _ in range(2)]
    assert counted == [declared_launches(path, variant, shape) + 1] * 2


def test_scratch_left_out_of_the_workspace_is_caught(monkeypatch):
    def build(shape):
        tmp = cuda.device_array(shape["n"], np.float32)

        def launch(bufs):
            bufs["y"][:] = tmp

        return launch

    allocated, launch = scratch_allocated(monkeypatch, Variant("v", "forgets", build).build, Shape("s", {"n": 5}))
    assert (allocated, len(workspace_of(launch))) == (1, 0)

"""What every family's variants declare about themselves, against what they
do, at every smoke shape, without running a kernel: the kernel launches one
call makes (the roofline's launch term and the host-inclusive timing rely on
them), and the device scratch ``build`` allocates (the check poisons only
the scratch a launch declares as its ``workspace``)."""
from __future__ import annotations

import os
from dataclasses import replace

import numpy as np
import pytest
from numba import cuda
from numba.cuda.simulator.kernel import FakeCUDAKernel

from leverctl_kernels.common.path import Shape, Variant, workspace_of
from leverctl_kernels.gdn import PATHS as GDN
from leverctl_kernels.gdn.conv_fused import eligible
from leverctl_kernels.mamba2 import PATHS as MAMBA2
from leverctl_kernels.moe import PATHS as MOE
from leverctl_kernels.moe_prefill import PATHS as MOE_PREFILL
from leverctl_kernels.w4a16 import PATHS as W4A16



def buildable(path, variant: str, shape) -> bool:
    """Whether ``variant`` exists at ``shape`` at all (``select`` never
    picks WY-17 at T != 17, nor the fused conv kernel where it is not
    eligible; their builders refuse those shapes)."""
    if variant == "wy17":
        return shape["t"] == 17
    if path.name == "gdn.fused_conv" and variant == "fused":
        return eligible(shape)[0]
    if path.name == "gdn.proj_gemv_batch" and variant == "batch4":
        return shape["m"] <= 4
    return True


# Launches are counted by the simulator's kernel objects.
pytestmark = pytest.mark.skipif(os.environ.get("NUMBA_ENABLE_CUDASIM") != "1", reason="counts simulator launches")

def bound(path, variant: str, shape):
    """``shape`` as ``variant`` runs it where its lever reaches the run
    (moe.union_stats: the counts are taken only when the lever is on)."""
    if path.name == "moe.union_stats":
        return path.bind({"moe_union_stats": variant == "on"}, shape, "atlas")
    return shape


CASES = [(p, v, bound(p, v, s)) for p in (*W4A16, *GDN, *MAMBA2, *MOE_PREFILL, *MOE) for s in p.shapes("smoke", None)
         for v in p.variants if buildable(p, v, s)]


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
    path, variant, shape = case
    launch = path.variants[variant].build(shape)
    assert count_launches(monkeypatch, launch, fake_bufs(path, shape)) == path.variant_launches(variant, shape)


@pytest.mark.parametrize("case", CASES, ids=_id)
def test_all_the_scratch_a_variant_allocates_is_its_declared_workspace(case, monkeypatch):
    path, variant, shape = case
    allocated, launch = scratch_allocated(monkeypatch, path.variants[variant].build, shape)
    assert allocated == len(workspace_of(launch))


def test_the_launch_count_varies_exactly_where_a_lever_changes_the_number_of_launches():
    def vary(name, shape):
        path = next(p for p in (*W4A16, *GDN) if p.name == name)
        return path.launches_vary(shape)

    assert vary("w4a16.ffn_decode", Shape("s", {"hidden": 72, "inter": 40, "m": 1}))
    assert vary("gdn.fused_conv", Shape("s", {"n": 1}))
    assert vary("gdn.decode", Shape("s", {"n": 3})) and not vary("gdn.decode", Shape("s", {"n": 1}))
    assert not vary("w4a16.gemv", Shape("s", {})) and not vary("gdn.verify", Shape("s", {}))


# -- the two checks above catch what they are for ------------------------------


def test_a_miscounted_launch_declaration_is_caught(monkeypatch):
    path, _, shape = next(c for c in CASES if c[0].name == "gdn.decode" and c[2]["n"] > 1)
    wrong = replace(path.variants["per_sequence"], launches=1)  # as if it were one launch
    counted = count_launches(monkeypatch, wrong.build(shape), fake_bufs(path, shape))
    assert counted == shape["n"] and counted != wrong.launches


def test_scratch_left_out_of_the_workspace_is_caught(monkeypatch):
    def build(shape):
        tmp = cuda.device_array(shape["n"], np.float32)

        def launch(bufs):
            bufs["y"][:] = tmp

        return launch

    allocated, launch = scratch_allocated(monkeypatch, Variant("v", "forgets", build).build, Shape("s", {"n": 5}))
    assert (allocated, len(workspace_of(launch))) == (1, 0)

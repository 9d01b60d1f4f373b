"""``attention.decode_graph`` (Metrale's decode CUDA graph): the variant
choice for every combination of its four levers and the two serving facts
(communicator, LoRA pool), the capture wrapper's error handling against a
fake driver, both variants against the float64 reference in the simulator
(where the graph variant runs eagerly and says so), a broken input the
check must reject, and on a GPU a replay equal to the eager step bit for
bit.
"""

from __future__ import annotations

import enum
import itertools
import sys

import numpy as np
import pytest

from leverctl.bench.check import compare, poison
from leverctl.levers import load_catalog
from leverctl_kernels.attention.decode_graph import _cuda_graph, spec
from leverctl_kernels.attention.decode_graph.spec import PATH, SIM_NOTE, TOL, findings
from leverctl_kernels.attention.paged_decode import spec as attn_spec
from leverctl_kernels.common.path import Shape
from leverctl_kernels.gdn import family as gdn_family
from leverctl_kernels.registry import family_paths
from leverctl_kernels.selection.attention import DECODE_GRAPH as TABLE

LEVERS = ("ep_graphs", "gdn_decode_graph", "ms_profile", "lora_eager")
SMOKE = PATH.shapes("smoke", None)


def _facts(comm: int, lora: int) -> Shape:
    return Shape("facts", {**SMOKE[0].dims, "communicator": comm, "lora_pool": lora})


# ------------------------------------------------------------- selection


def test_the_path_is_metrales_and_its_levers_steer_it():
    cat = load_catalog("metrale")
    assert PATH in family_paths("attention") and PATH.engines == ("metrale",)
    for f in LEVERS:
        assert "attention.decode_graph" in cat.lever(f).steers
    # Atlas's lora_eager folds adapters in at load: another lever, no graph path
    atlas = load_catalog("atlas")
    assert {f for f in LEVERS if f in atlas.fields} == {"lora_eager"}
    assert "attention.decode_graph" not in atlas.lever("lora_eager").steers


@pytest.mark.parametrize("comm,lora", list(itertools.product((0, 1), repeat=2)))
def test_select_for_every_lever_combination_and_serving_fact(comm, lora):
    shape = _facts(comm, lora)
    for values in itertools.product((False, True), repeat=4):
        lv = dict(zip(LEVERS, values))
        allowed = (
            not lv["ms_profile"]
            and not (lv["lora_eager"] and lora)
            and (not comm or lv["ep_graphs"] or lv["gdn_decode_graph"])
        )
        got = PATH.select(lv, shape)
        assert got.variant == ("graph" if allowed else "eager"), (lv, comm, lora)
        assert (got.note == "") == allowed
        if lv["ms_profile"]:
            assert got.note.startswith("ms_profile:")
        elif not allowed and lv["lora_eager"] and lora:
            assert got.note.startswith("lora_eager with a LoRA pool loaded")
        elif not allowed:
            assert "communicator is present" in got.note


def test_every_shape_states_both_serving_facts_and_the_smoke_shapes_cover_both():
    for preset in ("smoke", "model"):
        for s in PATH.shapes(preset, None):
            assert s["communicator"] in (0, 1) and s["lora_pool"] in (0, 1)
    assert {(s["communicator"], s["lora_pool"]) for s in SMOKE} == {(0, 0), (1, 1)}


def test_explain_words_the_same_rows():
    cases = TABLE.cases({"lora_eager": True})
    assert [(c.when, c.variant) for c in cases] == [
        (("LoRA pool loaded",), "eager"),
        (("communicator",), "eager"),
        ((), "graph"),
    ]


# ------------------------------------------------------- capture wrapper


class R(enum.Enum):
    CUDA_SUCCESS = 0
    CUDA_ERROR_INVALID_VALUE = 1
    CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED = 900
    CUDA_ERROR_STREAM_CAPTURE_INVALIDATED = 901


class Mode(enum.Enum):
    CU_STREAM_CAPTURE_MODE_THREAD_LOCAL = 1


class FakeDriver:
    """The five driver calls the wrapper makes, recording each; ``fail``
    maps a call to the result it returns instead of success."""

    CUresult = R
    CUstreamCaptureMode = Mode

    def __init__(self, fail=None):
        self.fail = dict(fail or {})
        self.calls: list[str] = []
        self.capturing = False
        self.live_graphs: set = set()
        self.illegal = False

    def _res(self, name):
        self.calls.append(name)
        return self.fail.get(name, R.CUDA_SUCCESS)

    def cuStreamBeginCapture(self, stream, mode):
        assert mode is Mode.CU_STREAM_CAPTURE_MODE_THREAD_LOCAL
        res = self._res("begin")
        self.capturing = res is R.CUDA_SUCCESS
        return (res,)

    def sync(self):  # an illegal call while capturing invalidates the capture
        if self.capturing:
            self.illegal = True

    def cuStreamEndCapture(self, stream):
        res = self._res("end")
        self.capturing = False
        if self.illegal:
            return R.CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, None
        if res is not R.CUDA_SUCCESS:
            return res, None
        self.live_graphs.add("g")
        return res, "g"

    def cuGraphDestroy(self, graph):
        self.calls.append("destroy")
        self.live_graphs.discard(graph)
        return (R.CUDA_SUCCESS,)

    def cuGraphInstantiate(self, graph, flags):
        res = self._res("instantiate")
        return res, ("exe" if res is R.CUDA_SUCCESS else None)

    def cuGraphLaunch(self, exe, stream):
        assert exe == "exe" and stream == "s"
        return (self._res("launch"),)

    def cuGraphExecDestroy(self, exe):
        self.calls.append("exec_destroy")
        return (R.CUDA_SUCCESS,)


def test_capture_records_the_step_once_and_replays_it():
    drv, ran = FakeDriver(), []
    g = _cuda_graph.capture("s", lambda: ran.append("step"), drv)
    g.replay()
    g.replay()
    g.close()
    assert ran == ["step"]
    assert drv.calls == ["begin", "end", "instantiate", "destroy", "launch", "launch", "exec_destroy"]
    assert not drv.live_graphs and not drv.capturing


def test_a_capture_that_cannot_begin_enqueues_nothing():
    drv, ran = FakeDriver({"begin": R.CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED}), []
    with pytest.raises(
        _cuda_graph.CaptureError, match="cuStreamBeginCapture failed: CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED"
    ):
        _cuda_graph.capture("s", lambda: ran.append("step"), drv)
    assert ran == [] and drv.calls == ["begin"]


def test_an_illegal_call_during_capture_is_named():
    drv = FakeDriver()
    with pytest.raises(_cuda_graph.CaptureError, match="invalidated by a call that is illegal"):
        _cuda_graph.capture("s", drv.sync, drv)
    assert drv.calls == ["begin", "end"] and not drv.capturing and not drv.live_graphs


def test_a_failing_step_ends_the_capture_and_frees_its_graph():
    drv = FakeDriver()

    def step():
        raise RuntimeError("launch refused")

    with pytest.raises(RuntimeError, match="launch refused"):
        _cuda_graph.capture("s", step, drv)
    assert drv.calls == ["begin", "end", "destroy"] and not drv.capturing and not drv.live_graphs


def test_a_graph_that_cannot_be_instantiated_is_freed():
    drv = FakeDriver({"instantiate": R.CUDA_ERROR_INVALID_VALUE})
    with pytest.raises(_cuda_graph.CaptureError, match="cuGraphInstantiate failed"):
        _cuda_graph.capture("s", lambda: None, drv)
    assert drv.calls == ["begin", "end", "instantiate", "destroy"] and not drv.live_graphs


def test_a_refused_replay_raises():
    drv = FakeDriver({"launch": R.CUDA_ERROR_INVALID_VALUE})
    g = _cuda_graph.capture("s", lambda: None, drv)
    with pytest.raises(_cuda_graph.CaptureError, match="cuGraphLaunch failed"):
        g.replay()


def test_the_wrapper_uses_calls_the_real_bindings_have():
    from cuda.bindings import driver

    for name in (
        "cuStreamBeginCapture",
        "cuStreamEndCapture",
        "cuGraphInstantiate",
        "cuGraphLaunch",
        "cuGraphDestroy",
        "cuGraphExecDestroy",
    ):
        assert hasattr(driver, name)
    assert driver.CUresult.CUDA_ERROR_STREAM_CAPTURE_INVALIDATED
    assert driver.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_THREAD_LOCAL


# ------------------------------------------------------------- simulator


def _run(variant: str, shape: Shape, inputs: dict):
    from numba import cuda

    launch = PATH.variants[variant].build(shape)
    bufs = {n: cuda.to_device(np.ascontiguousarray(a)) for n, a in inputs.items()}
    for n, (s, dt) in PATH.outputs(shape).items():
        if n not in bufs:
            bufs[n] = cuda.to_device(poison(s, dt))
    launch(bufs)
    cuda.synchronize()
    return launch, bufs, {n: bufs[n].copy_to_host() for n in PATH.outputs(shape)}


@pytest.fixture(scope="module")
def drawn():
    shape = SMOKE[0]
    inputs = PATH.make_inputs(shape, np.random.default_rng(11))
    return shape, inputs, PATH.reference(shape, {k: v.copy() for k, v in inputs.items()})


@pytest.mark.sim
@pytest.mark.parametrize("variant", [pytest.param("graph", marks=pytest.mark.simulator_only), "eager"])
def test_both_variants_match_the_reference_and_the_graph_says_it_ran_eagerly(drawn, variant):
    from numba import cuda

    shape, inputs, ref = drawn
    launch, bufs, got = _run(variant, shape, inputs)
    fig = compare(got, ref, TOL)
    assert fig.passed, fig.why()
    f = findings(variant, shape, launch, bufs, cuda)
    assert f["captured"] is False and f["communicator"] is False and f["lora_pool"] is False
    assert f.get("note") == (SIM_NOTE if variant == "graph" else None)


@pytest.mark.sim
def test_the_check_rejects_a_step_run_on_the_wrong_state_slots(drawn):
    shape, inputs, ref = drawn
    bad = {**inputs, "slots": np.roll(inputs["slots"], 1)}
    _, _, got = _run("eager", shape, bad)
    fig = compare(got, ref, TOL)
    assert not fig.passed and fig.rel > 1e-2


@pytest.mark.gpu
def test_on_a_gpu_a_replay_equals_the_eager_step_bit_for_bit():
    from numba import cuda

    shape = SMOKE[0]
    inputs = PATH.make_inputs(shape, np.random.default_rng(2))
    launch, bufs, got = _run("graph", shape, inputs)
    assert launch.captured
    assert compare(got, PATH.reference(shape, {k: v.copy() for k, v in inputs.items()}), TOL).passed
    f = findings("graph", shape, launch, bufs, cuda, on_gpu=True)
    assert f["identical"], f["differing"]
    assert f["graph_us"] > 0 and f["eager_us"] > 0


class _Stream:
    """A stream with a driver handle, for the fake driver (the simulator's
    streams have none)."""

    handle = "s"

    def synchronize(self):
        pass


@pytest.mark.sim
@pytest.mark.simulator_only
def test_the_graph_launch_warms_up_without_advancing_the_state_and_captures_once_per_buffer_set(drawn, monkeypatch):
    """The graph variant's launch as on a GPU, against the fake driver: the
    simulator runs the step's kernels when the capture enqueues them, so
    the outputs are the capture's. They still match the reference only if
    the warm-up put back the state it advanced and the poison it
    overwrote; the replays go to the driver, and a second call on the same
    buffers captures nothing new."""
    from numba import cuda

    from leverctl_kernels.attention.decode_graph import graph as decode_graph_replay

    shape, inputs, ref = drawn
    drv = FakeDriver()
    monkeypatch.setattr(decode_graph_replay, "config", type("C", (), {"ENABLE_CUDASIM": False}))
    monkeypatch.setattr(decode_graph_replay.cuda, "stream", _Stream)
    launch = decode_graph_replay.build(shape, driver=drv)
    bufs = {n: cuda.to_device(np.ascontiguousarray(a)) for n, a in inputs.items()}
    for n, (s, dt) in PATH.outputs(shape).items():
        if n not in bufs:
            bufs[n] = cuda.to_device(poison(s, dt))
    launch(bufs)
    got = {n: bufs[n].copy_to_host() for n in PATH.outputs(shape)}
    assert compare(got, ref, TOL).passed and launch.captured
    launch(bufs)
    assert drv.calls == ["begin", "end", "instantiate", "destroy", "launch", "launch"]
    fresh = dict(bufs, o=cuda.to_device(poison(*PATH.outputs(shape)["o"])))
    launch(fresh)  # new buffers: a new graph, the old one freed
    assert drv.calls[6:] == ["exec_destroy", "begin", "end", "instantiate", "destroy", "launch"]


def test_the_model_shapes_are_qwen3_next_layer_groups_with_and_without_a_communicator():
    model = PATH.shapes("model", None)
    assert {(s["gdn_layers"], s["attn_layers"], s["d"], s["dk"], s["ctx"]) for s in model} == {
        (3, 1, 256, 128, spec.MODEL_CONTEXT)
    }
    assert {s["communicator"] for s in model} == {0, 1}
    one = spec.traffic(model[0])
    assert one.bytes > 3 * gdn_family.state_bytes(model[0]) * model[0]["n"]


def test_the_profile_shape_keeps_the_models_rows_and_serving_facts():
    for s in PATH.shapes("model", None):
        ps = PATH.extra["profile_shape"](s)
        keep = ("dk", "dv", "hq", "hkv", "d", "target_ctas", "min_split_blocks", "communicator", "lora_pool")
        assert {k: ps[k] for k in keep} == {k: s[k] for k in keep}
        assert ps["hv"] // ps["hk"] == s["hv"] // s["hk"] and ps["hk"] == 1
        assert (ps["n"], ps["slots"], ps["ctx"], ps["gdn_layers"], ps["attn_layers"]) == (1, 3, 33, 1, 1)


@pytest.mark.sim
def test_at_the_profile_shape_the_state_and_kv_come_in_16_byte_loads_and_whole_sectors():
    """One GDN layer (d = 128, two value heads) and one attention layer
    (16 heads over 2, d = 256, 30 tokens), 8 s in the simulator: every load
    of the GDN state and of K and V is 16 bytes, they carry all of the
    cache's bytes, >= 90 % of the loaded bytes come by 16-byte loads (95 %
    measured, with the attention's q rows and partials; 78 % before them),
    the global sectors are >= 90 % used (99.3 % measured), and 1.04x the
    declared bytes are requested (1.09x while every lane of the merge read
    the length, 1.18x while it read every split's (m, l))."""
    from leverctl.profile import memtrace as mt

    shape = PATH.extra["profile_shape"](PATH.shapes("model", None)[0])
    prof = mt.profile_variant(PATH, "eager", shape)
    loads = [r for r in prof.sites if r.space == mt.GLOBAL and r.kind == "load"]
    state = [r for r in loads if "gdn/_step.py:" in r.site]
    kv = [r for r in loads if "attention/_paged.py:" in r.site and r.bytes == 16 * r.accesses]
    assert state and all(r.bytes == 16 * r.accesses for r in state), [r.to_json() for r in state]
    assert sum(r.used_bytes for r in state) == shape["hv"] * shape["dk"] * shape["dv"] * 4
    length = attn_spec.lengths(shape)[0]
    assert sum(r.used_bytes for r in kv) >= 2 * length * shape["hkv"] * shape["d"] * 2
    assert prof.sector_efficiency >= 0.9 and prof.wide_load_share >= 0.9, (
        prof.sector_efficiency,
        prof.wide_load_share,
    )
    assert prof.requested_vs_declared < 1.07, prof.requested_vs_declared

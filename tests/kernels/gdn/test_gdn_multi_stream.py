"""Multi-stream GDN prefill (``gdn.prefill_multi_stream``, Metrale's
``gdn_batched_fla``): the variant every lever value selects at every kind of
shape, the shapes (the recipe's ``prefill_streams``), both variants against
the float64 reference per stream at odd lengths (a one-token stream, streams
shorter than a chunk, chunk boundaries inside a stream, stream starts off
the chunk grid) and bit for bit against each other and against
``gdn.prefill`` run on each stream alone, and a kernel that carries one
stream's state into the next, which the checks must reject.

Simulator tests (``sim``) use the smoke shapes and a few more, all tiny.
"""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import numpy as np
import pytest

from leverctl.bench.axes import refine
from leverctl.bench.plan import applies
from leverctl.levers import load_catalog
from leverctl_kernels.common.path import Shape, Tolerance
from leverctl_kernels.gdn import naive
from leverctl_kernels.gdn.prefill_multi_stream import batched
from leverctl_kernels.gdn.prefill_multi_stream import spec as ms_spec
from leverctl_kernels.gdn.prefill_multi_stream.spec import PATH
from leverctl_kernels.registry import get_path

ROOT = Path(__file__).resolve().parents[3]
PREFILL = get_path("gdn.prefill")
SMOKE = PATH.shapes("smoke", None)
# Tensor-core variants at smoke shapes in the simulator (exact MMA sums):
# held 50x under the declared tolerance, as gdn.prefill's are (test_gdn.py).
TC_SMOKE_TOL = Tolerance(rel=1e-5, abs_of_max=1e-5)


def _shape(lens, **dims) -> Shape:
    d = ms_spec.stream_dims(lens, **dims)
    return Shape(f"t{d['t']} ({'+'.join(map(str, lens))}) c{d['chunk']} hk{d['hk']} hv{d['hv']}", d)


# Beyond the smoke shapes: every stream a whole number of chunks (a boundary
# at each stream's end), three one-token streams, mixed head dims.
EXTRA = [
    _shape((8, 1, 16), chunk=8, hk=1, hv=2, dk=8, dv=8, fla_head_dim=8),
    _shape((1, 1, 1), chunk=4, hk=2, hv=2, dk=8, dv=8, fla_head_dim=8),
    _shape((6, 11), chunk=4, hk=1, hv=3, dk=12, dv=8),
]


def compare(got, ref, tol: Tolerance) -> tuple[bool, float, float]:
    """Test-local check: finite, relative L2 and max-abs error within ``tol``."""
    got, ref = np.asarray(got, np.float64), np.asarray(ref, np.float64)
    assert got.shape == ref.shape
    if not np.all(np.isfinite(got)):
        return False, np.inf, np.inf
    diff = got - ref
    rel = float(np.linalg.norm(diff) / np.linalg.norm(ref))
    mx = float(np.max(np.abs(diff)))
    return rel <= tol.rel and mx <= tol.abs_bound(ref), rel, mx


def run(shape: Shape, inputs: dict, launch) -> dict:
    """Upload, poison ``o`` with NaN, launch once, read ``o`` and the states back."""
    from numba import cuda

    bufs = {n: cuda.to_device(np.ascontiguousarray(a)) for n, a in inputs.items()}
    bufs["o"] = cuda.to_device(np.full(PATH.outputs(shape)["o"][0], np.nan, np.float32))
    launch(bufs)
    cuda.synchronize()
    return {n: bufs[n].copy_to_host() for n in ("o", "state")}


def inputs(shape, seed=0) -> dict:
    return PATH.make_inputs(shape, np.random.default_rng(seed))


# ------------------------------------------------------------------ choice

# At the model's head dims (128) and around them, and smoke shapes with and
# without their lowered head dim.
SELECT_SHAPES = [
    *PATH.shapes("model", None),
    *SMOKE,
    _shape((3, 5), chunk=8, hk=2, hv=4, dk=8, dv=8),  # no fla_head_dim: 128 asked for
    _shape((3, 5), chunk=64, hk=16, hv=32, dk=64, dv=128),
    _shape((3, 5), chunk=64, hk=16, hv=32, dk=128, dv=64),
    _shape((7,), chunk=64, hk=16, hv=32, dk=128, dv=128),  # one stream
]


@pytest.mark.parametrize("shape", SELECT_SHAPES, ids=lambda s: s.label)
def test_select_for_every_lever_value(shape):
    d128 = shape["dk"] == shape["dv"] == shape.get("fla_head_dim", 128)
    for value in (True, False, None):
        c = PATH.select({"gdn_batched_fla": value}, shape)
        if value:
            want = ("batched", "") if d128 else ("per_stream", "gdn_batched_fla on but not taken")
        else:  # off, or unset: Metrale's default is off
            want = ("per_stream", "gdn_batched_fla off: one prefill launch per stream")
        assert c.variant == want[0] and c.note.startswith(want[1]), (value, c)
        if value and not d128:
            assert f"dk == dv == {shape.get('fla_head_dim', 128)}" in c.note
            assert f"dk={shape['dk']}, dv={shape['dv']}" in c.note
    assert PATH.select({}, shape) == PATH.select({"gdn_batched_fla": False}, shape)


def test_the_path_is_metrales_and_atlas_keeps_its_decode_lever():
    m, a = load_catalog("metrale"), load_catalog("atlas")
    assert PATH.engines == ("metrale",) and PATH.levers == ("gdn_batched_fla",)
    assert applies(PATH, "metrale", m.fields) and not applies(PATH, "atlas", a.fields)
    assert list(m.lever("gdn_batched_fla").steers) == ["gdn.prefill_multi_stream"]
    assert "gdn.decode" in a.lever("gdn_batched_fla").steers
    assert applies(get_path("gdn.decode"), "atlas", a.fields)
    assert not applies(get_path("gdn.decode"), "metrale", m.fields)


# ------------------------------------------------------------------ shapes


def test_smoke_shapes_are_odd_where_the_issue_asks():
    lens = [ms_spec.stream_lengths(s) for s in SMOKE]
    flat = [n for ls in lens for n in ls]
    assert 1 in flat  # a one-token stream
    assert any(1 < n < s["chunk"] for s in SMOKE for n in ms_spec.stream_lengths(s))  # shorter than a chunk
    assert any(n > s["chunk"] for s in SMOKE for n in ms_spec.stream_lengths(s))  # a boundary inside a stream
    assert any(o % s["chunk"] for s in SMOKE for o in ms_spec.offsets(s)[1:-1])  # starts off the chunk grid
    for s in SMOKE:
        assert s["t"] == sum(ms_spec.stream_lengths(s)) and s["s"] == len(ms_spec.stream_lengths(s)) > 1
        assert s["dk"] == s["dv"] == s["fla_head_dim"]
    assert any(s["hk"] == s["hv"] for s in SMOKE) and any(s["hv"] == 2 * s["hk"] for s in SMOKE)
    assert len({s.label for s in SMOKE}) == len(SMOKE)


def test_model_shapes_come_from_the_recipes_prefill_streams():
    for name in ("qwen3-next-80b-a3b-metrale.toml", "qwen3-next-80b-a3b.toml"):
        model = tomllib.loads((ROOT / "recipes" / name).read_text())["model"]
        got = PATH.shapes("model", model)
        assert [ms_spec.stream_lengths(s) for s in got] == model["bench"]["prefill_streams"]
        assert [s.dims for s in got] == [s.dims for s in PATH.shapes("model", None)]  # the fallback agrees
    for s in PATH.shapes("model", None):
        assert (s["hk"], s["hv"], s["dk"], s["dv"], s["chunk"]) == (16, 32, 128, 128, 64)
        assert "fla_head_dim" not in s.dims
    (s,) = PATH.shapes("model", {"gdn": {"chunk": 32}, "bench": {"prefill_streams": [[100, 3]]}})
    assert (s["s"], s["l0"], s["l1"], s["t"], s["chunk"]) == (2, 100, 3, 103, 32)
    with pytest.raises(ValueError):
        PATH.shapes("huge", None)


def test_axis_refinement_keeps_the_total_the_sum_of_the_streams():
    base = SMOKE[0]  # 1 + 5 + 19
    (longer,) = refine(PATH, [base], (("l1", (9,)),))
    assert ms_spec.stream_lengths(longer) == [1, 9, 19] and longer["t"] == 29
    more, fewer = refine(PATH, [base], (("s", (5, 2)),))
    assert ms_spec.stream_lengths(more) == [1, 5, 19, 1, 5] and more["t"] == 31
    assert ms_spec.stream_lengths(fewer) == [1, 5] and fewer["t"] == 6 and "l2" not in fewer.dims


def test_inputs_give_each_stream_its_offsets_and_its_own_state():
    s = SMOKE[0]
    x = inputs(s, 3)
    assert x["offsets"].dtype == np.int32 and x["offsets"].tolist() == [0, 1, 6, 25]
    assert x["state"].shape == (3, 4, 8, 8) and x["state"].dtype == np.float32
    assert not np.array_equal(x["state"][0], x["state"][1])
    assert x["q"].shape == (25, 2, 8) and x["v"].shape == (25, 4, 8) and x["g"].shape == (25, 4)
    assert np.all(x["g"] < 0) and np.all((x["beta"] > 0) & (x["beta"] < 1))
    y = inputs(s, 3)
    assert all(np.array_equal(x[n], y[n]) for n in x)


# ------------------------------------------------------------------ reference


def test_the_reference_is_the_recurrence_per_stream_not_over_the_concatenation():
    s = SMOKE[0]
    x = inputs(s, 1)
    ref = PATH.reference(s, x)
    off = x["offsets"]
    for i in range(s["s"]):
        r = slice(off[i], off[i + 1])
        o, st = naive.naive_chunked(x["q"][r], x["k"][r], x["v"][r], x["g"][r], x["beta"][r], x["state"][i], 8)
        np.testing.assert_allclose(ref["o"][r], o, rtol=1e-9, atol=1e-12)
        np.testing.assert_allclose(ref["state"][i], st, rtol=1e-9, atol=1e-12)
    # one sequence over all the tokens (stream 0's state carried on) is another answer
    o_all, _ = naive.naive_recurrent(x["q"], x["k"], x["v"], x["g"], x["beta"], x["state"][0])
    assert not compare(o_all, ref["o"], PATH.tolerance)[0]


def test_a_leaked_stream_fails_the_check_at_the_models_head_dims():
    """Qwen3-Next's heads (16 q/k over 32 value heads, d = 128) and short
    streams (the simulator cannot run a kernel there): outputs where one
    stream started from the state its predecessor ended with, instead of
    its own, fail the bench's check (diluted over every other stream's
    tokens, the norm-wise bound alone might not); the reference itself
    passes."""
    from leverctl.bench import check as chk

    (s,) = PATH.shapes("model", {"bench": {"prefill_streams": [[40, 17, 1]]}})
    x = inputs(s, 5)
    ref = PATH.reference(s, x)
    f32 = {n: ref[n].astype(np.float32) for n in ("o", "state")}
    assert chk.compare(f32, ref, PATH.tolerance).passed
    off = x["offsets"]
    for i in (1, 2):  # the 17-token stream, the one-token stream
        leaked = {**x, "state": x["state"].copy()}
        leaked["state"][i] = ref["state"][i - 1]
        bad = PATH.reference(s, leaked)
        o = ref["o"].copy()
        o[off[i] : off[i + 1]] = bad["o"][off[i] : off[i + 1]]
        st = ref["state"].copy()
        st[i] = bad["state"][i]
        assert not chk.compare({**f32, "o": o.astype(np.float32)}, ref, PATH.tolerance).passed, i
        assert not chk.compare({**f32, "state": st.astype(np.float32)}, ref, PATH.tolerance).passed, i


# ------------------------------------------------------------------ traffic


def test_traffic_is_gdn_prefills_per_stream_and_per_stream_launches_once_a_stream():
    for s in [*PATH.shapes("model", None), *SMOKE]:
        lens = ms_spec.stream_lengths(s)
        assert PATH.variant_launches("batched", s) == 1
        assert PATH.variant_launches("per_stream", s) == len(lens)
        assert PATH.launches_vary(s)
        got = PATH.traffic(s)
        per = [PREFILL.traffic(Shape("one", {**s.dims, "t": n})) for n in lens]
        assert got.bytes_read == sum(p.bytes_read for p in per) + 4 * (len(lens) + 1)
        assert got.bytes_written == sum(p.bytes_written for p in per)
        assert got.flops == sum(p.flops for p in per) and got.tc_flops == sum(p.tc_flops for p in per)
        assert PATH.variant_traffic("per_stream", s) == PATH.variant_traffic("batched", s) == got
    # ragged streams each restart their chunks: more chunk FLOPs than one 4095-token sequence
    ragged = PATH.shapes("model", None)[1]
    one = PREFILL.traffic(Shape("one", {**ragged.dims, "t": ragged["t"]}))
    assert PATH.traffic(ragged).flops != one.flops


def test_the_variants_say_they_run_on_mma_sync_with_fp16_inputs():
    for name, v in PATH.variants.items():
        assert (v.tensor_cores, v.tc_dtype) == ("mma.sync", "f16"), name
    launch = PATH.variants["batched"].build(SMOKE[0])
    assert (launch.tensor_cores, launch.tc_dtype) == ("mma.sync", "f16")
    grid, nt = batched.launch_config(SMOKE[0])
    assert (grid, nt) == (3 * 4 * 2, 32)  # S x Hv x dv/BV blocks of one warp


# ------------------------------------------------------------------ kernels


def _cases():
    return [pytest.param(v, s, id=f"{v}-{s.label}") for s in [*SMOKE, *EXTRA] for v in PATH.variants]


@pytest.mark.sim
@pytest.mark.parametrize("variant,shape", _cases())
def test_each_variant_matches_the_reference_per_stream(variant, shape):
    x = inputs(shape)
    got = run(shape, x, PATH.variants[variant].build(shape))
    ref = PATH.reference(shape, x)
    for name in ("o", "state"):
        for tol in (PATH.variant_tolerance(variant), TC_SMOKE_TOL):
            ok, rel, mx = compare(got[name], ref[name], tol)
            assert ok, f"{variant} {shape.label}: {name} rel={rel:.3g} max_abs={mx:.3g} (tol {tol})"


@pytest.mark.sim
def test_batched_per_stream_and_gdn_prefill_alone_give_the_same_bits():
    """The batched kernel is gdn.prefill's block program with the stream in
    the grid: each stream's outputs and state are what gdn.prefill's
    register-resident kernel makes on that stream alone, bit for bit (the
    simulator runs the same arithmetic in the same order)."""
    shape = SMOKE[0]
    x = inputs(shape, 4)
    a = run(shape, x, PATH.variants["batched"].build(shape))
    b = run(shape, x, PATH.variants["per_stream"].build(shape))
    for n in ("o", "state"):
        assert np.array_equal(a[n].view(np.uint32), b[n].view(np.uint32)), n
    off = x["offsets"]
    for i in (0, 2):  # the one-token stream and the one with chunk boundaries inside
        r = slice(off[i], off[i + 1])
        one = Shape("alone", {**shape.dims, "t": r.stop - r.start})
        alone = {n: x[n][r] for n in ("q", "k", "v", "g", "beta")}
        alone["state"] = x["state"][i]
        from numba import cuda

        bufs = {n: cuda.to_device(np.ascontiguousarray(v)) for n, v in alone.items()}
        bufs["o"] = cuda.to_device(np.full((one["t"], shape["hv"], shape["dv"]), np.nan, np.float32))
        PREFILL.variants["regresident"].build(one)(bufs)
        assert np.array_equal(bufs["o"].copy_to_host().view(np.uint32), a["o"][r].view(np.uint32))
        assert np.array_equal(bufs["state"].copy_to_host().view(np.uint32), a["state"][i].view(np.uint32))


@pytest.mark.sim
def test_a_kernel_that_carries_one_streams_state_into_the_next_fails_the_paths_check():
    """The broken batched kernel (``leak=True``: the state is not reloaded at
    each stream's offset) fails the bench's own check and this file's; the
    first stream, which nothing precedes, is still right, so the failure is
    the leak's."""
    from numba import cuda

    from leverctl.bench import check as chk

    shape = SMOKE[0]
    x = inputs(shape, 2)
    bad = batched.build_batched(shape, leak=True)
    bufs, fig = chk.check(PATH, "batched", shape, bad, x, cuda)
    assert not fig.passed  # (the sound kernel passes on these shapes: the odd-lengths test)
    got = {n: bufs[n].copy_to_host() for n in ("o", "state")}
    ref = PATH.reference(shape, x)
    tol = PATH.tolerance
    assert not compare(got["o"], ref["o"], tol)[0] and not compare(got["state"], ref["state"], tol)[0]
    off = x["offsets"]
    assert compare(got["o"][: off[1]], ref["o"][: off[1]], tol)[0]
    assert compare(got["state"][0], ref["state"][0], tol)[0]
    for i in (1, 2):
        r = slice(off[i], off[i + 1])
        assert not compare(got["o"][r], ref["o"][r], tol)[0], i
        assert not compare(got["state"][i], ref["state"][i], tol)[0], i


@pytest.mark.sim
@pytest.mark.simulator_only  # bench --device sim
@pytest.mark.parametrize("on,variant", [(False, "per_stream"), (True, "batched")])
def test_bench_checks_the_variant_the_lever_selects(tmp_path, capsys, on, variant):
    from leverctl.cli.app import main

    out = tmp_path / "bench.json"
    argv = ["bench", "-e", "metrale", "--no-env", "--device", "sim", "--shapes", "smoke", "--kernel", PATH.name]
    argv += ["--set", f"METRALE_GDN_BATCHED_FLA={int(on)}", "-o", str(out)]
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 0, capsys.readouterr().err
    recs = json.loads(out.read_text())["results"]
    assert [(r["variant"], r["status"]) for r in recs] == [(variant, "pass")] * len(SMOKE)


# ------------------------------------------------------------------ GPU


@pytest.mark.gpu
@pytest.mark.parametrize("index", [0, 1], ids=["equal-streams", "ragged-streams"])
def test_on_a_gpu_at_qwen3_next_shapes_both_variants_pass_and_agree(index):
    from numba import cuda

    from leverctl.bench import check as chk

    shape = PATH.shapes("model", None)[index]
    x = PATH.make_inputs(shape, np.random.default_rng(1))
    outs = {}
    for name, v in PATH.variants.items():
        bufs, fig = chk.check(PATH, name, shape, v.build(shape), x, cuda)
        assert fig.passed, (name, fig.why())
        outs[name] = {n: bufs[n].copy_to_host() for n in ("o", "state")}
    for n in ("o", "state"):
        ok, rel, mx = compare(outs["batched"][n], outs["per_stream"][n], Tolerance(1e-5, 1e-5))
        assert ok, (n, rel, mx)


@pytest.mark.gpu
def test_on_a_gpu_the_leaking_kernel_fails_at_the_model_shape():
    from numba import cuda

    from leverctl.bench import check as chk

    shape = PATH.shapes("model", None)[1]
    x = PATH.make_inputs(shape, np.random.default_rng(2))
    _, fig = chk.check(PATH, "batched", shape, batched.build_batched(shape, leak=True), x, cuda)
    assert not fig.passed

"""MLA decode in the latent space (``attention.mla_decode``, Metrale's
``mla_perseq_fallback``): the variant the lever selects, the shapes
(DeepSeek-V3's from the recipe's ``[model.mla]``), both variants against
the float64 reference and bit for bit against each other (and each
sequence decoded alone against its row of the batch), and a kernel
that scores the unwritten rows of the tail block, which the checks must
reject.

Simulator tests (``sim``) use the smoke shape: rank 16 + 8 rotary dims, 3
heads, 3 sequences whose lengths end mid-block.
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import numpy as np
import pytest
from attention_checks import compare

from leverctl.bench.plan import applies, build_plan, model_lacks, path_levers
from leverctl.levers import load_catalog
from leverctl.levers.recipes import load_recipe
from leverctl_kernels.attention.dflash_contig.spec import PATH as DFLASH_CONTIG
from leverctl_kernels.attention.mla_decode import _mla
from leverctl_kernels.attention.mla_decode import spec as mla_spec
from leverctl_kernels.attention.mla_decode.spec import PATH
from leverctl_kernels.attention.paged_decode.spec import PATH as PAGED_DECODE
from leverctl_kernels.common.path import Shape

SMOKE = PATH.shapes("smoke", None)
RECIPE = Path(__file__).resolve().parents[3] / "recipes" / "deepseek-v3-metrale.toml"


def run(shape: Shape, inputs: dict, launch) -> np.ndarray:
    from numba import cuda

    bufs = {n: cuda.to_device(np.ascontiguousarray(a)) for n, a in inputs.items()}
    bufs["o"] = cuda.to_device(np.full(PATH.outputs(shape)["o"][0], np.nan, np.float32))
    launch(bufs)
    cuda.synchronize()
    return bufs["o"].copy_to_host()


# ------------------------------------------------------------------ choice


def test_select_for_every_lever_value_on_metrale_and_no_path_on_atlas():
    cat = load_catalog("metrale")
    values = {f: lv.default for f, lv in cat.levers.items()}
    assert cat.lever("mla_perseq_fallback").default is False
    for on, shape in itertools.product((False, True), [*SMOKE, *PATH.shapes("model", None)]):
        got = PATH.select(path_levers(PATH, {**values, "mla_perseq_fallback": on}, cat.fields), shape)
        assert got.variant == ("per_sequence" if on else "batched"), (on, shape.label)
        assert ("one launch per sequence" in got.note) == on
    atlas = load_catalog("atlas")
    assert "mla_perseq_fallback" not in atlas.fields and not applies(PATH, "atlas", atlas.fields)


def test_1_or_true_exactly_selects_the_per_sequence_fallback_and_other_spellings_do_not():
    from leverctl.levers import resolve

    cat = load_catalog("metrale")
    for raw, want in (
        ("1", "per_sequence"),
        ("true", "per_sequence"),
        ("True", "batched"),
        ("TRUE", "batched"),
        ("yes", "batched"),
        (None, "batched"),
    ):
        res = resolve(cat, env={} if raw is None else {"METRALE_MLA_PERSEQ_FALLBACK": raw})
        assert PATH.select(path_levers(PATH, res.values(), cat.fields), SMOKE[0]).variant == want, raw


# ------------------------------------------------------------------ shapes


def test_model_shapes_are_deepseek_v3s_from_the_recipe_or_by_default():
    default = PATH.shapes("model", None)
    recipe = load_recipe(RECIPE).model
    from_recipe = PATH.shapes("model", recipe)
    assert [s.dims for s in default] == [s.dims for s in from_recipe]
    assert {(s["h"], s["r"], s["p"], s["qk_dim"]) for s in default} == {(128, 512, 64, 192)}
    assert [(s["ctx"], s["n"]) for s in default] == list(itertools.product((1024, 8192, 32768), (1, 8, 32)))
    (s,) = SMOKE
    lens = mla_spec.lengths(s)
    assert (s["n"], s["h"], s["r"], s["p"]) == (3, 3, 16, 8) and len(set(lens)) == 3 and all(x % 16 for x in lens)


def test_the_deepseek_recipe_plans_mla_decode_and_neither_gqa_attention_path():
    model = load_recipe(RECIPE).model
    assert model_lacks(PATH, model) == ""
    assert "has no [model.attention]" in model_lacks(PAGED_DECODE, model)
    assert "has no [model.attention]" in model_lacks(DFLASH_CONTIG, model)
    assert "has no [model.mla]" in model_lacks(PATH, {"name": "Qwen3-8B", "hidden": 4096, "attention": {"q_heads": 32}})


def test_the_kernel_fits_deepseek_v3_in_static_shared_memory_with_eight_heads_a_block():
    assert _mla.head_tile(128) == 8 and _mla.shared_bytes(8, 512, 64) <= 48 * 1024


def test_the_variants_make_one_launch_and_one_per_sequence(monkeypatch):
    from numba import cuda
    from numba.cuda.simulator.kernel import FakeCUDAKernel

    if not isinstance(_mla.make_decode(3, 16, 8, 24), FakeCUDAKernel):
        pytest.skip("counts simulator launches")
    (s,) = SMOKE
    x = PATH.make_inputs(s, np.random.default_rng(0))
    bufs = {n: cuda.to_device(a) for n, a in x.items()}
    bufs["o"] = cuda.to_device(np.zeros(PATH.outputs(s)["o"][0], np.float32))
    for name, want in (("batched", 1), ("per_sequence", 3)):
        calls = []
        launch = PATH.variants[name].build(s)
        monkeypatch.setattr(FakeCUDAKernel, "__call__", lambda self, *a, **k: calls.append(self))
        launch(bufs)
        monkeypatch.undo()
        assert len(calls) == PATH.variant_launches(name, s) == want
    assert PATH.variant_traffic("batched", s) == PATH.variant_traffic("per_sequence", s)


# ------------------------------------------------------------ simulator


@pytest.mark.sim
def test_both_variants_match_the_reference_and_give_the_same_bits():
    (s,) = SMOKE
    x = PATH.make_inputs(s, np.random.default_rng(7))
    ref = PATH.reference(s, x)["o"]
    outs = {name: run(s, x, v.build(s)) for name, v in PATH.variants.items()}
    for name, got in outs.items():
        ok, rel, mx = compare(got, ref, PATH.tolerance)
        assert ok, (name, rel, mx)
    assert np.array_equal(outs["per_sequence"].view(np.uint32), outs["batched"].view(np.uint32))


@pytest.mark.sim
def test_a_kernel_scoring_the_unwritten_rows_of_the_tail_block_fails_the_check():
    from numba import cuda

    from leverctl.bench import check as chk

    (s,) = SMOKE
    x = PATH.make_inputs(s, np.random.default_rng(3))
    launch = _mla.launcher(s, per_sequence=False, read_tail=True)
    got = run(s, x, launch)
    assert np.isnan(got).all(axis=(1, 2)).all()  # every sequence's tail block holds NaN rows
    _, fig = chk.check(PATH, "batched", s, launch, x, cuda)
    assert not fig.passed and fig.nonfinite > 0


def test_a_result_with_another_softmax_scale_fails_the_tolerance():
    """The softmax scale is the model's query-key head dim (192 at
    DeepSeek-V3), not the latent row's width (576): a kernel taking the
    other scale is a wrong answer the tolerance must reject."""
    from leverctl_kernels.attention.mla_decode import naive as mla_naive

    (s,) = SMOKE
    x = PATH.make_inputs(s, np.random.default_rng(4))
    ref = PATH.reference(s, x)["o"]
    wrong = mla_naive.naive_mla_decode(x["q_nope"], x["q_pe"], x["c_kv"], x["k_pe"], x["context_lens"], 4 * s["qk_dim"])
    assert not compare(wrong, ref, PATH.tolerance)[0]


def test_deepseek_v3_served_past_its_original_context_scales_the_softmax_by_yarns_mscale_squared():
    """DeepSeek-V3 (YaRN: factor 40, mscale_all_dim 1, original context
    4096) served at its 163840: the scale is (0.1 ln 40 + 1)^2 / sqrt(192);
    a recipe serving within the original context, or a model without YaRN,
    keeps 1 / sqrt(qk_dim)."""
    import math

    (s,) = PATH.shapes("model", load_recipe(RECIPE).model)[:1]
    assert (s["yarn_factor"], s["mscale_all_dim"]) == (40, 1.0)
    assert _mla.mscale2(s) == pytest.approx((0.1 * math.log(40) + 1) ** 2) and 1.87 < _mla.mscale2(s) < 1.88
    served_short = {**load_recipe(RECIPE).model["mla"], "served_context": 4096}
    (t,) = PATH.shapes("model", {**load_recipe(RECIPE).model, "mla": served_short})[:1]
    assert t["yarn_factor"] == 0 and _mla.mscale2(t) == 1.0
    (u,) = PATH.shapes("model", {"mla": {"q_heads": 16}})[:1]
    assert _mla.mscale2(u) == 1.0  # a model that declares no rope scaling
    assert _mla.mscale2(SMOKE[0]) == 1.0


@pytest.mark.sim
def test_the_kernel_applies_the_yarn_scale_and_a_plain_scale_fails_there():
    """At a smoke shape carrying DeepSeek-V3's YaRN factor, the kernel
    matches the reference (both with mscale^2); the plain 1/sqrt(qk_dim)
    result is a wrong answer the tolerance rejects."""
    from leverctl_kernels.attention.mla_decode import naive as mla_naive

    s = Shape("yarn", {**SMOKE[0].dims, "yarn_factor": 40, "mscale_all_dim": 1.0})
    x = PATH.make_inputs(s, np.random.default_rng(6))
    ref = PATH.reference(s, x)["o"]
    got = run(s, x, PATH.variants["batched"].build(s))
    assert compare(got, ref, PATH.tolerance)[0]
    plain = mla_naive.naive_mla_decode(x["q_nope"], x["q_pe"], x["c_kv"], x["k_pe"], x["context_lens"], s["qk_dim"])
    assert not compare(plain, ref, PATH.tolerance)[0]


@pytest.mark.sim
@pytest.mark.simulator_only  # bench --device sim
def test_bench_checks_the_per_sequence_fallback_the_lever_selects(tmp_path, capsys):
    from leverctl.cli.app import main

    out = tmp_path / "bench.json"
    with pytest.raises(SystemExit) as e:
        main(
            [
                "bench",
                "-e",
                "metrale",
                "--no-env",
                "--device",
                "sim",
                "--shapes",
                "smoke",
                "--kernel",
                PATH.name,
                "--set",
                "METRALE_MLA_PERSEQ_FALLBACK=true",
                "-o",
                str(out),
            ]
        )
    assert e.value.code == 0, capsys.readouterr().err
    (rec,) = json.loads(out.read_text())["results"]
    assert (rec["variant"], rec["status"]) == ("per_sequence", "pass")
    assert rec["batch_invariance"] == {
        "identical": True,
        "required": True,
        "sequences": 3,
        "differing": 0,
        "max_abs_diff": 0.0,
    }


@pytest.mark.sim
def test_the_invariance_check_fails_a_launch_whose_bits_depend_on_the_batch():
    """The batched kernel, its output nudged by one ulp whenever it decodes a
    lone sequence: within every tolerance, and not the batched bits."""
    from numba import cuda

    (s,) = SMOKE
    x = PATH.make_inputs(s, np.random.default_rng(5))
    real = PATH.variants["batched"].build(s)

    def nudged(b):
        real(b)
        if b["q_nope"].shape[0] == 1:
            o = b["o"].copy_to_host()
            b["o"].copy_to_device(np.nextafter(o, np.float32(np.inf)))

    bufs = {n: cuda.to_device(a) for n, a in x.items()}
    bufs["o"] = cuda.to_device(np.full(PATH.outputs(s)["o"][0], np.nan, np.float32))
    real(bufs)
    assert mla_spec.batch_invariance("batched", s, real, bufs, cuda)["identical"]
    got = mla_spec.batch_invariance("batched", s, nudged, bufs, cuda)
    assert (got["identical"], got["required"], got["differing"]) == (False, True, 3)
    assert 0 < got["max_abs_diff"] < 1e-6


# ------------------------------------------------------------------ GPU


@pytest.mark.gpu
@pytest.mark.parametrize("ctx,n", [(8192, 8), (32768, 1)])
def test_on_a_gpu_at_deepseek_v3_shapes_both_variants_pass_with_the_same_bits(ctx, n):
    from numba import cuda

    from leverctl.bench import check as chk

    shape = next(s for s in PATH.shapes("model", None) if s["ctx"] == ctx and s["n"] == n)
    x = PATH.make_inputs(shape, np.random.default_rng(1))
    outs = {}
    for name, v in PATH.variants.items():
        bufs, fig = chk.check(PATH, name, shape, v.build(shape), x, cuda)
        assert fig.passed, (name, fig.why())
        outs[name] = bufs["o"].copy_to_host()
    assert np.array_equal(outs["per_sequence"].view(np.uint32), outs["batched"].view(np.uint32))


@pytest.mark.sim
@pytest.mark.parametrize(
    "r,p,how",
    [(48, 16, "4x8-chunk warps"), (16, 8, "row-major chunks"), (13, 6, "bf16 pairs, odd row")],
    ids=lambda v: str(v),
)
def test_the_kv_tile_staged_wide_or_in_pairs_matches_the_reference_and_a_tail_read_fails(r, p, how):
    """The KV tile at each of its stagings: 16-byte loads with a warp on 4
    tokens x 8 chunks (rows of whole groups of 8 chunks, as DeepSeek-V3's
    576 dims), 16-byte loads along a row (the smoke shape's 24 dims), and a
    pair of bf16 a lane (dims not whole chunks, an odd row of 19)."""
    s = Shape(f"r{r} p{p}", {**SMOKE[0].dims, "r": r, "p": p, "qk_dim": r + p})
    x = PATH.make_inputs(s, np.random.default_rng(r))
    ref = PATH.reference(s, x)["o"]
    ok, rel, mx = compare(run(s, x, PATH.variants["batched"].build(s)), ref, PATH.tolerance)
    assert ok, (how, rel, mx)
    bad = run(s, x, _mla.launcher(s, per_sequence=False, read_tail=True))
    assert np.isnan(bad).all(axis=(1, 2)).all(), how


def test_the_profile_shape_keeps_the_models_cache_rows_and_one_head_tile():
    for s in PATH.shapes("model", None):
        ps = PATH.extra["profile_shape"](s)
        assert (ps["r"], ps["p"], ps["qk_dim"], ps["yarn_factor"]) == (s["r"], s["p"], s["qk_dim"], s["yarn_factor"])
        assert (ps["n"], ps["ctx"], ps["h"]) == (1, 33, _mla.MAX_HEAD_TILE)
        assert _mla.head_tile(ps["h"]) == _mla.head_tile(s["h"])  # the model's block shape


def _traced_cache_loads(shape):
    """(used bytes of the latent and rotary rows read by 16-byte loads, used
    bytes read by narrower loads, the trace) of ``batched`` at ``shape``."""
    from leverctl.profile import memtrace as mt

    prof = mt.profile_variant(PATH, "batched", shape)
    loads = [r for r in prof.sites if r.space == mt.GLOBAL and r.kind == "load"]
    wide = sum(r.used_bytes for r in loads if r.bytes == 16 * r.accesses)
    return wide, sum(r.used_bytes for r in loads) - wide, prof


@pytest.mark.sim
def test_at_the_profile_shape_the_cache_rows_come_in_16_byte_loads_and_whole_sectors():
    """DeepSeek-V3's 576-dim rows, one head tile, 30 tokens (7 s in the
    simulator): every byte of the latent and rotary rows comes by a 16-byte
    load, and so do the head tile's q rows (once a block): >= 90 % of the
    loaded bytes (98 % measured; 80 % while q came a bf16 a lane, the length
    being the one narrow load left), and the global sectors are >= 90 % used
    (99.4 % measured)."""
    shape = PATH.extra["profile_shape"](PATH.shapes("model", None)[0])
    r, p, h = shape["r"], shape["p"], shape["h"]
    wide, narrow, prof = _traced_cache_loads(shape)
    assert wide >= sum(mla_spec.lengths(shape)) * (r + p) * 2, (wide, narrow)
    assert narrow <= 64, (wide, narrow)  # the length once a warp
    assert wide >= sum(mla_spec.lengths(shape)) * (r + p) * 2 + h * (r + p) * 2, (wide, narrow)  # and q
    assert prof.sector_efficiency >= 0.9 and prof.wide_load_share >= 0.9, (
        prof.sector_efficiency,
        prof.wide_load_share,
    )


@pytest.mark.sim
def test_a_cache_view_off_16_bytes_takes_the_pairs_and_fails_the_load_width_check(monkeypatch):
    """The same figures fail where the staging takes its bf16 pairs (a cache
    not on 16 bytes): no byte of the rows comes by a 16-byte load. Fewer
    dims and tokens keep it quick."""
    monkeypatch.setattr(_mla.vload, "aligned16", lambda a: False)
    base = PATH.extra["profile_shape"](PATH.shapes("model", None)[0])
    shape = Shape("pairs", {**base.dims, "r": 64, "p": 16, "ctx": 17, "h": 2})
    wide, narrow, _ = _traced_cache_loads(shape)
    assert wide == 0 and narrow >= sum(mla_spec.lengths(shape)) * 80 * 2, (wide, narrow)


@pytest.mark.sim
def test_a_second_head_tile_of_two_heads_staged_16_bytes_a_lane_matches_the_reference():
    """Ten heads (tiles of 8 and of 2) over rows of 32 + 8 dims: the q rows
    come 16 bytes a lane, the latent ones 8 heads x 4 chunks a warp, and
    the second tile's six rows past the head count are zeros, not loads."""
    s = Shape("tiles", {**SMOKE[0].dims, "n": 2, "ctx": 21, "h": 10, "r": 32, "p": 8})
    x = PATH.make_inputs(s, np.random.default_rng(10))
    ok, rel, mx = compare(run(s, x, PATH.variants["batched"].build(s)), PATH.reference(s, x)["o"], PATH.tolerance)
    assert ok, (rel, mx)

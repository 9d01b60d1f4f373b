"""The DFlash draft block's attention (``attention.dflash_contig``): the
variant each engine's lever selects, the shapes, the two KV layouts holding
the same tokens, the traffic the contiguous layout saves, both variants
against the float64 reference and against each other, and a kernel that
lets the block see its own future tokens, which the checks must reject.

Simulator tests (``sim``) use the smoke shapes: head dims 8 and 12, two
sequences whose lengths end mid-block, draft blocks of 4 and 3 tokens.
"""

from __future__ import annotations

import itertools
import json

import numpy as np
import pytest
from attention_checks import compare

from leverctl.bench.plan import build_plan, path_levers
from leverctl.levers import load_catalog
from leverctl_kernels.attention import naive
from leverctl_kernels.attention.dflash_contig import _dflash
from leverctl_kernels.attention.dflash_contig import naive as dflash_naive
from leverctl_kernels.attention.dflash_contig import spec as dflash_spec
from leverctl_kernels.attention.dflash_contig.spec import PATH
from leverctl_kernels.common.path import Shape, Tolerance
from leverctl_kernels.selection.attention import DFLASH_CONTIG as TABLE

SMOKE = PATH.shapes("smoke", None)


def run(shape: Shape, inputs: dict, launch) -> np.ndarray:
    """Upload, poison the output and the partials, launch once, read o back."""
    from numba import cuda

    bufs = {n: cuda.to_device(np.ascontiguousarray(a)) for n, a in inputs.items()}
    bufs["o"] = cuda.to_device(np.full(PATH.outputs(shape)["o"][0], np.nan, np.float32))
    for scratch in launch.workspace.values():
        scratch.copy_to_device(np.full(scratch.shape, np.nan, scratch.dtype))
    launch(bufs)
    cuda.synchronize()
    return bufs["o"].copy_to_host()


# ------------------------------------------------------------------ choice


@pytest.mark.parametrize("engine", ["atlas", "metrale"])
def test_select_for_every_lever_combination_of_both_engines(engine):
    cat = load_catalog(engine)
    values = {f: lv.default for f, lv in cat.levers.items()}
    assert cat.lever("dflash_contig_attn").default is False
    for on, shape in itertools.product((False, True), [*SMOKE, *PATH.shapes("model", None)]):
        levers = path_levers(PATH, {**values, "dflash_contig_attn": on}, cat.fields)
        assert PATH.select(levers, shape).variant == ("contig" if on else "paged"), (engine, on, shape.label)
    plan = build_plan([PATH], engine=engine, catalog_fields=cat.fields, values={**values, "dflash_contig_attn": True})
    assert {i.variant for i in plan.items} == {"contig"} and not any(i.baseline for i in plan.items)


@pytest.mark.parametrize(
    "engine,var", [("atlas", "ATLAS_DFLASH_CONTIG_ATTN"), ("metrale", "METRALE_DFLASH_CONTIG_ATTN")]
)
def test_only_the_exact_string_1_in_the_engines_variable_selects_the_contiguous_path(engine, var):
    from leverctl.levers import resolve

    cat = load_catalog(engine)
    for raw, want in (("1", "contig"), ("true", "paged"), (" 1", "paged"), ("0", "paged"), (None, "paged")):
        res = resolve(cat, env={} if raw is None else {var: raw})
        levers = path_levers(PATH, res.values(), cat.fields)
        assert PATH.select(levers, SMOKE[0]).variant == want, (engine, raw)


# ------------------------------------------------------------------ shapes


def test_model_shapes_read_the_recipe_and_fall_back_to_qwen3_next_with_a_16_token_block():
    shapes = PATH.shapes("model", None)
    assert [s["ctx"] for s in shapes] == [1024, 8192, 32768]
    assert {(s["n"], s["t"], s["hq"], s["hkv"], s["d"]) for s in shapes} == {(1, 16, 16, 2, 256)}
    llama = PATH.shapes(
        "model",
        {
            "attention": {"q_heads": 32, "kv_heads": 8, "head_dim": 128},
            "bench": {"decode_contexts": [2048], "draft_block": 8},
        },
    )
    assert [(s["hq"], s["hkv"], s["d"], s["t"], s["ctx"]) for s in llama] == [(32, 8, 128, 8, 2048)]
    for s in SMOKE:
        lens = dflash_spec.lengths(s)
        assert s["d"] in (8, 12) and len(set(lens)) == s["n"] and all(x % 16 for x in lens)
        assert all(x > s["t"] for x in lens)


def test_the_two_layouts_hold_the_same_tokens_and_nan_where_nothing_was_written():
    for s in SMOKE:
        x = PATH.make_inputs(s, np.random.default_rng(1))
        for i, length in enumerate(x["context_lens"]):
            for paged, contig in (("k_cache", "k_contig"), ("v_cache", "v_contig")):
                nb = -(-int(length) // 16)
                whole = x[paged][x["block_table"][i, :nb]].reshape(-1, s["hkv"], s["d"])
                assert np.array_equal(whole[:length], x[contig][i, :length])
                assert (whole[length:] == dflash_spec.NAN_BITS).all()
                assert (x[contig][i, length:] == dflash_spec.NAN_BITS).all()


def test_the_reference_is_causal_within_the_block_and_its_last_query_is_the_paged_decode():
    """Query t sees L - T + t + 1 tokens: the last query is an ordinary
    decode step (naive_paged_decode); every earlier one changes when a later
    token of the block is hidden from the reference but not from it."""
    s = SMOKE[0]
    x = PATH.make_inputs(s, np.random.default_rng(2))
    o = PATH.reference(s, x)["o"]
    last = naive.naive_paged_decode(x["q"][:, -1], x["k_cache"], x["v_cache"], x["block_table"], x["context_lens"])
    assert np.allclose(o[:, -1], last, rtol=0, atol=1e-12)
    shorter = dflash_naive.naive_dflash_block(
        x["q"][:, :-1], x["k_cache"], x["v_cache"], x["block_table"], x["context_lens"] - 1
    )
    assert np.allclose(o[:, :-1], shorter, rtol=0, atol=1e-12)  # the block's last token is in no earlier view


def test_the_contiguous_variant_reads_less_by_exactly_the_block_table_entries():
    for s in [*SMOKE, *PATH.shapes("model", None)]:
        paged, contig = (PATH.variant_traffic(v, s) for v in ("paged", "contig"))
        table = sum(-(-x // 16) for x in dflash_spec.lengths(s)) * 4
        assert paged.bytes_read - contig.bytes_read == table
        assert (paged.bytes_written, paged.flops) == (contig.bytes_written, contig.flops)
    model = PATH.shapes("model", None)[-1]  # 32K tokens: 2048 table entries beside 64 MiB of KV
    assert PATH.variant_traffic("paged", model).bytes_read - PATH.variant_traffic("contig", model).bytes_read == 8192


def test_every_smoke_shape_splits_and_some_split_lies_past_what_a_query_sees():
    s = SMOKE[0]
    splits = dflash_spec.splits_of(s)
    assert min(splits) >= 2
    length = dflash_spec.lengths(s)[0]
    _, per = _dflash.num_splits(length, _dflash.ref_seqs(s), s["hkv"], s["target_ctas"], s["min_split_blocks"])
    first_seen = length - s["t"] + 1
    assert (splits[0] - 1) * per * 16 >= first_seen  # query 0's last split is empty: m = -inf, weight 0


def test_each_variant_makes_two_launches_and_declares_its_partials(monkeypatch):
    from numba import cuda
    from numba.cuda.simulator.kernel import FakeCUDAKernel

    if not isinstance(_dflash.make_merge(1, 8, 4, 1), FakeCUDAKernel):
        pytest.skip("counts simulator launches")
    s = SMOKE[1]
    x = PATH.make_inputs(s, np.random.default_rng(0))
    bufs = {n: cuda.to_device(a) for n, a in x.items()}
    bufs["o"] = cuda.to_device(np.zeros(PATH.outputs(s)["o"][0], np.float32))
    for name, v in PATH.variants.items():
        launch = v.build(s)
        calls = []
        monkeypatch.setattr(FakeCUDAKernel, "__call__", lambda self, *a, **k: calls.append(self))
        launch(bufs)
        monkeypatch.undo()
        assert len(calls) == PATH.variant_launches(name, s) == 2, name
        assert set(launch.workspace) == {"part_o", "part_ml"}


# ------------------------------------------------------------ simulator


@pytest.mark.sim
def test_both_variants_match_the_reference_and_each_other_bit_for_bit():
    for i, s in enumerate(SMOKE):
        x = PATH.make_inputs(s, np.random.default_rng(7 + i))
        ref = PATH.reference(s, x)["o"]
        outs = {name: run(s, x, v.build(s)) for name, v in PATH.variants.items()}
        for name, got in outs.items():
            ok, rel, mx = compare(got, ref, PATH.tolerance)
            assert ok, (s.label, name, rel, mx)
        # up to rounding, asked of two layouts; in fact the same code, so the same bits
        assert compare(outs["contig"], outs["paged"], Tolerance(rel=1e-6, abs_of_max=1e-6))[0]
        assert np.array_equal(outs["contig"].view(np.uint32), outs["paged"].view(np.uint32)), s.label


@pytest.mark.sim
def test_a_block_that_sees_its_own_future_tokens_fails_the_check():
    """NO_MASK lets every query of the block attend to all of it: finite,
    plausible, and wrong for every query but the last."""
    from numba import cuda

    from leverctl.bench import check as chk

    s = SMOKE[1]
    x = PATH.make_inputs(s, np.random.default_rng(3))
    ref = PATH.reference(s, x)["o"]
    launch = _dflash.launcher(s, paged=False, no_mask=True)
    got = run(s, x, launch)
    assert np.isfinite(got).all()
    assert not compare(got, ref, PATH.tolerance)[0]
    assert compare(got[:, -1], ref[:, -1], PATH.tolerance)[0]  # the last query sees all of it anyway
    _, fig = chk.check(PATH, "contig", s, launch, x, cuda)
    assert not fig.passed


@pytest.mark.sim
@pytest.mark.simulator_only  # bench --device sim
def test_bench_checks_the_contiguous_path_the_lever_selects(tmp_path, capsys):
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
                "METRALE_DFLASH_CONTIG_ATTN=1",
                "-o",
                str(out),
            ]
        )
    assert e.value.code == 0, capsys.readouterr().err
    recs = json.loads(out.read_text())["results"]
    assert [(r["variant"], r["status"]) for r in recs] == [("contig", "pass")] * len(SMOKE)


# ------------------------------------------------------------------ GPU


@pytest.mark.gpu
@pytest.mark.parametrize("ctx", [8192, 32768])
def test_on_a_gpu_at_model_shapes_both_variants_pass_and_agree(ctx):
    """Qwen3-Next's attention, a 16-token draft block: both layouts within
    the tolerance and bit-identical to each other."""
    from numba import cuda

    from leverctl.bench import check as chk

    shape = next(s for s in PATH.shapes("model", None) if s["ctx"] == ctx)
    x = PATH.make_inputs(shape, np.random.default_rng(1))
    outs = {}
    for name, v in PATH.variants.items():
        bufs, fig = chk.check(PATH, name, shape, v.build(shape), x, cuda)
        assert fig.passed, (name, fig.why())
        outs[name] = bufs["o"].copy_to_host()
    assert np.array_equal(outs["contig"].view(np.uint32), outs["paged"].view(np.uint32))


@pytest.mark.sim
def test_both_layouts_staged_in_16_byte_chunks_match_the_reference_at_head_dim_32():
    """Head dim 32: ``_paged.make_kv_stage``'s 8-token x 4-chunk warp order
    (the model head dims' mapping), over a paged and a contiguous cache."""
    s = Shape("d32", {**SMOKE[0].dims, "d": 32})
    x = PATH.make_inputs(s, np.random.default_rng(32))
    ref = PATH.reference(s, x)["o"]
    for name, v in PATH.variants.items():
        ok, rel, mx = compare(run(s, x, v.build(s)), ref, PATH.tolerance)
        assert ok, (name, rel, mx)


def test_the_profile_shape_keeps_the_models_heads_and_split_policy():
    for s in PATH.shapes("model", None):
        ps = PATH.extra["profile_shape"](s)
        keep = ("hq", "hkv", "d", "target_ctas", "min_split_blocks")
        assert {k: ps[k] for k in keep} == {k: s[k] for k in keep}
        assert (ps["n"], ps["ctx"], ps["t"]) == (1, 33, dflash_spec.PROFILE_DRAFT)
        assert dflash_spec.splits_of(ps) == [1]


def _traced_kv(shape, variant="paged"):
    """(used bytes of K and V read by 16-byte loads, the KV staging's loads
    narrower than 16 bytes, the trace) of ``variant`` at ``shape``."""
    from leverctl.profile import memtrace as mt

    prof = mt.profile_variant(PATH, variant, shape)
    loads = [r for r in prof.sites if r.space == mt.GLOBAL and r.kind == "load"]
    stage = [r for r in loads if "attention/_paged.py:" in r.site]  # make_kv_stage
    wide = sum(r.used_bytes for r in stage if r.bytes == 16 * r.accesses)
    return wide, [r for r in stage if r.bytes != 16 * r.accesses], prof


@pytest.mark.sim
def test_at_the_profile_shape_k_and_v_come_in_16_byte_loads_and_the_merge_reads_each_pair_once():
    """Qwen3-Next's heads (16 over 2, d = 256), 30 tokens, 2 draft queries
    (12 s in the simulator): every byte of K and V a query sees comes by a
    16-byte load, and so do the q rows and the merge's partials: >= 90 % of
    the loaded bytes (97.6 % measured; 58 % while q and the partials came an
    element a lane), the global sectors >= 90 % used (98.8 % measured), and
    the merge reads its splits' (m, l) pairs and the length once a block:
    1.42x the declared bytes requested (1.65x while every lane of the merge
    read the length, 2.02x while every lane read every pair; what remains
    over 1x is mostly the split kernel's length, which every lane reads:
    one sector a warp)."""
    shape = PATH.extra["profile_shape"](PATH.shapes("model", None)[0])
    wide, narrow, prof = _traced_kv(shape)
    length, t = dflash_spec.lengths(shape)[0], shape["t"]
    seen = sum(length - t + j + 1 for j in range(t))
    assert not narrow and wide >= 2 * seen * shape["hkv"] * shape["d"] * 2, (wide, narrow)
    assert prof.sector_efficiency >= 0.9 and prof.wide_load_share >= 0.9, (
        prof.sector_efficiency,
        prof.wide_load_share,
    )
    assert prof.requested_vs_declared < 1.5, prof.requested_vs_declared


@pytest.mark.sim
def test_a_kv_cache_off_16_bytes_is_staged_one_bf16_a_lane_and_fails_the_load_width_check(monkeypatch):
    """The same check fails where the staging takes one bf16 a lane (a cache
    view not on 16 bytes). Head dim 64 and one query keep it quick."""
    from leverctl_kernels.attention import _paged

    monkeypatch.setattr(_paged.vload, "aligned16", lambda a: False)
    base = PATH.extra["profile_shape"](PATH.shapes("model", None)[0])
    shape = Shape("narrow", {**base.dims, "d": 64, "t": 1})
    wide, narrow, _ = _traced_kv(shape)
    assert wide == 0 and narrow, (wide, narrow)

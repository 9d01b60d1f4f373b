"""Paged decode attention: variant choice for every lever combination of both
engines, the split policy, every variant against the float64 reference
(with and without poisoned fresh KV slots), batch invariance, and the broken
kernel and baseline that the checks must reject.

Simulator tests (``sim``) use the smoke shapes: head dims 8 and 12, three
sequences whose lengths end mid-block. The comparator here is this file's
own, independent of the bench's checker.
"""

from __future__ import annotations

import itertools
import json

import numpy as np
import pytest
from attention_checks import compare

from leverctl.bench.plan import build_plan, items_for
from leverctl.levers import load_catalog
from leverctl_kernels.attention import _paged, naive
from leverctl_kernels.attention.paged_decode import spec
from leverctl_kernels.attention.paged_decode.spec import PATH
from leverctl_kernels.common.path import Shape
from leverctl_kernels.selection.attention import PAGED_DECODE as TABLE

SMOKE = PATH.shapes("smoke", None)
ATLAS_NAN, METRALE_FF = 0x7FC0, 0xFFFF


def bound(shape: Shape, engine: str = "atlas", *, poison: bool, mds: int = 1) -> Shape:
    return spec.bind({"max_decode_seqs": mds, "kv_poison": poison}, shape, engine)


def run(shape: Shape, inputs: dict, launch) -> np.ndarray:
    """Upload, poison the output and the partials, launch once, read o back."""
    from numba import cuda

    bufs = {n: cuda.to_device(np.ascontiguousarray(a)) for n, a in inputs.items()}
    bufs["o"] = cuda.to_device(np.full((shape["n"], shape["hq"], shape["d"]), np.nan, np.float32))
    for scratch in launch.workspace.values():
        scratch.copy_to_device(np.full(scratch.shape, np.nan, scratch.dtype))
    launch(bufs)
    cuda.synchronize()
    return bufs, bufs["o"].copy_to_host()


# ------------------------------------------------------------------ choice

HC = {0: Shape("hc0", {"hc_mult": 0}), 1: Shape("hc1", {"hc_mult": 1})}


@pytest.mark.parametrize("engine", ["atlas", "metrale"])
def test_select_for_every_lever_combination_of_both_engines(engine):
    cat = load_catalog(engine)
    values = {f: lv.default for f, lv in cat.levers.items()}
    from leverctl.bench.plan import path_levers

    seen = set()
    for hc, mds, poison, hc_mult in itertools.product((False, True), (1, 16), (False, True), (0, 1)):
        levers = path_levers(
            PATH, {**values, "hc_perseq_decode": hc, "max_decode_seqs": mds, "kv_poison": poison}, cat.fields
        )
        got = PATH.select(levers, HC[hc_mult])
        # Metrale decodes one sequence at a time only on a model with
        # hyper-connections; Atlas has no such lever and always batches.
        want = "per_sequence" if engine == "metrale" and hc and hc_mult else "split_pinned"
        assert got.variant == want, (engine, hc, mds, poison, hc_mult)
        if engine == "metrale" and hc and not hc_mult:
            assert "hc_mult = 0" in got.note
        seen.add(got.variant)
    assert seen == ({"split_pinned", "per_sequence"} if engine == "metrale" else {"split_pinned"})


def test_no_lever_selects_the_baseline_and_the_plan_runs_it_beside_the_selected_variant():
    assert PATH.baselines == ("split_live_batch",) and not any(r.variant == "split_live_batch" for r in TABLE.rules)
    cat = load_catalog("metrale")
    values = {f: lv.default for f, lv in cat.levers.items()}
    plan = build_plan(
        [PATH],
        engine="metrale",
        catalog_fields=cat.fields,
        values={**values, "hc_perseq_decode": True, "kv_poison": True, "max_decode_seqs": 8},
    )
    by_shape = {}
    for it in plan.items:
        by_shape.setdefault(it.shape.label, []).append(it)
    for label, its in by_shape.items():
        assert [(i.variant, i.baseline) for i in its][1] == ("split_live_batch", True)
        assert len({i.key for i in its}) == 2  # the baseline has an identity of its own
        assert its[1].config.endswith(",baseline=split_live_batch")
        for i in its:  # both run with the bound levers: Metrale's poison, the pinned count
            assert (i.shape["kv_fill"], i.shape["max_decode_seqs"]) == (METRALE_FF, 8)
    assert [i.variant for i in plan.items if not i.baseline] == ["split_pinned", "per_sequence"]


def test_bind_puts_the_engines_poison_and_the_serve_batch_in_the_dims_and_keeps_the_label():
    s = SMOKE[0]
    for engine, poison, fill in (("atlas", True, ATLAS_NAN), ("metrale", True, METRALE_FF), ("atlas", False, 0)):
        b = spec.bind({"kv_poison": poison, "max_decode_seqs": 4}, s, engine)
        assert (b.label, b["kv_fill"], b["max_decode_seqs"]) == (s.label, fill, 4)
    (it,) = [
        i
        for i in items_for(
            PATH, {"hc_perseq_decode": False, "max_decode_seqs": 2, "kv_poison": True}, [s], engine="metrale"
        )
        if not i.baseline
    ]
    assert it.shape["kv_fill"] == METRALE_FF


# ------------------------------------------------------------ split policy


def test_the_split_count_follows_the_serve_batch_and_the_length_never_the_live_batch():
    ns = _paged.num_splits
    T, M = spec.TARGET_CTAS, spec.MIN_SPLIT_BLOCKS
    # Qwen3-Next (Hkv = 2): 256 / (1 * 2) = 128 splits wanted at max_decode_seqs 1
    assert ns(32765, 1, 2, T, M) == (128, 16)
    assert ns(1021, 1, 2, T, M) == (8, 8)  # 64 blocks, no split under 8 blocks
    assert ns(32765, 32, 2, T, M) == (4, 512)
    assert ns(5, 1, 2, T, M) == (1, 1)
    # every block covered exactly once, no split empty
    for length, ref in itertools.product((1, 15, 16, 17, 100, 1021, 8189, 32765), (1, 3, 8, 32)):
        s, per = ns(length, ref, 2, T, M)
        blocks = -(-length // 16)
        assert s >= 1 and (s - 1) * per < blocks <= s * per
    # the pinned count is one number per length; the live one moves with N
    shape = bound(SMOKE[0], poison=False)
    assert spec.splits_of(shape, 1) == [2, 2, 2] and spec.splits_of(shape, shape["n"]) == [1, 1, 1]


def test_model_shapes_read_the_recipe_and_fall_back_to_qwen3_next():
    shapes = PATH.shapes("model", None)
    assert [(s["ctx"], s["n"]) for s in shapes] == list(itertools.product((1024, 8192, 32768), (1, 8, 32)))
    assert {(s["hq"], s["hkv"], s["d"]) for s in shapes} == {(16, 2, 256)}
    llama = PATH.shapes(
        "model",
        {
            "attention": {"q_heads": 32, "kv_heads": 8, "head_dim": 128},
            "bench": {"decode_batches": [4], "decode_contexts": [2048]},
        },
    )
    assert [(s["hq"], s["hkv"], s["d"], s["n"], s["ctx"]) for s in llama] == [(32, 8, 128, 4, 2048)]
    for s in SMOKE:
        lens = spec.lengths(s)
        assert s["n"] == 3 and s["d"] in (8, 12) and len(set(lens)) == 3
        assert all(x % 16 for x in lens)  # every tail block partly written


def test_traffic_counts_the_tokens_read_and_the_partials_of_each_split_count():
    s = bound(SMOKE[0], poison=False)
    pinned, live = spec.pinned_traffic(s), spec.live_batch_traffic(s)
    kv = 2 * sum(spec.lengths(s)) * s["hkv"] * s["d"] * 2
    assert pinned.bytes_read > kv and pinned.flops == 4 * sum(spec.lengths(s)) * s["hq"] * s["d"]
    assert pinned.bytes_written - live.bytes_written == 3 * s["hq"] * (s["d"] + 2) * 4  # 6 splits vs 3


def test_the_launches_and_workspace_each_variant_declares(monkeypatch):
    from numba import cuda
    from numba.cuda.simulator.kernel import FakeCUDAKernel

    if not isinstance(_paged.make_merge(1, 8, 4, 1), FakeCUDAKernel):
        pytest.skip("counts simulator launches")
    for s in SMOKE:
        s = bound(s, poison=False)
        x = PATH.make_inputs(s, np.random.default_rng(0))
        bufs = {n: cuda.to_device(a) for n, a in x.items()}
        bufs["o"] = cuda.to_device(np.zeros((s["n"], s["hq"], s["d"]), np.float32))
        for name, v in PATH.variants.items():
            launch = v.build(s)
            calls = []
            monkeypatch.setattr(FakeCUDAKernel, "__call__", lambda self, *a, **k: calls.append(self))
            launch(bufs)
            monkeypatch.undo()
            assert len(calls) == PATH.variant_launches(name, s), name
            assert set(launch.workspace) == {"part_o", "part_ml"}


# ------------------------------------------------------------ simulator


@pytest.mark.sim
@pytest.mark.parametrize("variant", list(PATH.variants))
@pytest.mark.parametrize("which", [0, 1], ids=["atlas-nan", "metrale-ff"])
def test_every_variant_matches_the_reference_over_poisoned_tail_blocks(variant, which):
    shape = bound(SMOKE[which], ("atlas", "metrale")[which], poison=True)
    x = PATH.make_inputs(shape, np.random.default_rng(7))
    assert np.isnan(naive.gather(x["k_cache"], x["block_table"][0], 16 * -(-int(x["context_lens"][0]) // 16))).any()
    _, got = run(shape, x, PATH.variants[variant].build(shape))
    ok, rel, mx = compare(got, PATH.reference(shape, x)["o"], PATH.tolerance)
    assert ok, (rel, mx)


@pytest.mark.sim
def test_pinned_variants_are_batch_invariant_and_the_live_batch_baseline_is_not():
    from numba import cuda

    shape = bound(SMOKE[0], poison=False)
    x = PATH.make_inputs(shape, np.random.default_rng(11))
    outs, figs = {}, {}
    for name, v in PATH.variants.items():
        launch = v.build(shape)
        bufs, outs[name] = run(shape, x, launch)
        figs[name] = spec.batch_invariance(name, shape, launch, bufs, cuda)
        assert compare(outs[name], PATH.reference(shape, x)["o"], PATH.tolerance)[0], name
    for name in ("split_pinned", "per_sequence"):
        assert figs[name] == {"identical": True, "required": True, "sequences": 3, "differing": 0, "max_abs_diff": 0.0}
    base = figs["split_live_batch"]
    assert not base["identical"] and not base["required"] and base["differing"] >= 1
    assert 0 < base["max_abs_diff"] < 1e-5  # a different rounding, not a wrong answer
    # one launch per sequence or one for the batch: the same bits
    assert np.array_equal(outs["per_sequence"].view(np.uint32), outs["split_pinned"].view(np.uint32))


@pytest.mark.sim
def test_a_kernel_reading_the_whole_tail_block_passes_unnoticed_on_zeros_and_fails_under_poison():
    """READ_TAIL loads every slot of the tail block and relies on p = 0 for
    the unwritten ones: exact while they hold zeros, NaN once poisoned."""
    from numba import cuda

    for poison in (False, True):
        shape = bound(SMOKE[0], poison=poison)
        x = PATH.make_inputs(shape, np.random.default_rng(3))
        launch = _paged.launcher(shape, lambda n: 1, read_tail=True)
        _, got = run(shape, x, launch)
        ok, rel, _ = compare(got, PATH.reference(shape, x)["o"], PATH.tolerance)
        if poison:
            assert not ok and np.isnan(got).any()
        else:
            assert ok, rel
    # the bench's own check rejects it too, as NaN outputs
    from leverctl.bench import check as chk

    _, fig = chk.check(PATH, "split_pinned", shape, launch, x, cuda)
    assert not fig.passed and fig.nonfinite > 0


@pytest.mark.sim
@pytest.mark.simulator_only  # bench --device sim
def test_bench_checks_every_attention_configuration_and_flags_the_baseline(tmp_path, capsys):
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
                "attention.paged_decode",
                "--set",
                "METRALE_HC_PERSEQ_DECODE=1",
                "--set",
                "METRALE_KV_POISON=1",
                "--max-batch-size",
                "2",
                "-o",
                str(out),
            ]
        )
    assert e.value.code == 0, capsys.readouterr().err
    recs = json.loads(out.read_text())["results"]
    got = {(r["variant"], r["shape"]["label"]): r for r in recs}
    assert [k[0] for k in got] == ["split_pinned", "split_live_batch", "per_sequence", "split_live_batch"]
    assert all(
        r["status"] == "pass" and r["shape"]["kv_fill"] == METRALE_FF and r["shape"]["max_decode_seqs"] == 2
        for r in recs
    )
    for r in recs:
        inv = r["batch_invariance"]
        assert r["baseline"] == (r["variant"] == "split_live_batch")
        if r["baseline"]:
            assert not inv["identical"] and "not batch-invariant" in r["note"]
        else:
            assert inv["identical"] and inv["required"]


# ------------------------------------------------- words, records, rankings


def test_explain_and_kernels_word_the_bound_levers_and_the_baseline_from_the_table():
    from leverctl.cli.kernels import describe
    from leverctl.levers import resolve
    from leverctl.levers.explain import explain

    for engine in ("atlas", "metrale"):
        cat = load_catalog(engine)
        for field in ("max_decode_seqs", "kv_poison"):
            (st,) = [s for s in explain(cat, cat.lever(field)).selects if s.path == PATH.name]
            assert st.binds == TABLE.binds[field] and st.baselines == ("split_live_batch",)
        doc = describe(resolve(cat, env={}), [PATH])
        variants = {v["name"]: v for v in doc["paths"][0]["variants"]}
        assert variants["split_live_batch"] == {**variants["split_live_batch"], "baseline": True, "chosen_by": []}
        assert variants["split_pinned"]["chosen_by"] and not variants["split_pinned"]["baseline"]
    cat = load_catalog("metrale")
    (st,) = [s for s in explain(cat, cat.lever("hc_perseq_decode")).selects if s.path == PATH.name]
    assert st.binds == "" and "per_sequence" in {c.variant for sel in st.selected for c in sel.cases}


def test_a_declaration_cannot_restate_its_baselines_nor_leave_out_its_bind_and_a_table_selects_no_baseline():
    """The baselines come from the table alone, and the levers the table
    says bind the run need the declaration's bind."""
    from test_declared_paths import declaration_fields

    from leverctl_kernels.common.path import declared_path
    from leverctl_kernels.selection import Rule, Table

    fields = declaration_fields(PATH)
    assert declared_path(TABLE, PATH.variants, **fields) == PATH
    with pytest.raises(TypeError, match="attention.paged_decode: baselines comes from the decision table"):
        declared_path(TABLE, PATH.variants, **fields, baselines=())
    with pytest.raises(
        ValueError,
        match=r"levers \['kv_poison', 'max_decode_seqs'\] bind the run; "
        "the declaration has no bind",
    ):
        declared_path(TABLE, PATH.variants, **{**fields, "bind": None})
    with pytest.raises(ValueError, match="no rule selects"):
        Table("x.y", "s", ("a",), ("v", "w"), (Rule("w"),), baselines=("w",))


def test_a_required_invariance_that_fails_fails_the_record_and_a_baseline_is_only_flagged():
    import dataclasses

    from leverctl.bench import run as runmod

    it = next(
        i
        for i in items_for(PATH, {"hc_perseq_decode": False, "max_decode_seqs": 1, "kv_poison": False}, SMOKE[:1])
        if not i.baseline
    )
    for required in (True, False):
        fig = {"identical": False, "required": required, "sequences": 3, "differing": 1, "max_abs_diff": 1e-7}
        path = dataclasses.replace(PATH, extra={**PATH.extra, "batch_invariance": lambda *a, f=fig: f})
        rec = {"note": ""}
        assert runmod._batch_invariance(path, it, None, None, None, rec) is (not required)
        assert rec["batch_invariance"] == fig and "not batch-invariant: 1 of 3" in rec["note"]


def test_rankings_show_baselines_beside_and_effects_and_suggestions_leave_them_out():
    from leverctl.bench.rank import lever_effects, rank

    def rec(config, variant, us, baseline=False, poison=False):
        return {
            "kernel": PATH.name,
            "variant": variant,
            "config": config,
            "status": "pass",
            "levers": {"kv_poison": poison},
            "shape": {"label": "s"},
            "baseline": baseline,
            "device": "GPU",
            "timing": {"median_us": us},
        }

    records = [
        rec("kv_poison=0", "split_pinned", 10.0),
        rec("kv_poison=1", "split_pinned", 11.0, poison=True),
        rec("kv_poison=0,baseline=split_live_batch", "split_live_batch", 5.0, True),
    ]
    (r,) = rank(records)
    assert [row.record["variant"] for row in r.ranked] == ["split_pinned", "split_pinned"]
    assert [row.record["variant"] for row in r.baselines] == ["split_live_batch"]  # shown beside, not ranked
    assert r.best.us == 10.0 and r.to_json()["baselines"][0]["config"].endswith("baseline=split_live_batch")
    assert all(e.pairs == 1 for e in lever_effects(records))


# ------------------------------------------------------------------ GPU


@pytest.mark.gpu
@pytest.mark.parametrize("ctx,n", [(8192, 8), (32768, 1)])
def test_on_a_gpu_at_model_shapes_pinned_variants_pass_and_are_invariant(ctx, n):
    """Qwen3-Next's shape: every variant within the tolerance; the pinned
    ones bit-identical alone and batched, and to each other."""
    from numba import cuda

    from leverctl.bench import check as chk

    shape = next(s for s in PATH.shapes("model", None) if s["ctx"] == ctx and s["n"] == n)
    shape = spec.bind({"max_decode_seqs": 32, "kv_poison": True}, shape, "metrale")
    x = PATH.make_inputs(shape, np.random.default_rng(1))
    outs = {}
    for name, v in PATH.variants.items():
        launch = v.build(shape)
        bufs, fig = chk.check(PATH, name, shape, launch, x, cuda)
        assert fig.passed, (name, fig.why())
        inv = spec.batch_invariance(name, shape, launch, bufs, cuda)
        assert inv["identical"] or not inv["required"], (name, inv)
        outs[name] = bufs["o"].copy_to_host()
    assert np.array_equal(outs["per_sequence"].view(np.uint32), outs["split_pinned"].view(np.uint32))


@pytest.mark.sim
@pytest.mark.parametrize("d", [32, 8, 12], ids=["d32-wide-8x4-chunks", "d8-wide-row-chunks", "d12-one-bf16-a-lane"])
def test_the_kv_tiles_staged_wide_or_scalar_match_the_reference_and_a_tail_read_fails_under_poison(d):
    """The split kernel's K and V tiles at each staging: 16-byte loads in the
    warp's 8-token x 4-chunk order (d 32, the model head dims' mapping),
    16-byte loads along a row (d 8), one bf16 a lane (d 12, not whole
    chunks). Each matches the reference over poisoned tail blocks; the
    kernel that reads the whole tail block fails there."""
    dims = {**SMOKE[0].dims, "d": d}
    shape = bound(Shape(f"d{d}", dims), poison=True)
    x = PATH.make_inputs(shape, np.random.default_rng(d))
    ref = PATH.reference(shape, x)["o"]
    _, got = run(shape, x, PATH.variants["split_pinned"].build(shape))
    ok, rel, mx = compare(got, ref, PATH.tolerance)
    assert ok, (rel, mx)
    _, bad = run(shape, x, _paged.launcher(shape, lambda n: 1, read_tail=True))
    assert not compare(bad, ref, PATH.tolerance)[0] and np.isnan(bad).any()


# ------------------------------------------------ 16-byte q rows and merge

WIDE_DIMS = dict(n=2, ctx=37, hq=4, hkv=2, d=32, hc_mult=0, target_ctas=4, min_split_blocks=1)


def off16(a: np.ndarray):
    """A device copy of ``a`` one element past a 16-byte boundary: a view
    the kernels must take one element a lane."""
    from numba import cuda

    a = np.ascontiguousarray(a)
    dev = cuda.to_device(np.zeros(a.size + 16 // a.itemsize, a.dtype))
    view = dev[1 : 1 + a.size].reshape(a.shape)
    view.copy_to_device(a)
    return view


def traced_run(shape, x, launch, unaligned=()):
    """``run`` under the memory tracer, the arrays named in ``unaligned`` (an
    input, or ``o``) as :func:`off16` views: (o, the trace's summary)."""
    from numba import cuda

    from leverctl.profile import memtrace as mt

    bufs = {n: off16(a) if n in unaligned else cuda.to_device(np.ascontiguousarray(a)) for n, a in x.items()}
    o = np.full((shape["n"], shape["hq"], shape["d"]), np.nan, np.float32)
    bufs["o"] = off16(o) if "o" in unaligned else cuda.to_device(o)
    for scratch in launch.workspace.values():
        scratch.copy_to_device(np.full(scratch.shape, np.nan, scratch.dtype))
    with mt.trace() as t:
        launch(bufs)
    return bufs["o"].copy_to_host(), mt.summarize(t)


@pytest.mark.sim
def test_split_and_merge_load_90_percent_of_their_bytes_16_bytes_a_lane_and_the_narrow_paths_give_the_same_bits():
    """Head dim 32, two sequences of two splits each (about 2 s traced):
    with q's rows staged 16 bytes a lane, the merge reading the partials
    and writing o 16 bytes a lane, the length read once a merge block and
    the block table once a split, >= 90 % of the loaded bytes come by
    16-byte loads (95 % measured) in >= 90 % used sectors. With q and o
    one element past 16 bytes, q goes one bf16 a lane and the merge a
    float a lane, as they did before: the share falls under 90 % (83 %),
    and the output keeps its bits."""
    shape = bound(Shape("wide", WIDE_DIMS), poison=True)
    x = PATH.make_inputs(shape, np.random.default_rng(5))
    launch = PATH.variants["split_pinned"].build(shape)
    assert spec.splits_of(shape, 1) == [2, 2]
    got, wide = traced_run(shape, x, launch)
    assert compare(got, PATH.reference(shape, x)["o"], PATH.tolerance)[0]
    assert wide.wide_load_share >= 0.9 and wide.sector_efficiency >= 0.9, (
        wide.wide_load_share,
        wide.sector_efficiency,
    )
    narrow_got, narrow = traced_run(shape, x, launch, unaligned=("q", "o"))
    assert narrow.wide_load_share < 0.9, narrow.wide_load_share
    assert np.array_equal(narrow_got.view(np.uint32), got.view(np.uint32))


@pytest.mark.sim
# the q fault leaves the tile's last chunk as the simulator's poison (NaN), whose scores' max the softmax subtracts
@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")
@pytest.mark.parametrize(
    "fault",
    [dict(q_fault=1), dict(merge_fault=1), dict(merge_fault=2)],
    ids=["q-last-chunk-dropped", "merge-last-chunk-dropped", "merge-last-split-twice"],
)
def test_a_fault_planted_in_the_16_byte_q_rows_or_merge_fails_the_check(fault):
    """The 16-byte paths broken at their ends -- the q tile's last chunk not
    loaded, each output row's last 4 floats not written, the last split
    added twice -- each fail the comparison with the reference."""
    shape = bound(Shape("wide", WIDE_DIMS), poison=True)
    x = PATH.make_inputs(shape, np.random.default_rng(5))
    ref = PATH.reference(shape, x)["o"]
    _, got = run(shape, x, _paged.launcher(shape, lambda n: 1, **fault))
    assert not compare(got, ref, PATH.tolerance)[0]


@pytest.mark.sim
def test_a_split_of_more_kv_blocks_than_threads_stages_the_block_table_twice():
    """Head dim 8 (8 threads a block), one split of 10 KV blocks: the table's
    entries come to shared memory 8 at a time, so the split refills them
    once mid-way; the output matches the reference over poisoned tail
    slots."""
    dims = dict(n=1, ctx=160, hq=4, hkv=2, d=8, hc_mult=0, target_ctas=1, min_split_blocks=1)
    shape = bound(Shape("refill", dims), poison=True)
    assert _paged.threads_for(8) == 8 and spec.splits_of(shape, 1) == [1] and spec.lengths(shape) == [157]
    x = PATH.make_inputs(shape, np.random.default_rng(2))
    _, got = run(shape, x, PATH.variants["split_pinned"].build(shape))
    ok, rel, mx = compare(got, PATH.reference(shape, x)["o"], PATH.tolerance)
    assert ok, (rel, mx)


@pytest.mark.sim
def test_a_group_of_eight_heads_staged_8_heads_x_4_chunks_a_warp_matches_the_reference():
    """Eight query heads a KV head at d 32: the q rows' 16-byte loads in the
    warp order of the model shapes (8 heads x 4 chunks)."""
    shape = bound(Shape("g8", {**WIDE_DIMS, "hq": 8, "hkv": 1}), poison=True)
    x = PATH.make_inputs(shape, np.random.default_rng(8))
    _, got = run(shape, x, PATH.variants["split_pinned"].build(shape))
    ok, rel, mx = compare(got, PATH.reference(shape, x)["o"], PATH.tolerance)
    assert ok, (rel, mx)

"""Rankings, lever effects, the winning levers, and the recipe that
reproduces them under each lever's own rule."""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path

import pytest
import sweep_fakes as fk
from hypothesis import given, settings
from hypothesis import strategies as st

from leverctl.bench import rank as rk
from leverctl.bench import sweep as sw
from leverctl.bench.plan import lever_json
from leverctl.bench.records.rules import median_us
from leverctl.levers import load_catalog, load_recipe, resolve
from leverctl.levers.resolve import value_json

ROOT = Path(__file__).resolve().parents[2]
ATLAS = load_catalog("atlas")
METRALE = load_catalog("metrale")


def swept(catalog, recipe=None, sets=()):
    plan = sw.build_sweep(resolve(catalog, recipe=recipe, env={}, sets=sets), fk.all_paths())
    doc = plan.plan_json({"kind": "gpu", "name": "Fake GPU"}, None)
    records = [fk.fake_record(it, "Fake GPU", timed=True) for it in plan.items]
    return plan, doc, records


def test_the_fastest_correct_configuration_wins_and_a_faster_failing_one_is_never_ranked():
    _, doc, records = swept(METRALE)
    by = {(r.kernel, r.shape): r for r in rk.rank(records, doc)}
    ffn = by[("fake.ffn", "n37")]
    assert ffn.best.record["variant"] == "sw+split"  # "gemm" is faster but fails
    assert {f["variant"] for f in ffn.failing} == {"gemm"}
    assert all(r.record["status"] == "pass" for r in ffn.ranked)
    assert [r.us for r in ffn.ranked] == sorted(r.us for r in ffn.ranked)
    # Metrale's recipe (defaults) takes sw+split already: no speedup to find.
    assert ffn.recipe_config == "decode_ffn_via_gemm=0,decode_split_silu=1,gemv_sw=1"
    assert ffn.best.speedup == pytest.approx(1.0)


def test_the_speedup_is_over_the_recipes_own_configuration():
    _, doc, records = swept(ATLAS, sets=[("ATLAS_NO_GEMV_SW", "1")])
    gemv = {(r.kernel, r.shape): r for r in rk.rank(records, doc)}[("fake.gemv", "n64")]
    assert gemv.recipe_config == "gemv_sw=0"
    assert gemv.best.record["config"] == "gemv_sw=1" and gemv.best.speedup == pytest.approx(14.0 / 10.0)


def test_a_levers_effect_is_its_median_speedup_across_the_other_levers():
    _, doc, records = swept(METRALE)
    eff = {(e.kernel, e.shape, e.lever, lever_json(e.value).__repr__()): e for e in rk.lever_effects(records, doc)}
    gemv = eff[("fake.gemv", "n37", "gemv_sw", "True")]
    assert gemv.speedup == pytest.approx(14.0 / 10.0) and gemv.pairs == 1 and gemv.label == "gemv_sw on"
    # In the FFN, gemv_sw on vs off over the settings where both pass:
    # split (26/20) and fused (30/22); the median of two is their mean.
    ffn = eff[("fake.ffn", "n37", "gemv_sw", "True")]
    assert ffn.pairs == 2 and ffn.speedup == pytest.approx((26 / 20 + 30 / 22) / 2)
    # A count is measured against the recipe's value (unset here).
    cap = eff[("fake.grouped", "n37", "moe_prefill_max_load_factor", "4")]
    assert cap.reference is None and cap.speedup == pytest.approx(8.0 / 7.0)


def test_simulator_records_rank_nothing_but_list_failures():
    plan = sw.build_sweep(resolve(METRALE, env={}), fk.all_paths())
    records = [fk.fake_record(it) for it in plan.items]
    r = rk.rank(records, plan.plan_json({"kind": "sim"}, None))
    assert not any(x.timed for x in r) and all(x.best is None or x.best.speedup is None for x in r)
    assert rk.lever_effects(records) == []
    assert sum(len(x.failing) for x in r) == sum(1 for it in plan.items if it.variant == "gemm")


# ── winners and the suggested recipe ─────────────────────────────────────────


def test_winners_are_chosen_jointly_where_paths_share_a_lever():
    _, doc, records = swept(ATLAS, sets=[("ATLAS_NO_GEMV_SW", "1"), ("ATLAS_GDN_WY17", "0")])
    w = rk.winners(records, doc)
    assert w.values["gemv_sw"] is True and w.values["decode_ffn_via_gemm"] is False  # gemm fails
    assert w.values["gdn_wy17"] is True
    assert set(w.changed) == {"gemv_sw", "gdn_wy17"}


def write_suggestion(tmp_path, catalog, recipe_path, wanted):
    out = tmp_path / "sub" / "suggested.toml"
    out.parent.mkdir(exist_ok=True)
    doc = rk.suggested_recipe(catalog, str(recipe_path) if recipe_path else None, out, wanted, "test")
    import tomli_w

    out.write_text(tomli_w.dumps(doc))
    return out, doc


def all_sweep_values(catalog, base):
    for f, lv in catalog.levers.items():
        for v in sw.sweep_values(lv, base.values()[f]):
            yield f, lever_json(v)


@pytest.mark.parametrize(
    "engine, recipe",
    [
        ("atlas", "atlas-defaults.toml"),
        ("atlas", "llama-3.1-8b-atlas.toml"),
        ("metrale", "metrale-defaults.toml"),
        ("metrale", "qwen3-next-80b-a3b-metrale.toml"),
        ("metrale", None),
    ],
)
def test_every_swept_value_of_every_lever_is_reproduced_by_the_written_recipe(tmp_path, engine, recipe):
    catalog = load_catalog(engine)
    parent = ROOT / "recipes" / recipe if recipe else None
    base = resolve(catalog, recipe=load_recipe(parent) if parent else None, env={})
    for field, value in all_sweep_values(catalog, base):
        out, doc = write_suggestion(tmp_path, catalog, parent, {field: value})
        got = resolve(catalog, recipe=load_recipe(out), env={}).values()
        assert value_json(got[field]) == value, (field, value, doc)
        others = {f: v for f, v in got.items() if f != field}
        assert others == {f: v for f, v in base.values().items() if f != field}, (field, value, doc)


def test_the_written_recipe_uses_each_rules_own_strings_and_extends_the_swept_one(tmp_path):
    parent = ROOT / "recipes" / "llama-3.1-8b-atlas.toml"  # sets ATLAS_DECODE_FFN_VIA_GEMM=1
    wanted = {
        "gemv_sw": False,
        "gdn_wy17": False,
        "bf16_tc_proj": True,
        "decode_ffn_via_gemm": False,
        "gdn_batched_fla": True,
        "max_decode_seqs": 1,
    }
    out, doc = write_suggestion(tmp_path, ATLAS, parent, wanted)
    assert not Path(doc["extends"]).is_absolute()
    assert (out.parent / doc["extends"]).resolve() == parent.resolve()
    assert doc["levers"] == {
        "ATLAS_NO_GEMV_SW": "1",
        "ATLAS_GDN_WY17": "0",
        "ATLAS_BF16_TC_PROJ": "1",
        "ATLAS_GDN_BATCHED_FLA": "1",
    }
    assert doc["unset"] == ["ATLAS_DECODE_FFN_VIA_GEMM"]  # dropped to get the default (off)
    assert doc["serve"] == {"max_batch_size": 1}


def test_metrale_presence_kill_drafter_build_default_and_counts(tmp_path):
    parent = ROOT / "recipes" / "metrale-defaults.toml"
    wanted = {
        "ffn_nvfp4_mmq": False,
        "decode_split_silu": False,
        "moe_prefill_exact_tiles": False,
        "moe_prefill_max_load_factor": 4,
        "drafter": {"prefill": True, "carry": False},
        "moe_fp8_grouped_decode_target": True,
    }
    out, doc = write_suggestion(tmp_path, METRALE, parent, wanted)
    assert doc["levers"] == {
        "METRALE_NO_FFN_NVFP4_MMQ": "1",
        "METRALE_NO_DECODE_SPLIT_SILU": "1",
        "METRALE_MOE_PREFILL_EXACT_TILES": "0",
        "METRALE_MOE_PREFILL_MAX_LOAD_FACTOR": "4",
        "METRALE_MTP_DRAFTER_CONTEXT_PREFILL_ONLY_UNSAFE": "1",
        "METRALE_FP8_MOE_GROUPED_DECODE": "1",
    }
    got = resolve(METRALE, recipe=load_recipe(out), env={}).values()
    assert {f: value_json(got[f]) for f in wanted} == wanted


# ── lever effects: the array pairing against the definition ────────────────


def _effects_by_definition(records, plan):
    """Every pair of passing timed records of one kernel and shape that
    differ in one lever alone (presence of the others included), by brute force."""
    out = {}
    info = rk.kernel_info(plan)
    groups = {}
    for r in records:
        if r["status"] == "pass" and median_us(r) is not None and not r.get("baseline"):
            groups.setdefault((r["kernel"], r["shape"]["label"]), []).append(r)
    for (kernel, shape), recs in groups.items():
        k = info.get(kernel) or {}
        for lever in k.get("levers") or rk._varying(recs):
            values = []
            for r in recs:
                if lever in r["levers"] and rk.canon(r["levers"][lever]) not in map(rk.canon, values):
                    values.append(r["levers"][lever])
            if len(values) < 2:
                continue
            recipe = k.get("recipe_levers") or {}
            ref = rk._reference(values, recipe.get(lever), lever in recipe)

            def rest(r):
                return {f: rk.canon(v) for f, v in r["levers"].items() if f != lever}

            for v in values:
                if rk.canon(v) == rk.canon(ref):
                    continue
                last = {}
                for a in recs:  # the last record of a setting wins, as in the report
                    if lever in a["levers"]:
                        last[(json.dumps(rest(a), sort_keys=True), rk.canon(a["levers"][lever]))] = a
                ratios = [
                    median_us(last[(s, rk.canon(ref))]) / median_us(b)
                    for (s, c), b in last.items()
                    if c == rk.canon(v) and (s, rk.canon(ref)) in last
                ]
                if ratios:
                    out[(kernel, shape, lever, rk.canon(v))] = (statistics.median(ratios), len(ratios), rk.canon(ref))
    return out


lever_sets = st.dictionaries(
    st.sampled_from(["a", "b", "c", "d"]),
    st.one_of(st.booleans(), st.integers(0, 3), st.none()),
    min_size=1,
    max_size=4,
)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(lever_sets, st.sampled_from(["s1", "s2"]), st.floats(0.5, 50), st.booleans()), min_size=1, max_size=40
    ),
    st.booleans(),
)
def test_a_levers_effect_is_the_median_over_every_pair_differing_in_it_alone(rows, with_plan):
    records = [
        {
            "kernel": "k",
            "variant": "v",
            "levers": lv,
            "config": json.dumps(lv, sort_keys=True),
            "shape": {"label": shape},
            "status": "pass" if ok else "fail",
            "timing": {"median_us": us},
        }
        for lv, shape, us, ok in rows
    ]
    plan = {"kernels": [{"kernel": "k", "levers": ["a", "b", "c"], "recipe_levers": {"b": 2}}]} if with_plan else None
    got = {
        (e.kernel, e.shape, e.lever, rk.canon(e.value)): (e.speedup, e.pairs, rk.canon(e.reference))
        for e in rk.lever_effects(records, plan)
    }
    want = _effects_by_definition(records, plan)
    assert got.keys() == want.keys()
    for key, (speedup, pairs, ref) in want.items():
        assert got[key][1:] == (pairs, ref) and math.isclose(got[key][0], speedup, rel_tol=1e-12)


def test_effects_pair_records_of_many_levers_without_overflow():
    """Seventy on/off levers make a 2^70 mixed-radix number: the pairing
    labels the settings instead, with the same answer."""
    fields = [f"f{i}" for i in range(70)]
    base = {f: False for f in fields}
    records = [
        {
            "kernel": "k",
            "variant": "v",
            "levers": base,
            "config": "base",
            "shape": {"label": "s"},
            "status": "pass",
            "timing": {"median_us": 10.0},
        }
    ]
    for i, f in enumerate(fields):
        records.append(
            {
                "kernel": "k",
                "variant": "v",
                "levers": {**base, f: True},
                "config": f,
                "shape": {"label": "s"},
                "status": "pass",
                "timing": {"median_us": 10.0 / (1 + i)},
            }
        )
    got = {e.lever: (e.speedup, e.pairs) for e in rk.lever_effects(records)}
    assert got == {f: (pytest.approx(1.0 + i), 1) for i, f in enumerate(fields)}

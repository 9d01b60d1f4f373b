"""The sweep plan: which levers are combined, how many configurations, the
hash, and the shards."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import sweep_fakes as fk

from leverctl.bench import sweep as sw
from leverctl.errors import UserError
from leverctl.levers import load_catalog, load_recipe, resolve
from leverctl.levers.kinds import DRAFTER_BOTH, DRAFTER_OFF, DRAFTER_PREFILL_ONLY

ROOT = Path(__file__).resolve().parents[2]
ATLAS = load_catalog("atlas")
METRALE = load_catalog("metrale")


def plan(catalog, paths=None, **kw):
    res = resolve(catalog, recipe=kw.pop("recipe", None), env={}, sets=kw.pop("sets", ()))
    return sw.build_sweep(res, paths if paths is not None else fk.all_paths(), **kw)


# ── values per kind ──────────────────────────────────────────────────────────


def test_boolean_kinds_are_swept_both_ways():
    for field in ("gemv_sw", "decode_ffn_via_gemm", "bf16_tc_proj", "gdn_wy17"):  # kill, opt-in, presence, opt-out
        lv = ATLAS.lever(field)
        assert set(sw.sweep_values(lv, lv.default)) == {True, False}


def test_a_tristate_is_swept_all_three_ways():
    lv = METRALE.lever("moe_prefill_exact_tiles")
    assert sw.sweep_values(lv, None) == (True, False, None)


def test_counts_take_their_small_declared_set_plus_the_recipes_own_value():
    opt = METRALE.lever("moe_prefill_max_load_factor")
    assert sw.sweep_values(opt, None) == (None, 1, 4)
    assert sw.sweep_values(opt, 3) == (None, 1, 4, 3)
    clamped = METRALE.lever("shadow_topk")
    assert sw.sweep_values(clamped, 0) == (0, 1, 8)


def test_the_drafter_takes_its_three_policies_and_config_one_and_the_recipes_value():
    assert sw.sweep_values(ATLAS.lever("drafter"), DRAFTER_BOTH) == (DRAFTER_BOTH, DRAFTER_PREFILL_ONLY, DRAFTER_OFF)
    assert sw.sweep_values(ATLAS.lever("max_decode_seqs"), 16) == (1, 16)
    assert sw.sweep_values(ATLAS.lever("max_decode_seqs"), 1) == (1,)


def test_a_recipe_value_equal_to_a_swept_value_is_not_doubled():
    # 1 == True in Python; the sweep must keep both a count of 1 and "on".
    assert sw.sweep_values(METRALE.lever("moe_prefill_max_load_factor"), 1) == (None, 1, 4)


# ── counts for both engines ──────────────────────────────────────────────────


def test_atlas_plan_counts_combine_only_the_levers_each_path_declares():
    p = plan(ATLAS)
    counts = {k.name: (k.levers, k.configurations, k.runs) for k in p.kernels}
    assert counts == {
        "fake.gemv": (("gemv_sw",), 2, 4),
        # Atlas has no decode_split_silu: it stays at the path's lever default.
        "fake.ffn": (("decode_ffn_via_gemm", "gemv_sw"), 4, 8),
        "fake.verify": (("gdn_wy17", "gdn_wyn"), 4, 8),
    }  # fake.grouped's levers are Metrale's only
    assert p.total == len(p.items) == 20
    # The naive product: every Atlas lever's values, for every path and shape.
    per = math.prod(len(sw.sweep_values(lv, lv.default)) for lv in ATLAS.levers.values())
    assert per == 2**17 * 3 * 3  # 17 on/off levers, shadow_topk, the drafter (config: 1 value)
    assert p.naive_total == per * 6


def test_metrale_plan_counts_include_the_tristate_and_count_products():
    p = plan(METRALE)
    counts = {k.name: k.configurations for k in p.kernels}
    assert counts == {"fake.gemv": 2, "fake.ffn": 8, "fake.grouped": 9, "fake.verify": 4}
    assert p.total == 2 * (2 + 8 + 9 + 4)
    ffn = [i for i in p.items if i.kernel == "fake.ffn"]
    assert {i.variant for i in ffn} == {"gemm", "sw+split", "sw+fused", "t64+split", "t64+fused"}


def test_every_lever_off_the_swept_ones_stays_at_the_recipes_value():
    p = plan(METRALE, sets=[("METRALE_NO_GEMV_SW", "1")], only_levers=["decode_split_silu"])
    (ffn,) = [k for k in p.kernels if k.name == "fake.ffn"]
    assert ffn.levers == ("decode_split_silu",)
    assert {(i.levers["gemv_sw"], i.levers["decode_ffn_via_gemm"]) for i in p.items} == {(False, False)}
    assert ffn.recipe_config == "decode_ffn_via_gemm=0,decode_split_silu=1,gemv_sw=0"


def test_the_recipes_own_configuration_is_always_in_the_plan():
    p = plan(METRALE, recipe=load_recipe(ROOT / "recipes" / "qwen3-8b.toml"))
    for k in p.kernels:
        assert k.recipe_config in {i.config for i in p.items if i.kernel == k.name}


def test_levers_that_steer_no_kernel_are_named_as_not_benchmarked():
    p = plan(ATLAS)
    why = dict(p.not_benchmarked)
    assert why["kv_poison"].startswith("diagnostic")
    assert why["drafter"] == "steers no kernel path"
    assert why["lora_eager"] == "no kernel path for what it steers yet"  # lora.proj: not among the fakes
    assert why["bf16_tc_proj"] == "no kernel path for what it steers yet"
    swept = {f for k in p.kernels for f in k.levers}
    assert swept | set(why) == set(ATLAS.fields) and not swept & set(why)


def test_levers_restricts_what_is_swept_and_refuses_unknown_or_idle_fields():
    p = plan(ATLAS, only_levers=["gemv_sw"])
    assert [k.name for k in p.kernels] == ["fake.gemv", "fake.ffn"]
    assert dict(p.not_benchmarked)["decode_ffn_via_gemm"] == "held at the recipe's value (not in --levers)"
    with pytest.raises(UserError, match="no such lever field.*did you mean gemv_sw"):
        plan(ATLAS, only_levers=["gemv_sww"])
    with pytest.raises(UserError, match="steers none of the kernel paths"):
        plan(ATLAS, only_levers=["kv_poison"])


def test_the_plan_hash_is_deterministic_and_covers_what_identifies_a_plan():
    a, b = plan(ATLAS), plan(ATLAS)
    assert a.hash == b.hash and len(a.hash) == 16
    assert plan(ATLAS, preset="model").hash != a.hash
    assert plan(ATLAS, only_levers=["gemv_sw"]).hash != a.hash
    assert (
        plan(ATLAS, sets=[("ATLAS_GDN_WYN", "0")], only_levers=["gdn_wy17"]).hash
        != plan(ATLAS, only_levers=["gdn_wy17"]).hash
    )
    assert plan(METRALE, paths=[fk.gemv_path()]).hash != plan(ATLAS, paths=[fk.gemv_path()]).hash
    assert all(i.plan == a.hash and i.catalog == ATLAS.digest[:16] for i in a.items)


def test_a_shards_plan_json_lists_its_own_items_by_place_and_the_recipes_configuration():
    p = plan(ATLAS)
    doc = p.plan_json({"kind": "sim", "name": "x"}, (1, 2))
    mine = sw.shard_items(p.items, (1, 2))
    assert doc["hash"] == p.hash and doc["shard"] == {"index": 1, "count": 2, "items": len(mine)}
    assert doc["total"] == p.total and 0 < len(mine) < p.total
    assert [(i["kernel"], i["shape"], i["config"]) for i in doc["items"]] == [
        (i.kernel, i.shape.label, i.config) for i in mine
    ]
    assert [p.items[i["n"]].config for i in doc["items"]] == [i["config"] for i in doc["items"]]
    other = p.plan_json({"kind": "sim", "name": "x"}, (2, 2))
    assert sorted(i["n"] for i in doc["items"] + other["items"]) == list(range(p.total))
    assert [i["n"] for i in p.plan_json({"kind": "sim"}, None)["items"]] == list(range(p.total))
    assert json.loads(json.dumps(doc)) == doc
    assert {k["kernel"]: k["recipe_config"] for k in doc["kernels"]}["fake.gemv"] == "gemv_sw=1"


# ── shards ───────────────────────────────────────────────────────────────────


@pytest.mark.parametrize("text", ["3/2", "0/2", "1/0", "a/b", "2", "-1/2", "1/2/3", ""])
def test_bad_shard_specs_are_refused_in_one_line(text):
    with pytest.raises(UserError) as e:
        sw.parse_shard(text)
    assert "\n" not in e.value.line()


def test_shards_partition_the_plan_exactly_and_deterministically():
    items = plan(METRALE).items
    for n in (1, 2, 3, 7, 60):
        parts = [sw.shard_items(items, (i, n)) for i in range(1, n + 1)]
        keys = [it.key for part in parts for it in part]
        assert sorted(keys) == sorted(it.key for it in items) and len(set(keys)) == len(keys)
        assert parts == [sw.shard_items(items, (i, n)) for i in range(1, n + 1)]
        # A run group (path, variant, shape) never straddles two shards.
        owner = {sw.run_group(it): k for k, part in enumerate(parts) for it in part}
        assert all(owner[sw.run_group(it)] == k for k, part in enumerate(parts) for it in part)
    assert sw.parse_shard("2/4") == (2, 4) and sw.parse_shard("1/1") == (1, 1)

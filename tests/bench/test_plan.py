"""Planning: which paths an engine has, their lever values, the variant each
chooses, and the plan's identity."""

from __future__ import annotations

import pytest
from bench_fakes import saxpy_path

from leverctl.bench.plan import (
    applies,
    build_plan,
    config_key,
    items_for,
    lever_json,
    path_levers,
    plan_for,
)
from leverctl.levers import Drafter, load_catalog, resolve
from leverctl_kernels.common.path import Choice, Shape

FIELDS = ("gemv_sw", "gdn_wy17")


def test_a_path_naming_engines_applies_only_to_those():
    p = saxpy_path(engines=("metrale",))
    assert applies(p, "metrale", ())
    assert not applies(p, "atlas", FIELDS)


def test_a_path_naming_no_engine_applies_where_the_catalog_has_one_of_its_levers():
    p = saxpy_path(levers=("decode_split_silu", "gemv_sw"), lever_defaults={"decode_split_silu": False})
    assert applies(p, "atlas", FIELDS)
    assert not applies(p, "atlas", ("gdn_wy17",))


def test_fields_the_catalog_lacks_take_the_paths_lever_defaults():
    p = saxpy_path(levers=("gemv_sw", "decode_split_silu"), lever_defaults={"decode_split_silu": True})
    assert path_levers(p, {"gemv_sw": False, "gdn_wy17": True}, FIELDS) == {"gemv_sw": False, "decode_split_silu": True}


def test_a_lever_with_no_value_anywhere_is_a_declaration_error():
    p = saxpy_path(levers=("gemv_sw", "nowhere"))
    with pytest.raises(ValueError, match="nowhere"):
        path_levers(p, {"gemv_sw": True}, FIELDS)


def test_the_config_key_follows_the_paths_lever_order_and_spells_every_kind():
    p = saxpy_path(levers=("gemv_sw", "tri", "drafter", "cap"))
    levers = {"cap": 8, "drafter": Drafter(True, False), "tri": None, "gemv_sw": True}
    assert config_key(p, levers) == "gemv_sw=1,tri=unset,drafter=prefill:1;carry:0,cap=8"
    assert lever_json(Drafter(True, False)) == {"prefill": True, "carry": False}


def test_each_item_carries_the_chosen_variant_and_its_note():
    def select(vals, shape):
        if shape["n"] > 40:
            return Choice("plain", note="n > 40 takes the plain kernel")
        return Choice("good" if vals["gemv_sw"] else "plain")

    p = saxpy_path(select=select)
    items = items_for(p, {"gemv_sw": True}, [Shape("a", {"n": 37}), Shape("b", {"n": 64})])
    assert [(i.variant, i.note) for i in items] == [("good", ""), ("plain", "n > 40 takes the plain kernel")]
    assert items[0].key == ("fake.saxpy", "a", "gemv_sw=1")


def test_a_select_that_raises_or_names_an_unknown_variant_becomes_a_failed_item():
    def boom(vals, shape):
        raise RuntimeError("no rule for this shape")

    bad = items_for(saxpy_path(select=boom), {"gemv_sw": True}, [Shape("a", {"n": 3})])[0]
    assert bad.failed and "no rule for this shape" in bad.note
    unknown = items_for(saxpy_path(select=lambda v, s: Choice("nope")), {"gemv_sw": True}, [Shape("a", {"n": 3})])[0]
    assert unknown.failed and "nope" in unknown.note


def test_a_plan_lists_applicable_paths_at_the_resolved_levers_and_is_stamped():
    other = saxpy_path(name="fake.other", levers=("not_in_catalog",), lever_defaults={"not_in_catalog": True})
    plan = build_plan(
        [saxpy_path(), other],
        engine="atlas",
        catalog_fields=FIELDS,
        values={"gemv_sw": False, "gdn_wy17": True},
        catalog_digest="ab" * 32,
    )
    assert [(i.kernel, i.variant, i.shape.label) for i in plan.items] == [
        ("fake.saxpy", "plain", "n37"),
        ("fake.saxpy", "plain", "n64"),
    ]
    assert all(i.plan == plan.hash[:16] and i.catalog == "ab" * 8 for i in plan.items)


def test_the_plan_hash_is_stable_and_changes_with_the_levers():
    def plan(v):
        return build_plan([saxpy_path()], engine="atlas", catalog_fields=FIELDS, values={"gemv_sw": v})

    assert plan(True).hash == plan(True).hash
    assert plan(True).hash != plan(False).hash
    assert len(plan(True).hash) == 64


def test_model_shapes_come_from_the_paths_model_preset():
    plan = build_plan(
        [saxpy_path()],
        engine="atlas",
        catalog_fields=FIELDS,
        values={"gemv_sw": True},
        shapes="model",
        model={"hidden": 4096},
    )
    assert [i.shape.label for i in plan.items] == ["n4096"]


def test_a_path_whose_shapes_raise_becomes_one_failed_item_not_a_crash():
    p = saxpy_path()
    broken = type(p)(**{**p.__dict__, "shapes": lambda preset, model: 1 / 0})
    plan = build_plan([broken], engine="atlas", catalog_fields=FIELDS, values={"gemv_sw": True})
    assert len(plan.items) == 1 and plan.items[0].failed and "ZeroDivisionError" in plan.items[0].note


@pytest.mark.parametrize("engine", ["atlas", "metrale"])
@pytest.mark.parametrize("preset", ["smoke", "model"])
def test_every_registered_path_plans_cleanly_against_the_shipped_catalogs(engine, preset):
    from leverctl_kernels.registry import all_paths

    res = resolve(load_catalog(engine))
    plan = plan_for(res, all_paths(), shapes=preset)
    assert [i.note for i in plan.items if i.failed] == []
    for item in plan.items:
        assert item.variant in item.path.variants
        assert item.config


# -- paths the recipe's model does not have ------------------------------------


def _gdn_like():
    from dataclasses import replace

    return replace(saxpy_path(name="fake.gdn"), extra={"model_sections": ("gdn",)})


def test_a_model_without_the_section_a_path_needs_does_not_plan_it_and_says_why():
    dense = {"name": "Qwen3-8B", "hidden": 4096, "ffn": {"intermediate": 12288}}
    plan = build_plan(
        [saxpy_path(), _gdn_like()], engine="atlas", catalog_fields=FIELDS, values={"gemv_sw": True}, model=dense
    )
    assert {i.kernel for i in plan.items} == {"fake.saxpy"}
    assert plan.not_in_model == (("fake.gdn", "the model Qwen3-8B has no [model.gdn]"),)


def test_a_model_with_the_section_or_no_model_at_all_plans_the_path():
    hybrid = {"hidden": 2048, "gdn": {"layers": 36}}
    for model in (hybrid, None):
        plan = build_plan([_gdn_like()], engine="atlas", catalog_fields=FIELDS, values={"gemv_sw": True}, model=model)
        assert {i.kernel for i in plan.items} == {"fake.gdn"} and plan.not_in_model == ()


def test_the_shipped_gdn_paths_need_a_gdn_section_and_dense_recipes_have_none():
    from pathlib import Path

    from leverctl.levers import load_recipe
    from leverctl_kernels.registry import family_paths

    recipes = Path(__file__).resolve().parents[2] / "recipes"

    gdn = family_paths("gdn")
    assert len(gdn) == 6 and all(p.extra["model_sections"] == ("gdn",) for p in gdn)
    for name, has_gdn in (("qwen3-8b", False), ("llama-3.1-8b-atlas", False), ("qwen3-next-80b-a3b", True)):
        model = load_recipe(recipes / f"{name}.toml").model
        assert bool(model.get("gdn")) is has_gdn, name


# -- the model-shape plan of the shipped recipes -------------------------------


def _model_plan(recipe: str):
    from pathlib import Path

    from leverctl.cli import common

    st = common.setup(recipe=Path(__file__).resolve().parents[2] / "recipes" / f"{recipe}.toml", no_env=True)
    res = st.resolve(quiet=True)
    _cat, rec = st.load()
    return plan_for(res, common.registered_paths(), shapes="model", model=dict(rec.model))


def test_the_qwen3_8b_dense_ffn_gemms_are_benched_from_16_rows_to_4096():
    plan = _model_plan("qwen3-8b")
    gemm = [i.shape for i in plan.items if i.kernel == "w4a16.gemm"]
    assert [(s["m"], s["n"], s["k"]) for s in gemm] == [
        (m, n, k) for m in (16, 64, 256, 1024, 4096) for n, k in ((12288, 4096), (4096, 12288))
    ]
    # 4 GEMV/FFN decode items and 10 GEMMs: the W4A16 plan grew by the four new GEMM shapes, no more.
    w4a16 = [i for i in plan.items if i.path.family == "w4a16"]
    assert len(w4a16) == 14 and len(gemm) == 10
    # and the paged decode attention: 3 contexts x 3 batches, selected and baseline
    assert sum(i.kernel == "attention.paged_decode" for i in plan.items) == 18


def test_every_shipped_recipe_benches_the_gemm_at_the_same_rows():
    for recipe in (
        "qwen3-8b",
        "llama-3.1-8b-atlas",
        "qwen3-next-80b-a3b",
        "qwen3-next-80b-a3b-metrale",
        "atlas-defaults",
        "metrale-defaults",
    ):
        rows = sorted({i.shape["m"] for i in _model_plan(recipe).items if i.kernel == "w4a16.gemm"})
        assert rows == [16, 64, 256, 1024, 4096], recipe

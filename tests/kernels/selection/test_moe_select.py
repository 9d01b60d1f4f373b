"""The MoE decision tables against the engines' rules, for every
combination of each path's levers in both engines, at every smoke and
model shape; and the lever commands word them from the same tables.

``engine_choice`` restates the lever files as the call sites would branch:
Metrale's gate reads an FP32 input when ``fp32_routing`` is active (which
implies FP32 logits), else FP32 logits from the BF16 input under
``fp32_gate``; the holo levers choose each stage's weight format on their
own; the FP8 grouped decode is for multi-row decode; the legacy per-token
path is taken when its lever is on; decode goes through the prefill path
on DFlash capture layers only; union statistics add their counting kernel.
"""

from __future__ import annotations

import itertools

import pytest

from leverctl.bench.plan import applies, path_levers
from leverctl.levers import load_catalog
from leverctl_kernels.selection import TABLES


def engine_choice(path: str, lv: dict, shape) -> str:
    if path == "moe.router":
        if lv["fp32_routing"]:
            return "fp32_routing"
        return "fp32_gate" if lv["fp32_gate"] else "bf16"
    if path == "moe.gateup_fp4":
        return "nvfp4" if lv["holo_moe_gateup_fp4"] else "int4"
    if path == "moe.down_fp4":
        return "nvfp4" if lv["holo_moe_down_fp4"] else "int4"
    if path == "moe.decode_fp8_grouped":
        return "grouped" if lv["moe_fp8_grouped_decode_target"] and shape["rows"] > 1 else "per_row"
    if path == "moe.decode_multi_seq":
        return "per_token" if lv["moe_legacy_pertoken_decode"] else "token_major"
    if path == "moe.decode_via_prefill":
        return "prefill" if lv["frankenstein_decode_via_prefill"] and shape["capture_layer"] else "decode"
    if path == "moe.union_stats":
        return "on" if lv["moe_union_stats"] else "off"
    raise KeyError(path)


# The decode paths; the prefill ones (moe.prefill_grouped, moe.prefill_sorted,
# moe.shared_expert) are test_moe_prefill_select's.
DECODE_PATHS = (
    "moe.router",
    "moe.gateup_fp4",
    "moe.down_fp4",
    "moe.decode_fp8_grouped",
    "moe.decode_multi_seq",
    "moe.decode_via_prefill",
    "moe.union_stats",
)


def _moe_paths():
    from leverctl_kernels.registry import get_path

    return [get_path(name) for name in DECODE_PATHS]


ENGINE_PATHS = {
    "atlas": {"moe.gateup_fp4", "moe.down_fp4", "moe.union_stats"},
    "metrale": {
        "moe.router",
        "moe.gateup_fp4",
        "moe.down_fp4",
        "moe.decode_fp8_grouped",
        "moe.decode_multi_seq",
        "moe.decode_via_prefill",
        "moe.union_stats",
    },
}


@pytest.mark.parametrize("engine", ["atlas", "metrale"])
def test_each_engine_has_exactly_its_moe_paths(engine):
    cat = load_catalog(engine)
    have = {p.name for p in _moe_paths() if applies(p, engine, cat.fields)}
    assert have == ENGINE_PATHS[engine]


@pytest.mark.parametrize("engine", ["atlas", "metrale"])
def test_select_follows_the_engine_for_every_lever_combination_at_every_shape(engine):
    cat = load_catalog(engine)
    defaults = {f: lv.default for f, lv in cat.levers.items()}
    compared = 0
    for path in _moe_paths():
        if not applies(path, engine, cat.fields):
            continue
        shapes = [*path.shapes("smoke", None), *path.shapes("model", None)]
        if path.name == "moe.decode_fp8_grouped":
            shapes += [
                s
                for s in path.shapes(
                    "model",
                    {
                        "hidden": 64,
                        "moe": {"experts": 8, "top_k": 2, "expert_intermediate": 16},
                        "bench": {"decode_batches": [1, 2]},
                    },
                )
            ]
        for values in itertools.product((False, True), repeat=len(path.levers)):
            lv = path_levers(path, {**defaults, **dict(zip(path.levers, values))}, cat.fields)
            for shape in shapes:
                got = path.select(lv, shape)
                assert got.variant == engine_choice(path.name, lv, shape), (path.name, lv, shape.label)
                compared += 1
    assert compared >= (12 if engine == "atlas" else 40)


def test_a_table_that_drops_the_fp32_routing_rule_disagrees_with_the_engine():
    import dataclasses

    table = TABLES["moe.router"]
    broken = dataclasses.replace(table, rules=table.rules[1:])
    shape = {"rows": 1}
    lv = {"fp32_routing": True, "fp32_gate": False}
    assert broken.select(lv, shape).variant != engine_choice("moe.router", lv, shape)


def test_the_notes_say_why_a_lever_was_not_honoured():
    grouped = TABLES["moe.decode_fp8_grouped"].select({"moe_fp8_grouped_decode_target": True}, {"rows": 1})
    assert grouped.variant == "per_row" and "1 row" in grouped.note
    via = TABLES["moe.decode_via_prefill"].select(
        {"frankenstein_decode_via_prefill": True}, {"rows": 1, "capture_layer": 0}
    )
    assert via.variant == "decode" and "not a DFlash capture layer" in via.note


def test_the_via_prefill_shapes_say_whether_the_layer_is_a_capture_layer():
    path = next(p for p in _moe_paths() if p.name == "moe.decode_via_prefill")
    for preset in ("smoke", "model"):
        caps = sorted(s["capture_layer"] for s in path.shapes(preset, None))
        assert caps == [0, 1]
        assert all(s["rows"] == 1 for s in path.shapes(preset, None))


def test_union_stats_binds_its_lever_into_the_shape_and_the_outputs():
    path = next(p for p in _moe_paths() if p.name == "moe.union_stats")
    shape = path.shapes("smoke", None)[0]
    on = path.bind({"moe_union_stats": True}, shape, "atlas")
    off = path.bind({"moe_union_stats": False}, shape, "atlas")
    assert on.label == off.label and on["stats"] == 1 and off["stats"] == 0
    assert set(path.outputs(on)) == {"ids", "weights", "union", "expert_rows"}
    assert set(path.outputs(off)) == {"ids", "weights"}


def test_model_shapes_come_from_the_recipe_moe_table():
    import tomllib
    from pathlib import Path

    path = next(p for p in _moe_paths() if p.name == "moe.gateup_fp4")
    model = {
        "hidden": 4096,
        "moe": {"experts": 64, "top_k": 6, "expert_intermediate": 1408},
        "bench": {"decode_batches": [4], "prefill_tokens": [256]},
    }
    got = [
        (s["rows"], s["hidden"], s["inter"], s["experts"], s["top_k"], s["prefill"])
        for s in path.shapes("model", model)
    ]
    assert got == [(4, 4096, 1408, 64, 6, 0), (256, 4096, 1408, 64, 6, 1)]
    recipe = Path(__file__).resolve().parents[3] / "recipes" / "qwen3-next-80b-a3b.toml"
    qwen = tomllib.loads(recipe.read_text())["model"]
    got = [(s["rows"], s["hidden"], s["inter"], s["experts"], s["top_k"]) for s in path.shapes("model", qwen)]
    assert got == [(r, 2048, 512, 512, 10) for r in (1, 8, 32, 1024, 4096)]
    assert got == [(s["rows"], s["hidden"], s["inter"], s["experts"], s["top_k"]) for s in path.shapes("model", None)]

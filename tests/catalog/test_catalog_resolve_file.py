"""Metrale keeps from_values and defaults() in a second file,
model_levers_resolve.rs, that the lever file does not list. Given such a file
(written here from the shipped catalog, one initializer per kind), the check
verifies every rule and default it states, and catches each drift in it."""

from __future__ import annotations

import json

import pytest

from leverctl.levers import load_catalog

# One way of writing each kind's rule in Rust (X, Y: the entry's variables).
INITIALIZERS = {
    "opt_in": 'value("{X}").as_deref() == Some("1")',
    "opt_out": 'value("{X}").as_deref() != Some("0")',
    "kill_switch": 'value("{X}").as_deref() != Some("1")',
    "truthy_ci": 'value("{X}").is_some_and(|v| v == "1" || v.eq_ignore_ascii_case("true"))',
    "truthy_cs": 'value("{X}").as_deref() == Some("1") || value("{X}").as_deref() == Some("true")',
    "presence": 'present("{X}")',
    "presence_kill": '!present("{X}")',
    "tristate": (
        'if value("{X}").as_deref() == Some("1") {{ Some(true) }} '
        'else if value("{X}").as_deref() == Some("0") {{ Some(false) }} else {{ None }}'
    ),
    "count_opt": 'value("{X}").and_then(|s| s.parse::<usize>().ok()).filter(|&n| n != 0)',
    "build_default": 'crate::build_defaults::DECODE_SPLIT_SILU && !present("{X}")',
    "opt_in_vetoed": 'value("{X}").as_deref() == Some("1") && !present("{Y}")',
    "config": "1",
}


def resolve_file(engine: str) -> str:
    cat = load_catalog(engine)
    body, defaults = [], []
    for f, lv in cat.levers.items():
        if lv.kind in ("count_clamped", "drafter"):
            body.append(f"        {f},")  # resolved by the caller and passed in
        else:
            x, y = (list(lv.vars) + ["", ""])[:2]
            body.append(f"        {f}: " + INITIALIZERS[lv.kind].format(X=x, Y=y) + ",")
        if lv.kind == "drafter":
            defaults.append(f"            {f}: crate::drafter_context::DrafterContext::BOTH,")
        elif lv.default not in (False, None, 0) or lv.kind == "config":
            defaults.append(f"            {f}: {str(lv.default).lower()},")
    return "\n".join(
        [
            "fn from_values(",
            "    mut value: impl FnMut(&str) -> Option<String>,",
            "    mut present: impl FnMut(&str) -> bool,",
            "    shadow_topk: usize,",
            "    drafter: crate::drafter_context::DrafterContext,",
            ") -> ModelLevers {",
            "    ModelLevers {",
            *body,
            "    }",
            "}",
            "",
            "impl ModelLevers {",
            "    pub fn defaults() -> Self {",
            "        Self {",
            *defaults,
            "            ..Self::default()",
            "        }",
            "    }",
            "}",
            "",
        ]
    )


@pytest.fixture
def pair(rust_file, tmp_path):
    def make(edit=None):
        text = resolve_file("metrale")
        if edit is not None:
            assert text.count(edit[0]) == 1, edit[0]
            text = text.replace(*edit)
        second = tmp_path / "model_levers_resolve.rs"
        second.write_text(text, encoding="utf-8")
        return rust_file("metrale"), second

    return make


def test_with_its_resolution_file_metrale_checks_clean_and_only_unstated_rules_are_notes(cli, pair):
    r = cli("catalog", "check", "-f", "json", *pair())
    assert r.code == 0, r.out
    notes = {(f["field"], f["what"]) for f in json.loads(r.out)["findings"]}
    assert notes == {
        ("decode_split_silu", "unverified"),
        ("shadow_topk", "unverified"),
        ("drafter", "unverified"),
        ("lora_rotate", "mention"),
        ("ms_profile", "mention"),
    }


@pytest.mark.parametrize(
    "edit, expected",
    [
        (('value("METRALE_GDN_WYN")', 'value("METRALE_GDN_WY_N")'), ("gdn_wyn", "rule")),
        (
            (
                'gdn_wy17: value("METRALE_GDN_WY17").as_deref() != Some("0")',
                'gdn_wy17: value("METRALE_GDN_WY17").as_deref() == Some("1")',
            ),
            ("gdn_wy17", "rule"),
        ),
        (("            prefill_v2: true,", "            prefill_v2: false,"), ("prefill_v2", "default")),
        (
            ('!present("METRALE_NO_FP8_MOE_GROUPED_DECODE")', 'value("METRALE_NO_FP8_MOE_GROUPED_DECODE").is_none()'),
            ("moe_fp8_grouped_decode_target", "rule"),
        ),
    ],
    ids=["variable-renamed-in-from_values", "opt_out-became-opt_in", "default-flipped", "veto-by-value"],
)
def test_each_drift_in_the_resolution_file_is_reported(cli, pair, edit, expected):
    r = cli("catalog", "check", "-f", "json", *pair(edit))
    assert r.code == 1, r.out
    drift = [(f["field"], f["what"]) for f in json.loads(r.out)["findings"] if f["drift"]]
    assert expected in drift

"""`leverctl catalog draft`: a catalog drafted from Atlas's lever file resolves
like the shipped one wherever from_values states the rule, and the entries it
cannot state are marked and refused until a person completes them."""

from __future__ import annotations

import tomllib

import pytest
import tomli_w
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from levers_oracle import expected
from test_levers_oracle import environments

from leverctl.levers import load_catalog, resolve
from leverctl.levers.catalog import parse_catalog
from leverctl.levers.resolve import value_json

# The Atlas fields whose rule from_values does not state: a helper in another
# file, two values its caller passes in, and a constant the engine overwrites.
MARKED = {"gemv_sw", "shadow_topk", "drafter", "max_decode_seqs"}


@pytest.fixture(scope="module")
def atlas_draft(tmp_path_factory):
    from catalog_helpers import LISTINGS, SEEDS, rust_of

    from leverctl.cli.app import main

    listing = SEEDS / LISTINGS["atlas"]
    if not listing.is_file():
        pytest.skip(f"the atlas lever file is not at {listing}")
    folder = tmp_path_factory.mktemp("draft")
    src = folder / "model_levers.rs"
    src.write_text(rust_of(listing.read_text(encoding="utf-8")), encoding="utf-8")
    out = folder / "atlas-draft.toml"
    with pytest.raises(SystemExit) as e:
        main(["catalog", "draft", str(src), "--prefix", "ATLAS_", "-o", str(out)])
    assert e.value.code == 0
    return out


def _stated(path):
    """The draft without its marked entries, loaded as a catalog."""
    doc = tomllib.loads(path.read_text(encoding="utf-8"))
    marked = {f for f, e in doc["levers"].items() if "fill_in" in e}
    for f in marked:
        del doc["levers"][f]
    return marked, parse_catalog(tomli_w.dumps(doc).encode(), "draft")


def test_the_draft_marks_exactly_the_fields_whose_rule_from_values_does_not_state(atlas_draft):
    marked, _ = _stated(atlas_draft)
    assert marked == MARKED


def test_every_stated_entry_has_the_shipped_kind_variables_and_default(atlas_draft):
    _, draft = _stated(atlas_draft)
    shipped = load_catalog("atlas")
    assert set(draft.fields) == set(shipped.fields) - MARKED
    for f, lv in draft.levers.items():
        want = shipped.lever(f)
        assert (lv.kind, lv.vars, lv.default) == (want.kind, want.vars, want.default), f
        assert lv.summary


@pytest.fixture(scope="module")
def stated_draft(atlas_draft):
    return _stated(atlas_draft)[1]


@settings(
    max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture]
)
@given(data=st.data())
def test_random_environments_resolve_through_the_draft_as_the_engines_rules_say(stated_draft, data):
    draft = stated_draft
    env = data.draw(environments("atlas"))
    got = {f: value_json(v) for f, v in resolve(draft, env=env).values().items()}
    want = expected("atlas", env)
    assert got == {f: want[f] for f in got}


def test_show_refuses_the_draft_naming_every_marked_entry(cli, atlas_draft):
    from catalog_helpers import assert_one_line_error

    r = cli("show", "--no-env", "--catalog", atlas_draft)
    assert_one_line_error(r, "fill_in", *sorted(MARKED))


def test_a_completed_draft_is_accepted(cli, atlas_draft, tmp_path):
    doc = tomllib.loads(atlas_draft.read_text(encoding="utf-8"))
    shipped = tomllib.loads(load_catalog("atlas").data.decode())
    for f in MARKED:  # what a person would write, here the shipped entries
        doc["levers"][f] = {**shipped["levers"][f], "group": doc["levers"][f]["group"]}
    done = tmp_path / "atlas.toml"
    done.write_text(tomli_w.dumps(doc), encoding="utf-8")
    r = cli("show", "--no-env", "-f", "json", "--catalog", done)
    assert r.code == 0, r.err
    r = cli("catalog", "check", "--catalog", done, "-f", "json", atlas_draft.parent / "model_levers.rs")
    assert r.code == 0, r.out


def test_a_draft_of_metrale_marks_every_entry_its_prose_only_file_cannot_state(cli, rust_file, tmp_path):
    out = tmp_path / "metrale.toml"
    r = cli("catalog", "draft", rust_file("metrale"), "--prefix", "METRALE_", "-o", out)
    assert r.code == 0, r.err
    assert "70 entries; 70 marked" in r.err
    doc = tomllib.loads(out.read_text(encoding="utf-8"))
    assert doc["levers"]["moe_fp8_grouped_decode_target"]["vars"] == [
        "METRALE_FP8_MOE_GROUPED_DECODE",
        "METRALE_NO_FP8_MOE_GROUPED_DECODE",
    ]
    assert doc["levers"]["lora_rotate"]["vars"] == ["METRALE_LORA_ROTATE"]
    assert "from_values is not in the files given" in doc["levers"]["ssd"]["fill_in"]

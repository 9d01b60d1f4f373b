"""Every registered kernel path is what its decision table says, and
``common.path.declared_path`` (the only way a path is declared) refuses a
declaration that would say otherwise: variants that are not exactly the
table's, a variant named other than its key, a bind where the table has
none or none where it has one, and any field the table gives.

Each refusal is asserted on its message, beside the same declaration
without the fault, which passes: a refusal for some other reason fails
the test."""

from __future__ import annotations

import dataclasses
import importlib

import pytest

from leverctl_kernels.common.path import Variant, declared_path
from leverctl_kernels.registry import all_paths, family_paths, get_path, spec_module
from leverctl_kernels.selection import TABLES

FAMILIES = ("w4a16", "gdn", "attention", "decode", "ffn", "lora", "mamba2", "moe")

# The KernelPath fields a declaration takes from its decision table.
FROM_TABLE = ("name", "family", "summary", "levers", "lever_defaults", "select", "engines", "baselines")


def declaration_fields(path) -> dict:
    """What ``path``'s declaration gave ``declared_path`` besides its table
    and its variants: ``declared_path(table, path.variants, **these)`` is
    ``path`` again."""
    return {f.name: getattr(path, f.name) for f in dataclasses.fields(path) if f.name not in (*FROM_TABLE, "variants")}


# ── the registry ─────────────────────────────────────────────────────────────


def test_the_registry_has_one_path_per_table_in_the_tables_order_each_in_its_own_folder():
    assert [p.name for p in all_paths()] == list(TABLES)
    for name in TABLES:
        assert spec_module(name) == f"leverctl_kernels.{name}.spec"
        assert get_path(name) is importlib.import_module(spec_module(name)).PATH
    assert spec_module("gdn.verify") == "leverctl_kernels.gdn.verify.spec"
    with pytest.raises(KeyError):
        get_path("gdn.other")


def test_family_paths_partition_the_paths_in_the_tables_order():
    assert {p.family for p in all_paths()} == set(FAMILIES)
    assert [p.name for f in FAMILIES for p in family_paths(f)] == [p.name for p in all_paths()]
    for f in FAMILIES:
        assert family_paths(f) and all(p.family == f == p.name.split(".")[0] for p in family_paths(f))
    assert get_path("ffn.prefill").family == "ffn"
    assert {p.family for p in map(get_path, ("moe.prefill_grouped", "moe.prefill_sorted", "moe.shared_expert"))} == {
        "moe"
    }
    assert family_paths("ffn_prefill") == family_paths("moe_prefill") == ()


@pytest.mark.parametrize("name", list(TABLES))
def test_a_registered_path_is_its_tables(name):
    p, t = get_path(name), TABLES[name]
    assert (p.name, p.family, p.summary) == (t.path, t.family, t.summary)
    assert p.levers == t.levers
    assert tuple(p.variants) == t.variants
    assert all(v.name == key for key, v in p.variants.items())
    assert p.engines == t.engines and p.baselines == t.baselines
    assert p.select == t.select and p.select.__self__ is t and p.select.__func__ is type(t).select
    assert (p.bind is not None) == bool(t.binds)
    assert dict(p.lever_defaults) == dict(t.fixed)


# ── declared_path refuses what would disagree with the table ────────────────

# A path without a bind and one whose table says two levers bind the run.
PLAIN, BOUND = "gdn.verify", "attention.paged_decode"


def _declaration(name: str):
    """(table, variants, fields) of a registered path's declaration."""
    path = get_path(name)
    return TABLES[name], dict(path.variants), declaration_fields(path)


@pytest.mark.parametrize("name", [PLAIN, BOUND])
def test_the_declaration_as_given_is_accepted_and_is_the_registered_path(name):
    table, variants, fields = _declaration(name)
    assert declared_path(table, variants, **fields) == get_path(name)


def test_variants_in_another_order_are_listed_in_the_tables():
    table, variants, fields = _declaration(PLAIN)
    reordered = declared_path(table, dict(reversed(variants.items())), **fields)
    assert tuple(reordered.variants) == table.variants == ("wy17", "wyn", "recurrent")


def test_a_variants_mapping_missing_a_table_variant_is_refused():
    table, variants, fields = _declaration(PLAIN)
    del variants["wyn"]
    with pytest.raises(ValueError) as e:
        declared_path(table, variants, **fields)
    assert str(e.value) == "gdn.verify: variants ['recurrent', 'wy17'] are not the table's ['recurrent', 'wy17', 'wyn']"


def test_a_variants_mapping_with_an_extra_variant_is_refused():
    table, variants, fields = _declaration(PLAIN)
    variants["wy8"] = Variant("wy8", "a variant the table does not have", variants["wyn"].build)
    with pytest.raises(ValueError) as e:
        declared_path(table, variants, **fields)
    assert str(e.value) == (
        "gdn.verify: variants ['recurrent', 'wy17', 'wy8', 'wyn'] are not the table's ['recurrent', 'wy17', 'wyn']"
    )


def test_a_variant_whose_name_is_not_its_key_is_refused():
    table, variants, fields = _declaration(PLAIN)
    variants["wyn"] = dataclasses.replace(variants["wyn"], name="wy_n")
    with pytest.raises(ValueError) as e:
        declared_path(table, variants, **fields)
    assert str(e.value) == "gdn.verify: variant 'wyn' is declared as 'wy_n'"


def test_a_declaration_without_the_bind_its_table_says_it_needs_is_refused():
    table, variants, fields = _declaration(BOUND)
    assert fields["bind"] is not None
    with pytest.raises(ValueError) as e:
        declared_path(table, variants, **{**fields, "bind": None})
    assert str(e.value) == (
        "attention.paged_decode: the table says levers ['kv_poison', 'max_decode_seqs'] bind "
        "the run; the declaration has no bind"
    )


def test_a_bind_where_the_table_has_none_is_refused():
    table, variants, fields = _declaration(PLAIN)
    assert fields["bind"] is None and not table.binds
    with pytest.raises(ValueError) as e:
        declared_path(table, variants, **{**fields, "bind": lambda levers, shape, engine: shape})
    assert str(e.value) == "gdn.verify: the table says levers [] bind the run; the declaration has bind"


@pytest.mark.parametrize("field", FROM_TABLE)
def test_a_field_that_comes_from_the_table_is_refused(field):
    table, variants, fields = _declaration(PLAIN)
    given = {
        "select": lambda levers, shape: None,
        "levers": ("gdn_wy17",),
        "engines": ("metrale",),
        "baselines": ("recurrent",),
        "lever_defaults": {"gdn_wy17": False},
    }.get(field, "something else")
    with pytest.raises(TypeError) as e:
        declared_path(table, variants, **fields, **{field: given})
    assert str(e.value) == f"gdn.verify: {field} comes from the decision table"

"""The value a decision table assumes for a lever that a caller's mapping
leaves out (or holds as None), ``Table.assumed``, is read from the shipped
catalogs: for every lever of every table it is the lever's default in each
catalog of the table's engines that has the lever (an unset tri-state is
off), those engines agree, and ``select`` takes it where the lever is
missing. A lever no catalog has, or one the engines default differently,
has no value to assume and is refused."""

from __future__ import annotations

import dataclasses

import pytest

from leverctl.levers.catalog import SHIPPED, load_catalog
from leverctl_kernels.selection import TABLES, Rule, Table


def catalog_defaults(table) -> dict[str, dict[str, object]]:
    """lever -> {engine: its default there, as the table reads it}, over the
    table's engines (every shipped one where it names none)."""
    out: dict[str, dict[str, object]] = {}
    for engine in table.engines or SHIPPED:
        cat = load_catalog(engine)
        for f in table.levers:
            if f in cat.levers:
                d = cat.levers[f].default
                out.setdefault(f, {})[engine] = False if d is None else bool(d)
    return out


@pytest.mark.parametrize("name", list(TABLES))
def test_assumed_lever_values_read_from_the_catalogs_agree(name):
    table = TABLES[name]
    found = catalog_defaults(table)
    assert set(found) == set(table.levers), f"levers in no catalog of {table.engines or SHIPPED}"
    for f, by_engine in found.items():
        assert len(set(by_engine.values())) == 1, (f, by_engine)
        assert table.assumed[f] == next(iter(by_engine.values())), (f, by_engine)
    assert set(table.assumed) == set(table.levers)


@pytest.mark.parametrize("name", list(TABLES))
def test_a_missing_or_unset_lever_selects_as_its_assumed_value(name):
    from leverctl_kernels.registry import get_path

    table = TABLES[name]
    for shape in get_path(name).shapes("smoke", None):
        want = table.select(dict(table.assumed), shape)
        assert table.select({}, shape) == want
        assert table.select({f: None for f in table.levers}, shape) == want


def test_the_lever_whose_assumption_changed_is_metrales_split_silu_default():
    """``w4a16.ffn_decode``'s decode_split_silu: only Metrale's catalog has
    it, on by default; Atlas's fixed behaviour (fused) is the path's
    ``lever_defaults``, not an assumption."""
    table = TABLES["w4a16.ffn_decode"]
    assert catalog_defaults(table)["decode_split_silu"] == {"metrale": True}
    assert table.assumed["decode_split_silu"] is True and dict(table.fixed) == {"decode_split_silu": False}
    assert table.select({}, {}).variant == "gemv_sw+split"


def test_a_lever_in_no_catalog_is_refused():
    table = Table("x.y", "s", ("no_such_lever",), ("v",), (Rule("v"),))
    with pytest.raises(ValueError, match="^x.y: lever 'no_such_lever' has no default in the engines' catalogs$"):
        table.assumed


@pytest.fixture
def catalogs_read_again():
    """The tables read each engine's catalog once (``rules._catalog_defaults``,
    cached): a test that substitutes a catalog has it read again, and
    leaves the real ones to be read after it."""
    from leverctl_kernels.selection import rules

    cached = getattr(rules, "_catalog_defaults", None)
    clear = getattr(cached, "cache_clear", lambda: None)
    clear()
    yield
    clear()


def test_a_lever_the_engines_default_differently_is_refused(monkeypatch, catalogs_read_again):
    """No shipped lever does so today: Atlas's catalog is given another
    default for gemv_sw here."""
    import leverctl.levers.catalog as catalog

    real = catalog.load_catalog

    def load(engine=None, path=None):
        cat = real(engine, path)
        if engine != "atlas":
            return cat
        lv = cat.levers["gemv_sw"]
        flipped = dataclasses.replace(lv, default=not lv.default)
        return dataclasses.replace(cat, levers={**cat.levers, "gemv_sw": flipped})

    monkeypatch.setattr(catalog, "load_catalog", load)
    assert load("atlas").levers["gemv_sw"].default is not load("metrale").levers["gemv_sw"].default
    table = dataclasses.replace(TABLES["w4a16.gemv"])  # a new instance: nothing cached
    assert table.engines == ()
    with pytest.raises(
        ValueError, match="^w4a16.gemv: lever 'gemv_sw' has no single default in the engines' catalogs$"
    ):
        table.assumed

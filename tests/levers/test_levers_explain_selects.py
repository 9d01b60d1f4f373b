"""What explain says a lever value selects is what the kernels' select() returns.

Explain words each steered path's decision table
(``leverctl_kernels.selection``); every declared kernel path runs its table
as ``select``. These tests hold the two together for every lever of both
engines, each of its values, at every smoke and model shape of every path
it steers, and keep the catalogs' ``steers`` and the paths' levers in step.
"""

from __future__ import annotations

import dataclasses

import pytest

from leverctl.bench.plan import applies, build_plan, path_levers
from leverctl.levers import load_catalog
from leverctl.levers.explain import explain, words
from leverctl_kernels.common.path import Choice
from leverctl_kernels.registry import all_paths
from leverctl_kernels.selection import TABLES, Case

ENGINES = ("atlas", "metrale")


@pytest.fixture(scope="module")
def paths():
    return {p.name: p for p in all_paths()}


def disagreements(cat, paths) -> tuple[list[str], int]:
    """Every (lever, value, path, shape) where explain's case differs from
    select(), and how many were compared."""
    bad, compared = [], 0
    defaults = {f: lv.default for f, lv in cat.levers.items()}
    for lv in cat.levers.values():
        for st in explain(cat, lv).selects:
            path = paths.get(st.path)
            if path is None:
                if st.kernel:
                    bad.append(f"{lv.field}: explain claims a kernel for {st.path}")
                continue
            if not applies(path, cat.engine, cat.fields):
                if st.applies:
                    bad.append(f"{lv.field}: explain claims {st.path} applies to {cat.engine}")
                continue
            table = TABLES[st.path]
            for sel in st.selected:
                values = {**defaults, lv.field: sel.value, **dict([sel.with_] if sel.with_ else [])}
                levers = path_levers(path, values, cat.fields)
                for preset in ("smoke", "model"):
                    for shape in path.shapes(preset, None):
                        said = next(c for c in sel.cases if c.holds(table, shape))
                        got = path.select(levers, shape).variant
                        compared += 1
                        if said.variant != got:
                            bad.append(
                                f"{lv.field}={sel.value} {st.path} at {shape.label}: "
                                f"explain says {said.variant}, select() returns {got}"
                            )
    return bad, compared


@pytest.mark.parametrize("engine", ENGINES)
def test_for_every_lever_and_value_explain_names_the_variant_select_returns_at_every_shape(engine, paths):
    bad, compared = disagreements(load_catalog(engine), paths)
    assert not bad, bad
    assert compared > 50


def test_the_agreement_check_fails_when_a_path_selects_otherwise(paths):
    verify = paths["gdn.verify"]
    always_recurrent = dataclasses.replace(verify, select=lambda levers, shape: Choice("recurrent"))
    bad, _ = disagreements(load_catalog("atlas"), {**paths, "gdn.verify": always_recurrent})
    assert any("gdn_wy17=True gdn.verify" in b and "select() returns recurrent" in b for b in bad), bad


@pytest.mark.parametrize("engine", ENGINES)
def test_every_lever_of_a_path_explains_both_its_values_there(engine, paths):
    cat = load_catalog(engine)
    for path in paths.values():
        if not applies(path, engine, cat.fields):
            continue
        for f in path.levers:
            if f not in cat.fields:
                continue
            st = {s.path: s for s in explain(cat, cat.lever(f)).selects}.get(path.name)
            assert st is not None and st.applies, (f, path.name)
            # an on/off lever both ways; one unset by default (a tri-state, an optional count) unset and
            # both ways; a count (max_decode_seqs) at its default
            default = cat.lever(f).default
            want = {True, False} if isinstance(default, bool) else {None, True, False} if default is None else {default}
            assert {s.value for s in st.selected if s.with_ is None} == want, (f, path.name)


@pytest.mark.parametrize("engine", ENGINES)
def test_a_catalog_steers_a_declared_path_exactly_when_the_path_is_chosen_by_that_lever(engine, paths):
    cat = load_catalog(engine)
    for lv in cat.levers.values():
        for name in lv.steers:
            if name in paths:
                assert applies(paths[name], engine, cat.fields), (lv.field, name)
                assert lv.field in paths[name].levers, (lv.field, name)
    for path in paths.values():
        if applies(path, engine, cat.fields):
            for f in path.levers:
                if f in cat.fields:
                    assert path.name in cat.lever(f).steers, (f, path.name)


def test_every_declared_path_runs_its_table_and_every_table_is_declared(paths):
    assert set(paths) == set(TABLES)
    for name, path in paths.items():
        t = TABLES[name]
        assert path.select == t.select and path.select.__self__ is t
        assert path.levers == t.levers and path.engines == t.engines
        assert tuple(path.variants) == t.variants and path.summary == t.summary


# Shapes of the GDN decode around the fused conv kernel's conditions: Hv = 2 Hk,
# dk = dv = the head dim it is built for (128, or a smoke shape's own).
FUSED_SHAPES = [
    dict(hk=16, hv=32, dk=128, dv=128),  # Qwen3-Next: eligible
    dict(hk=16, hv=16, dk=128, dv=128),  # Hv = Hk
    dict(hk=16, hv=32, dk=64, dv=128),
    dict(hk=16, hv=32, dk=128, dv=64),
    dict(hk=8, hv=8, dk=64, dv=64),  # both conditions fail
    dict(hk=2, hv=4, dk=8, dv=8, fused_head_dim=8),  # a smoke shape's lowered head dim
    dict(hk=2, hv=4, dk=8, dv=8),  # the same without it: 128 asked for
    dict(hk=2, hv=4, dk=12, dv=12, fused_head_dim=8),
]


def _eligible_as_written(d) -> tuple[bool, str]:
    """The fused kernel's conditions written out again (the kernel's own
    check before it read them from the table)."""
    want = d.get("fused_head_dim", 128)
    if d["hv"] != 2 * d["hk"]:
        return False, f"fused conv kernel needs Hv == 2*Hk (got Hv={d['hv']}, Hk={d['hk']})"
    if not d["dk"] == d["dv"] == want:
        return False, f"fused conv kernel needs dk == dv == {want} (got dk={d['dk']}, dv={d['dv']})"
    return True, ""


@pytest.mark.parametrize("dims", FUSED_SHAPES, ids=lambda d: "-".join(f"{k}{v}" for k, v in d.items()))
def test_the_fused_kernels_eligibility_and_the_tables_fused_rule_agree(dims, paths):
    """``eligible`` (which the fused kernel's build checks) and the fused conv
    table's rule for the fused kernel hold at the same shapes, and where
    they do not they say the same why."""
    from leverctl_kernels.common.path import Shape
    from leverctl_kernels.gdn.fused_conv.fused import eligible
    from leverctl_kernels.selection.gdn import FUSED_CONV, FUSED_HEAD_DIM

    shape = Shape("s", {**dims, "n": 1, "conv_width": 4})
    ok, why = eligible(shape)
    assert (ok, why) == _eligible_as_written(dims)
    choice = FUSED_CONV.select({"gdn_fused_conv": True}, shape)
    assert (choice.variant == "fused") == ok
    assert paths["gdn.fused_conv"].select({"gdn_fused_conv": True}, shape) == choice
    if not ok:
        assert choice.note.startswith(f"gdn_fused_conv on but not taken: {why}"), choice.note
    assert FUSED_HEAD_DIM == 128


def test_the_agreement_check_would_catch_a_fused_rule_that_dropped_a_condition():
    from leverctl_kernels.common.path import Shape
    from leverctl_kernels.gdn.fused_conv.fused import eligible
    from leverctl_kernels.selection.gdn import FUSED_CONV

    fused = next(r for r in FUSED_CONV.rules if r.variant == "fused")
    assert len(fused.shape) == 2
    rules = tuple(dataclasses.replace(r, shape=r.shape[:1]) if r is fused else r for r in FUSED_CONV.rules)
    loose = dataclasses.replace(FUSED_CONV, rules=rules)
    shape = Shape("s", dict(hk=16, hv=32, dk=64, dv=128, n=1))
    assert not eligible(shape)[0] and loose.select({"gdn_fused_conv": True}, shape).variant == "fused"


def test_explain_says_which_variant_a_17_token_verify_falls_back_to():
    cat = load_catalog("atlas")
    st = explain(cat, cat.lever("gdn_wy17")).selects[0]
    off = next(s for s in st.selected if s.value is False and s.with_ is None)
    assert st.path == "gdn.verify" and off.text.startswith("wyn")
    both_off = next(s for s in st.selected if s.value is False and s.with_ == ("gdn_wyn", False))
    assert both_off.text.startswith("recurrent")


def test_metrales_batched_fla_steers_the_multi_stream_prefill_kernel(paths):
    m, a = load_catalog("metrale"), load_catalog("atlas")
    (st,) = explain(m, m.lever("gdn_batched_fla")).selects
    assert (st.path, st.kernel, st.applies) == ("gdn.prefill_multi_stream", True, True)
    assert [s.text for s in st.selected] == [
        "per_stream [gdn_batched_fla off: one prefill launch per stream]",
        "dk = dv = 128: batched; otherwise: per_stream [gdn_batched_fla on but not taken: dk or dv != 128]",
    ]
    assert "prefill" in m.lever("gdn_batched_fla").summary
    assert applies(paths["gdn.prefill_multi_stream"], "metrale", m.fields)
    assert not applies(paths["gdn.prefill_multi_stream"], "atlas", a.fields)
    (st,) = explain(a, a.lever("gdn_batched_fla")).selects
    assert (st.path, st.applies) == ("gdn.decode", True)
    assert not applies(paths["gdn.decode"], "metrale", m.fields)


def test_a_metrale_bench_plan_measures_batched_fla_on_the_multi_stream_prefill_not_the_decode(paths):
    m = load_catalog("metrale")
    values = {f: lv.default for f, lv in m.levers.items()}
    for on in (False, True):
        plan = build_plan(
            list(paths.values()), engine="metrale", catalog_fields=m.fields, values={**values, "gdn_batched_fla": on}
        )
        fla = [i for i in plan.items if "gdn_batched_fla" in i.levers]
        assert fla and {i.kernel for i in fla} == {"gdn.prefill_multi_stream"}
        assert {i.variant for i in fla} == {"batched" if on else "per_stream"}  # model shapes: d = 128
        assert not any(i.kernel == "gdn.decode" for i in plan.items)


def test_a_case_list_reads_as_one_line():
    assert words((Case(("T = 17",), "wy17"), Case((), "wyn"))) == "T = 17: wy17; otherwise: wyn"
    assert words((Case(("T = 17",), "wyn", "why"), Case((), "wyn"))) == "wyn [T = 17: why]"


def test_a_declaration_cannot_disagree_with_its_table(paths):
    """Everything the old declaration-time check compared comes from the
    table now: ``declared_path`` refuses a declaration that states any of
    it, lists the variants in the table's order whatever the declaration's,
    refuses variants that are not the table's; and a name without a table
    is no path."""
    from leverctl_kernels.common.path import declared_path
    from leverctl_kernels.registry import get_path

    verify, table = paths["gdn.verify"], TABLES["gdn.verify"]
    taken = ("name", "family", "summary", "levers", "lever_defaults", "select", "engines", "baselines")
    fields = {f.name: getattr(verify, f.name) for f in dataclasses.fields(verify) if f.name not in (*taken, "variants")}
    assert declared_path(table, verify.variants, **fields) == verify
    for change in (
        {"summary": "something else"},
        {"levers": ("gdn_wy17",)},
        {"engines": ("metrale",)},
        {"select": lambda levers, shape: Choice("wyn")},
        {"name": "gdn.other"},
    ):
        (field,) = change
        with pytest.raises(TypeError, match=f"^gdn.verify: {field} comes from the decision table$"):
            declared_path(table, verify.variants, **fields, **change)
    reordered = declared_path(table, dict(reversed(verify.variants.items())), **fields)
    assert tuple(reordered.variants) == table.variants == ("wy17", "wyn", "recurrent")
    with pytest.raises(ValueError, match=r"variants \['recurrent', 'wy17'\] are not the table's"):
        declared_path(table, {v: verify.variants[v] for v in ("wy17", "recurrent")}, **fields)
    with pytest.raises(KeyError):
        get_path("gdn.other")


def test_metrales_per_sequence_decode_levers_each_steer_the_measured_step_path(paths):
    """Each lever reaches per_sequence at the smoke shape of its own kind of
    model and leaves the other kind batched, as select() does."""
    m = load_catalog("metrale")
    hybrid, mla = paths["decode.per_sequence"].shapes("smoke", None)
    for field, kind, other in (("hc_perseq_decode", hybrid, mla), ("mla_perseq_fallback", mla, hybrid)):
        (st,) = [s for s in explain(m, m.lever(field)).selects if s.path == "decode.per_sequence"]
        assert st.kernel and st.applies
        on = next(s for s in st.selected if s.value is True and s.with_ is None)
        table = TABLES["decode.per_sequence"]
        assert next(c for c in on.cases if c.holds(table, kind)).variant == "per_sequence"
        assert next(c for c in on.cases if c.holds(table, other)).variant == "batched"

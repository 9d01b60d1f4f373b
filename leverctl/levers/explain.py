"""Explain one lever: its rule in plain words, what each kind of value does,
its traps, its default, and the kernel paths it steers.

What each value selects on a kernel path is worded from the path's decision
table in ``leverctl_kernels.selection``, the table its ``select()`` runs, so
explain and the kernels cannot disagree (a test holds them to it for every
lever of both engines). That module is plain data: explain still imports
neither numba nor numpy.

Pure: takes catalogs (and, optionally, the raw values currently set) and
returns an :class:`Explanation`; the CLI renders it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from ..errors import UserError
from .catalog import Catalog, Lever
from .intent import Surprise, assignment, examples, judge, single, state, traps
from .kinds import KINDS
from .resolve import Raw
from .suggest import did_you_mean

NO_KERNEL = "no kernel in leverctl yet: bench and sweep do not measure it"


@dataclass(frozen=True)
class Selected:
    """What one setting selects on one path: ``value`` is this lever's value
    (JSON), ``with_`` another lever of the path set away from its default
    (``(field, value)``) or None when every other lever is at its default."""

    value: Any
    with_: tuple[str, Any] | None
    cases: tuple  # of leverctl_kernels.selection.Case
    text: str

    def to_json(self) -> dict[str, Any]:
        return {
            "value": self.value,
            "with": dict([self.with_]) if self.with_ else {},
            "cases": [{"when": list(c.when), "variant": c.variant, "note": c.note} for c in self.cases],
            "text": self.text,
        }


@dataclass(frozen=True)
class Steered:
    """A path the lever steers: whether leverctl has kernels for it (and in
    this engine), the other levers' defaults, and what each setting selects."""

    path: str
    kernel: bool
    applies: bool
    defaults: tuple[tuple[str, Any], ...] = ()
    selected: tuple[Selected, ...] = ()
    # What the lever's value does on the path besides choosing the variant
    # (the table's ``binds``), and the variants no lever selects that bench
    # and sweep run beside (its ``baselines``).
    binds: str = ""
    baselines: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "kernel": self.kernel,
            "applies": self.applies,
            "defaults": dict(self.defaults),
            "selected": [x.to_json() for x in self.selected],
            "binds": self.binds,
            "baselines": list(self.baselines),
        }


@dataclass(frozen=True)
class Match:
    """How a name given to explain found its lever: ``how`` is field,
    variable, field-case, variable-case or unprefixed; ``var`` the variable
    it names (None for a field name)."""

    name: str
    how: str
    var: str | None
    text: str


@dataclass(frozen=True)
class Explanation:
    engine: str
    engine_title: str
    field: str
    group: str
    vars: tuple[str, ...]
    kind: str
    rule: str
    summary: str
    values: tuple[tuple[str, str], ...]
    examples: tuple[tuple[str, str], ...]
    traps: tuple[str, ...]
    default: str
    steers: tuple[str, ...]
    requires: tuple[str, ...]
    needed_by: tuple[str, ...]
    diagnostic: bool
    notes: str
    # The value asked about (`explain VAR=VALUE`) and what it does, if any.
    asked: str | None = None
    asked_result: str | None = None
    asked_verdict: str | None = None
    # How the current setting resolves, when the caller passed one.
    current: str | None = None
    also_in: tuple[str, ...] = field(default_factory=tuple)
    selects: tuple[Steered, ...] = field(default_factory=tuple)
    matched: Match | None = None

    def to_json(self) -> dict[str, Any]:
        d = {k: getattr(self, k) for k in self.__dataclass_fields__}
        for k in ("values", "examples"):
            d[k] = [list(p) for p in d[k]]
        for k in ("vars", "traps", "steers", "requires", "needed_by", "also_in"):
            d[k] = list(d[k])
        d["selects"] = [x.to_json() for x in self.selects]
        d["matched"] = (
            None
            if self.matched is None
            else {
                "name": self.matched.name,
                "how": self.matched.how,
                "var": self.matched.var,
                "text": self.matched.text,
            }
        )
        return d


def find(catalogs: Sequence[Catalog], name: str) -> tuple[Catalog, Lever]:
    """The lever a field name or variable names, in the first catalog that has
    it. Matching forgives case and a missing engine prefix; a near miss is an
    error that suggests the nearest name."""
    cat, lv, _ = lookup(catalogs, name)
    return cat, lv


def lookup(catalogs: Sequence[Catalog], name: str) -> tuple[Catalog, Lever, Match]:
    """As :func:`find`, with how the name matched (see :class:`Match`)."""
    for cat in catalogs:
        got = _match(cat, name)
        if got is not None:
            return cat, got[0], got[1]
    names = [n for cat in catalogs for n in (*cat.fields, *cat.variables())]
    where = " or ".join(c.title for c in catalogs)
    raise UserError(f"no {where} lever field or variable by that name{did_you_mean(name, names)}", name)


def _match(cat: Catalog, name: str) -> tuple[Lever, Match] | None:
    """The lever ``name`` names in ``cat``: exactly (a field or a variable),
    else forgiving case, else adding the engine's prefix. Every forgiven
    match says so: the engine itself reads only the exact variable name."""
    title = cat.title

    def var_text(lv: Lever) -> str:
        if not lv.vars:
            return "no variable: it is configuration"
        return "variable" + ("s " if len(lv.vars) > 1 else " ") + ", ".join(lv.vars)

    if name in cat.levers:
        lv = cat.levers[name]
        return lv, Match(name, "field", None, f"field {lv.field} of {title} ({var_text(lv)})")
    by_var = cat.by_var()
    if name in by_var:
        lv = by_var[name]
        return lv, Match(name, "variable", name, f"variable {name}, field {lv.field} of {title}")

    def unprefixed(v: str, lv: Lever) -> tuple[Lever, Match]:
        return lv, Match(
            name,
            "unprefixed",
            v,
            f"variable {v}, field {lv.field} of {title}, adding the engine prefix "
            f"{cat.prefix}: the engine reads only {v}; {name} alone it ignores",
        )

    if cat.prefix + name in by_var:
        return unprefixed(cat.prefix + name, by_var[cat.prefix + name])
    low = name.lower()
    for f, lv in cat.levers.items():
        if f.lower() == low:
            return lv, Match(
                name, "field-case", None, f"field {lv.field} of {title} ({var_text(lv)}), case-insensitively"
            )
    up = name.upper()
    for v, lv in by_var.items():
        if v.upper() == up:
            return lv, Match(
                name,
                "variable-case",
                v,
                f"variable {v}, field {lv.field} of {title}, case-insensitively: the engine "
                f"reads only {v}; {name} is a different variable it ignores",
            )
    for v, lv in by_var.items():
        if v.upper() == cat.prefix.upper() + up:
            return unprefixed(v, lv)
    return None


def selected_label(field: str, s: Steered, sel: Selected) -> str:
    """How ``explain`` and the lever reference name one setting of a steered
    path: ``gdn_wy17 off``, ``(default)`` for the lever's default with the
    others at theirs, and the other lever set away from its default."""
    from .intent import state

    label = f"{field} {state(sel.value)}"
    if sel.with_ is None and sel.value == s.selected[0].value:
        label += " (default)"
    if sel.with_ is not None:
        label += f", {sel.with_[0]} {state(sel.with_[1])}"
    return label


def steered_name(s: Steered, code=lambda path: path) -> str:
    """A steered path's name (``code`` spells it), and why it has no effect here if it has none."""
    if not s.kernel:
        return f"{code(s.path)} ({NO_KERNEL})"
    if not s.applies:
        return f"{code(s.path)} (not in this engine)"
    return code(s.path)


def defaults_text(s: Steered) -> str:
    """``(other levers at their defaults: ...)``, or '' where the path has no others."""
    from .intent import state

    if not s.defaults:
        return ""
    return "(other levers at their defaults: " + ", ".join(f"{f} {state(v)}" for f, v in s.defaults) + ")"


def selection_lines(field: str, s: Steered) -> list[str]:
    """What each setting of ``field`` selects on ``s``, then what its value
    does besides and which variants run beside: the lines ``explain`` and
    the lever reference both print."""
    out = [f"{selected_label(field, s, sel)}: {sel.text}" for sel in s.selected]
    if s.binds:
        out.append(f"and its value reaches the run: it {s.binds}")
    if s.baselines:
        out.append(f"bench and sweep also run {', '.join(s.baselines)}, which no lever selects")
    return out


def selects(cat: Catalog, lv: Lever) -> tuple[Steered, ...]:
    """What each value of ``lv`` selects on every path it steers, worded
    from the path's decision table: the other levers of the path at their
    defaults in this engine, then each other lever the engine can change
    flipped from its default, where that changes the outcome."""
    from leverctl_kernels.selection import TABLES

    out = []
    for name in lv.steers:
        table = TABLES.get(name)
        if table is None:
            out.append(Steered(name, kernel=False, applies=False))
            continue
        fields = set(cat.fields)
        applies = (cat.engine in table.engines) if table.engines else any(f in fields for f in table.levers)
        if not applies or lv.field not in table.levers:
            out.append(Steered(name, kernel=True, applies=False))
            continue
        base = {
            f: (cat.lever(f).default if f in fields else table.fixed.get(f, table.assumed[f])) for f in table.levers
        }
        mine = _domain(lv.default)
        rows = [Selected(v, None, c := table.cases({**base, lv.field: v}), words(c)) for v in mine]
        for other in table.levers:
            if other == lv.field or other not in fields or not isinstance(base[other], bool):
                continue
            flipped = not base[other]
            alt = [
                Selected(v, (other, flipped), c := table.cases({**base, lv.field: v, other: flipped}), words(c))
                for v in mine
            ]
            if [a.cases for a in alt] != [r.cases for r in rows[: len(mine)]]:
                rows.extend(alt)
        defaults = tuple((f, base[f]) for f in table.levers if f != lv.field)
        out.append(
            Steered(
                name,
                kernel=True,
                applies=True,
                defaults=defaults,
                selected=tuple(rows),
                binds=table.binds.get(lv.field, ""),
                baselines=table.baselines,
            )
        )
    return tuple(out)


def _domain(default: Any) -> tuple[Any, ...]:
    """The values a steering lever is explained at: its default first."""
    if isinstance(default, bool):
        return (default, not default)
    if default is None:
        return (None, True, False)
    return (default,)


def words(cases) -> str:
    """A case list in one line: ``T = 17: wy17; otherwise: wyn``, or the one
    variant when every shape takes it; each note in brackets, after the
    shapes it holds at."""

    def where(c) -> str:
        return " and ".join(c.when) if c.when else ("otherwise" if len(cases) > 1 else "")

    if len({c.variant for c in cases}) == 1:
        notes = "".join(f" [{where(c) + ': ' if where(c) else ''}{c.note}]" for c in cases if c.note)
        return cases[0].variant + notes
    return "; ".join(f"{where(c)}: {c.variant}" + (f" [{c.note}]" if c.note else "") for c in cases)


def explain(
    cat: Catalog,
    lv: Lever,
    *,
    asked: tuple[str, Raw] | None = None,
    current: Mapping[str, Raw] | None = None,
    others: Sequence[Catalog] = (),
    matched: Match | None = None,
) -> Explanation:
    kind = KINDS[lv.kind]
    needed_by = tuple(f for f, other in cat.levers.items() if lv.field in other.requires)
    concrete = []
    for _var, s in traps(lv):
        concrete.append(s.message)
    asked_text = asked_result = asked_verdict = None
    if asked is not None:
        var, raw = asked
        got = single(lv, var, raw)
        asked_text = assignment(var, raw)
        asked_result = state(got)
        sur: Surprise | None = judge(lv, var, raw)
        asked_verdict = sur.message if sur is not None else None
    cur = None
    if current is not None and lv.vars:
        from .kinds import Observed, evaluate
        from .resolve import utf8

        obs = Observed(lambda v: utf8(current.get(v)), lambda v: current.get(v) is not None, {}, {})
        got, _ = evaluate(lv.kind, lv.vars, obs, field=lv.field, default=lv.default, cap=lv.cap)
        setting = ", ".join(assignment(v, current.get(v)) for v in lv.vars)
        cur = f"{setting} -> {state(got)}"
    return Explanation(
        engine=cat.engine,
        engine_title=cat.title,
        field=lv.field,
        group=str(cat.groups.get(lv.group, lv.group)),
        vars=lv.vars,
        kind=lv.kind,
        rule=kind.title,
        summary=lv.summary,
        values=kind.values,
        examples=tuple((a, state(v)) for a, v in examples(lv)),
        traps=(*concrete, *kind.traps),
        default=state(lv.default)
        if lv.kind != "build_default"
        else f"{state(lv.default)} (or the build's [build] {lv.field} default)",
        steers=lv.steers,
        requires=lv.requires,
        needed_by=needed_by,
        diagnostic=lv.diagnostic,
        notes=lv.notes,
        asked=asked_text,
        asked_result=asked_result,
        asked_verdict=asked_verdict,
        current=cur,
        also_in=tuple(o.engine for o in others if o.engine != cat.engine and _match(o, lv.field) is not None),
        selects=selects(cat, lv),
        matched=matched,
    )

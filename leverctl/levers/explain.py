"""Explain one lever: its rule in plain words, what each kind of value does,
its traps, its default, and the kernel paths it steers.

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

    def to_json(self) -> dict[str, Any]:
        d = {k: getattr(self, k) for k in self.__dataclass_fields__}
        for k in ("values", "examples"):
            d[k] = [list(p) for p in d[k]]
        for k in ("vars", "traps", "steers", "requires", "needed_by", "also_in"):
            d[k] = list(d[k])
        return d


def find(catalogs: Sequence[Catalog], name: str) -> tuple[Catalog, Lever]:
    """The lever a field name or variable names, in the first catalog that has
    it. Matching forgives case and a missing engine prefix; a near miss is an
    error that suggests the nearest name."""
    for cat in catalogs:
        lv = _match(cat, name)
        if lv is not None:
            return cat, lv
    names = [n for cat in catalogs for n in (*cat.fields, *cat.variables())]
    where = " or ".join(c.title for c in catalogs)
    raise UserError(f"no {where} lever or variable named {name!r}{did_you_mean(name, names)}")


def _match(cat: Catalog, name: str) -> Lever | None:
    if name in cat.levers:
        return cat.levers[name]
    by_var = cat.by_var()
    if name in by_var:
        return by_var[name]
    low = name.lower()
    for f, lv in cat.levers.items():
        if f.lower() == low:
            return lv
    up = name.upper()
    for v, lv in by_var.items():
        if v.upper() in (up, cat.prefix.upper() + up):
            return lv
    return None


def explain(cat: Catalog, lv: Lever, *, asked: tuple[str, Raw] | None = None,
            current: Mapping[str, Raw] | None = None, others: Sequence[Catalog] = ()) -> Explanation:
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
        default=state(lv.default) if lv.kind != "build_default" else
        f"{state(lv.default)} (or the build's [build] {lv.field} default)",
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
    )

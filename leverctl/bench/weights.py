"""``leverctl bench --weights FILE``: the plan on a model file's weights.

The file is read by :mod:`leverctl.bench.checkpoint` (only the tensors
named: ``--tensor NAME``, or ``--layer N`` with or without ``--tensor
ROLE``). Every kernel path being benched whose ``extra["weights"]``
(a :class:`~leverctl_kernels.common.model_weights.WeightUse`) has a role
group whose tensors were all read runs on them: ``apply`` returns the path
on those tensors (their shapes the path's shapes), and every variant of it
is planned at the lever values nearest the resolved ones that select it
(fewest levers changed), so its record names how to get it; a variant no
lever setting selects at a shape is left out, and said. Each item carries
the file, tensors and layer, which its record's ``weights`` holds.

A tensor that does not fit a path (``WeightMismatch``) is bad input where
it was named (``--tensor NAME``); with ``--layer`` the paths it fits run,
and each one it does not is said on stderr (bad input only when none fits).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from ..errors import UserError

# Per shape, the most lever settings tried while looking for those that
# select each variant (nearest first).
MAX_TRIES = 4096


def weight_use(path) -> Any:
    return path.extra.get("weights") if path.extra else None


def used_roles(paths: Sequence[Any]) -> dict[str, frozenset[str]]:
    """role -> every role read with it, over the paths' groups."""
    out: dict[str, set[str]] = {}
    for p in paths:
        use = weight_use(p)
        for group in use.groups if use else ():
            for r in group:
                out.setdefault(r, set()).update(group)
    return {r: frozenset(g) for r, g in out.items()}


def readers_of(paths: Sequence[Any], role: str) -> list[tuple[str, tuple[str, ...], tuple[str, ...]]]:
    """(path, its engines, the group) for each group of each path holding ``role``."""
    out = []
    for p in paths:
        use = weight_use(p)
        for group in use.groups if use else ():
            if role in group:
                out.append((p.name, tuple(p.engines), tuple(group)))
    return out


def _alternatives(path, levers: Mapping[str, Any], catalog) -> dict[str, tuple[Any, ...]]:
    """Per lever of the path, the other values worth trying (a sweep's)."""
    from .sweep import sweep_values

    out = {}
    for f in path.levers:
        v = levers[f]
        if catalog is not None and f in catalog.fields:
            vals = sweep_values(catalog.lever(f), v)
        elif isinstance(v, bool):
            vals = (True, False)
        else:
            vals = (v,)
        alts = tuple(x for x in vals if not (x == v and type(x) is type(v)))
        if alts:
            out[f] = alts
    return out


def settings(path, levers: Mapping[str, Any], catalog):
    """Lever settings nearest first: (changed levers, the whole setting)."""
    alts = _alternatives(path, levers, catalog)
    names = list(alts)
    yield (), dict(levers)
    for d in range(1, len(names) + 1):
        for chosen in itertools.combinations(names, d):
            for vals in itertools.product(*(alts[f] for f in chosen)):
                yield chosen, {**levers, **dict(zip(chosen, vals))}


@dataclass(frozen=True)
class WeightsPlan:
    items: list = field(default_factory=list)
    skipped: list = field(default_factory=list)  # (path, shape label, variant)
    not_fitting: list = field(default_factory=list)  # (path, tensors, why)


def path_items(path, levers: Mapping[str, Any], preset: str, model, catalog=None, engine: str = "", weights=None):
    """``(items, skipped)``: one plan item per variant and shape of ``path``
    (already on the file's weights), each at the nearest lever setting that
    selects it; ``skipped`` the (shape label, variant) pairs none selects."""
    from .plan import PlanItem

    items, skipped = [], []
    for shape in path.shapes(preset, model):
        found: dict[str, tuple] = {}
        for tries, (changed, lv) in enumerate(settings(path, levers, catalog)):
            if tries >= MAX_TRIES or len(found) == len(path.variants):
                break
            try:
                choice = path.select(lv, shape)
            except Exception:  # noqa: BLE001 - a setting select() refuses selects nothing
                continue
            if choice.variant in path.variants and choice.variant not in found:
                found[choice.variant] = (changed, lv, choice.note)
        for variant in path.variants:
            if variant not in found:
                skipped.append((shape.label, variant))
                continue
            changed, lv, why = found[variant]
            note = "levers as resolved" if not changed else f"levers changed to select it: {', '.join(sorted(changed))}"
            at = shape
            if path.bind is not None:
                at = path.bind(lv, shape, engine)
            items.append(PlanItem(path, variant, dict(lv), at, note + (f"; {why}" if why else ""), weights=weights))
    return items, skipped


def plan_on(selection, paths: Sequence[Any], res, preset: str, model, known: Sequence[Any] = ()) -> WeightsPlan:
    """Every (path, group) the selection's tensors fill, planned; bad input
    where nothing can run (see the module's docstring). ``known``: every
    registered path, for the hint that names what would read the tensors."""
    from leverctl_kernels.common.model_weights import WeightMismatch

    from .plan import path_levers

    cat = res.catalog
    out = WeightsPlan()
    candidates = 0
    for path in paths:
        use = weight_use(path)
        for group in use.groups if use else ():
            if not set(group) <= set(selection.tensors):
                continue
            if selection.focus is not None and selection.focus not in group:
                continue
            candidates += 1
            tensors = {r: selection.tensors[r] for r in group}
            names = [t.name for t in tensors.values()]
            info = {
                "file": selection.file,
                "tensors": names,
                "layer": selection.layer,
                "roles": list(group),
                "stored": [t.stored for t in tensors.values()],
            }
            levers = path_levers(path, res.values(), cat.fields)
            try:  # a path may also refuse the tensors at a shape (a head dim they do not divide)
                on = use.apply(path, tensors)
                items, skipped = path_items(on, levers, preset, model, cat, res.engine, info)
            except WeightMismatch as e:
                why = " ".join(str(e).split())
                if selection.named:
                    raise UserError(f"tensor {names[0]} does not fit {path.name}: {why}", selection.file) from None
                out.not_fitting.append((path.name, names, why))
                continue
            out.items.extend(items)
            out.skipped.extend((path.name, label, v) for label, v in skipped)
    if candidates == 0:
        raise UserError(_nobody_reads(selection, known or paths, res.engine), selection.file)
    if not out.items and out.not_fitting:
        p, names, why = out.not_fitting[0]
        raise UserError(
            f"no kernel path fits layer {selection.layer}'s tensors: {names[0]} in {p}: {why}", selection.file
        )
    return out


def _nobody_reads(selection, known: Sequence[Any], engine: str) -> str:
    """Why no path runs on what was read, and what would."""
    roles = sorted(selection.tensors)
    what = ", ".join(f"{t.name} ({r})" for r, t in sorted(selection.tensors.items()))
    hints = []
    for role in roles:
        for name, engines, group in readers_of(known, role):
            if len(group) > 1:
                hints.append(f"{name} reads {' with '.join(group)}: give --layer N --tensor {role}")
            elif engines and engine not in engines:
                hints.append(f"{name} reads it in {', '.join(engines)}: add --engine {engines[0]}")
            else:
                hints.append(f"{name} reads it but is not being benched (-k)")
    hint = "; ".join(dict.fromkeys(hints)) or "no kernel path reads " + " or ".join(roles)
    return f"no kernel path of {engine} being benched runs on {what}: {hint}"


def stamped(selection_plan: WeightsPlan, res, preset: str):
    from .plan import Plan

    return Plan(res.engine, preset, res.catalog.digest, tuple(selection_plan.items)).stamped()

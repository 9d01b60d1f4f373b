"""The bench plan: which kernel paths an engine has, the variant its levers
choose for each, and the shapes to run them at.

A plan is a flat list of items, one per (path, variant, lever set, shape),
in a stable order; ``run.run_item`` turns one item into one record. The
sweep builds its own items (one per lever combination) with
:func:`items_for` and runs them the same way.

Levers reach a path only as resolved values: a field the engine's catalog has
takes its resolved value; a field the catalog lacks takes the path's
``lever_defaults`` (the engine's fixed behaviour there).

This module imports neither numba nor numpy.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field, replace
from typing import Any, Iterable, Mapping, Sequence

from leverctl_kernels.common.path import KernelPath, Shape

from .axes import Axes, refine

PRESETS = ("smoke", "model")
HASH_CHARS = 16  # records carry this many hex digits of a sha256


def lever_json(value: Any) -> Any:
    """A resolved lever value as JSON: bool/int/None/str as they are, the
    drafter (or any object with ``to_json``) as its object."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if hasattr(value, "to_json"):
        return value.to_json()
    if hasattr(value, "prefill") and hasattr(value, "carry"):
        return {"prefill": bool(value.prefill), "carry": bool(value.carry)}
    return str(value)


def config_value(v: Any) -> str:
    """One lever's JSON value as the config key spells it."""
    if isinstance(v, bool):
        return "1" if v else "0"
    if v is None:
        return "unset"
    if isinstance(v, dict):
        return ";".join(f"{k}:{config_value(x)}" for k, x in v.items())
    return str(v)


def config_key(path: KernelPath, levers: Mapping[str, Any]) -> str:
    """``field=value,...`` in the path's lever order: the stable key that
    matches records across runs (``gemv_sw=1``; a tri-state unset is
    ``unset``; the drafter ``drafter=prefill:1;carry:0``)."""
    return ",".join(f"{f}={config_value(lever_json(levers[f]))}" for f in path.levers if f in levers)


def applies(path: KernelPath, engine: str, catalog_fields: Iterable[str]) -> bool:
    """A path applies when it names the engine, or, naming none, when the
    engine's catalog has at least one of its levers."""
    if path.engines:
        return engine in path.engines
    fields = set(catalog_fields)
    return any(f in fields for f in path.levers)


def model_lacks(path: KernelPath, model: Mapping[str, Any] | None) -> str:
    """Why the recipe's model does not have this path ('' when it does).

    A path may declare ``extra["model_sections"]``: the ``[model.*]`` tables
    of which a model needs at least one to run it (``("gdn",)`` for the GDN
    paths). A recipe that describes its model (a ``[model]`` table with
    sizes) but none of those sections has no such layer: a dense model has
    no GDN. Without a ``[model]`` table every path is planned, at its default
    model's shapes."""
    sections = tuple(path.extra.get("model_sections", ()))
    if not sections or not model:
        return ""
    if any(model.get(s) for s in sections):
        return ""
    tables = " or ".join(f"[model.{s}]" for s in sections)
    name = model.get("name")
    return f"the model{f' {name}' if name else ''} has no {tables}"


def path_levers(path: KernelPath, values: Mapping[str, Any], catalog_fields: Iterable[str]) -> dict[str, Any]:
    """The values of the path's levers: the resolved value where the catalog
    has the field, else the path's ``lever_defaults``."""
    fields = set(catalog_fields)
    out = {}
    for f in path.levers:
        if f in fields:
            out[f] = values[f]
        elif f in path.lever_defaults:
            out[f] = path.lever_defaults[f]
        else:
            raise ValueError(f"{path.name}: lever {f!r} is neither in the catalog nor in the path's lever_defaults")
    return out


@dataclass(frozen=True)
class PlanItem:
    """One run: a record comes out of it. ``levers`` holds the resolved
    values as given (``lever_json`` turns them into the record's object);
    ``note`` carries the variant choice's note, or why the item cannot run
    (then ``variant`` may be ``""``)."""

    path: KernelPath
    variant: str
    levers: Mapping[str, Any]
    shape: Shape
    note: str = ""
    failed: bool = False  # planning itself failed; the note says why
    catalog: str = ""  # catalog digest prefix
    plan: str = ""  # plan hash prefix, stamped by Plan
    # A variant no lever selects, run beside the selected one for contrast
    # (``KernelPath.baselines``); its config names it, so its record has an
    # identity of its own.
    baseline: bool = False
    # ``bench --weights``: the model file, tensors and layer the path runs
    # on (``bench.weights``); the record's ``weights``.
    weights: Mapping[str, Any] | None = None

    @property
    def kernel(self) -> str:
        return self.path.name

    @property
    def config(self) -> str:
        key = config_key(self.path, self.levers)
        return f"{key},baseline={self.variant}" if self.baseline else key

    @property
    def key(self) -> tuple[str, str, str]:
        """The record identity: (kernel, shape label, config)."""
        return (self.kernel, self.shape.label, self.config)

    @property
    def run_key(self) -> tuple:
        """What the measurement depends on: items equal here give one record
        (the shape's sizes, not only its label: recipes may share a label)."""
        return (self.kernel, self.variant, self.shape.label, tuple(sorted(self.shape.dims.items())), self.config)

    def to_json(self) -> dict[str, Any]:
        return {
            "kernel": self.kernel,
            "variant": self.variant,
            "levers": {f: lever_json(v) for f, v in self.levers.items()},
            "config": self.config,
            "shape": self.shape.as_dict(),
            "note": self.note,
        }


def _choose(path: KernelPath, levers: Mapping[str, Any], shape: Shape) -> tuple[str, str, bool]:
    """(variant, note, failed) -- a raising or unknown choice is a failed item."""
    try:
        choice = path.select(levers, shape)
    except Exception as e:  # noqa: BLE001 - recorded as a FAIL record
        return "", f"select() raised {type(e).__name__}: {one_line(e)}", True
    if choice.variant not in path.variants:
        return choice.variant, f"select() chose unknown variant {choice.variant!r}", True
    return choice.variant, choice.note, False


def shapes_of(path: KernelPath, preset: str, model: Mapping[str, Any] | None, axes: Axes = ()) -> list[Shape]:
    """The path's shapes at ``preset``, refined by ``--axis`` values (``axes``)."""
    return refine(path, list(path.shapes(preset, model)), axes)


def items_for(
    path: KernelPath,
    levers: Mapping[str, Any],
    shapes: Sequence[Shape],
    *,
    catalog: str = "",
    engine: str = "",
) -> list[PlanItem]:
    """One item per shape for the path at these lever values (already
    restricted to the path's levers: see :func:`path_levers`), and one per
    shape for each of its baselines (variants no lever selects). A path
    that binds levers (``KernelPath.bind``) gets their values in the
    shape's dims."""
    items = []
    for shape in shapes:
        variant, note, failed = _choose(path, levers, shape)
        if path.bind is not None and not failed:
            try:
                shape = path.bind(levers, shape, engine)
            except Exception as e:  # noqa: BLE001 - recorded as a FAIL record
                note, failed = f"bind() raised {type(e).__name__}: {one_line(e)}", True
        items.append(PlanItem(path, variant, dict(levers), shape, note, failed, catalog))
        for b in path.baselines if not failed else ():
            items.append(
                PlanItem(path, b, dict(levers), shape, "baseline: no lever selects it", False, catalog, baseline=True)
            )
    return items


@dataclass(frozen=True)
class Plan:
    engine: str
    shapes: str  # the preset
    catalog: str  # full catalog digest
    items: tuple[PlanItem, ...] = field(default_factory=tuple)
    # Paths the engine has but the recipe's model does not: (path, why).
    not_in_model: tuple[tuple[str, str], ...] = field(default_factory=tuple, compare=False)

    @property
    def hash(self) -> str:
        """sha256 (hex) of the plan's identity: engine, preset, catalog and
        every item's kernel, variant, config and shape."""
        body = json.dumps(
            {
                "engine": self.engine,
                "shapes": self.shapes,
                "catalog": self.catalog,
                "items": [[i.kernel, i.variant, i.config, i.shape.as_dict()] for i in self.items],
            },
            sort_keys=True,
            separators=(",", ":"),
        )
        return hashlib.sha256(body.encode()).hexdigest()

    def stamped(self) -> Plan:
        """The plan with every item carrying the plan and catalog prefixes."""
        h = self.hash[:HASH_CHARS]
        c = self.catalog[:HASH_CHARS]
        return replace(self, items=tuple(replace(i, plan=h, catalog=c) for i in self.items))

    def to_json(self) -> dict[str, Any]:
        return {
            "engine": self.engine,
            "shapes": self.shapes,
            "catalog": self.catalog,
            "hash": self.hash,
            "items": [i.to_json() for i in self.items],
        }


def build_plan(
    paths: Sequence[KernelPath],
    *,
    engine: str,
    catalog_fields: Sequence[str],
    values: Mapping[str, Any],
    shapes: str = "smoke",
    model: Mapping[str, Any] | None = None,
    catalog_digest: str = "",
    axes: Axes = (),
) -> Plan:
    """The plan for the paths that apply to ``engine``, at the resolved lever
    ``values`` (field -> value), at the ``shapes`` preset refined by ``axes``."""
    if shapes not in PRESETS:
        raise ValueError(f"shape preset {shapes!r}: one of {PRESETS}")
    items: list[PlanItem] = []
    skipped: list[tuple[str, str]] = []
    for path in paths:
        if not applies(path, engine, catalog_fields):
            continue
        why = model_lacks(path, model)
        if why:
            skipped.append((path.name, why))
            continue
        try:
            levers = path_levers(path, values, catalog_fields)
            path_shapes = shapes_of(path, shapes, model, axes)
        except Exception as e:  # noqa: BLE001 - a broken declaration is a FAIL, not a crash
            bad = Shape(label=f"({shapes} shapes)", dims={})
            items.append(PlanItem(path, "", {}, bad, f"{type(e).__name__}: {one_line(e)}", True))
            continue
        items.extend(items_for(path, levers, path_shapes, engine=engine))
    return Plan(engine, shapes, catalog_digest, tuple(items), tuple(skipped)).stamped()


def plan_for(
    resolution,
    paths: Sequence[KernelPath],
    *,
    shapes: str = "smoke",
    model: Mapping[str, Any] | None = None,
    axes: Axes = (),
) -> Plan:
    """:func:`build_plan` from a lever ``Resolution``."""
    cat = resolution.catalog
    return build_plan(
        paths,
        engine=resolution.engine,
        catalog_fields=cat.fields,
        values=resolution.values(),
        shapes=shapes,
        model=model,
        catalog_digest=cat.digest,
        axes=axes,
    )


def one_line(e: BaseException, limit: int = 300) -> str:
    """An exception's message on one line, at most ``limit`` characters."""
    text = " ".join(str(e).split()) or type(e).__name__
    return text if len(text) <= limit else text[: limit - 1] + "…"

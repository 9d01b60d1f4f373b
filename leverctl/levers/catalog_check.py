"""Does a catalog still say what the engine's lever source says?

:func:`check` compares a :class:`~.rust_source.LeverSource` with a
:class:`~.catalog.Catalog` field by field and returns every difference as a
:class:`Finding`. A finding is *drift* (the catalog is wrong, or the source
moved: exit 1) or a note (a variable the doc only mentions, a rule or default
the files given cannot show). Notes never fail a check; they say what was not
verified rather than pretend it was.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from .catalog import Catalog, Lever, _header_lines
from .rust_source import Field, LeverSource

# The Rust types each kind's value has in the engine's struct.
UNSIGNED = ("usize", "u32", "u64")
KIND_TYPES: dict[str, tuple[str, ...]] = {
    "tristate": ("Option<bool>",),
    "count_opt": tuple(f"Option<{t}>" for t in UNSIGNED),
    "count_clamped": UNSIGNED,
    "config": UNSIGNED,
    "drafter": ("DrafterContext",),
}
BOOL_TYPES = ("bool",)

# What each finding is, and whether it is drift.
DRIFT = {
    "added": True,
    "removed": True,
    "type": True,
    "variable": True,
    "rule": True,
    "default": True,
    "mention": False,
    "unverified": False,
    "unchecked": False,
}


@dataclass(frozen=True)
class Finding:
    field: str  # "" for a finding about the whole source
    what: str  # a key of DRIFT
    message: str
    source: str = ""  # file:line in the Rust source
    catalog: str = ""  # file:line in the catalog

    @property
    def drift(self) -> bool:
        return DRIFT[self.what]

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "drift": self.drift}


@dataclass(frozen=True)
class Report:
    source: LeverSource
    catalog: Catalog
    catalog_label: str
    findings: tuple[Finding, ...]

    @property
    def drift(self) -> tuple[Finding, ...]:
        return tuple(f for f in self.findings if f.drift)

    @property
    def agrees(self) -> bool:
        return not self.drift

    def to_json(self) -> dict[str, Any]:
        return {
            "source": list(self.source.files),
            "struct": self.source.struct,
            "catalog": self.catalog_label,
            "engine": self.catalog.engine,
            "agrees": self.agrees,
            "drift": len(self.drift),
            "findings": [f.to_json() for f in self.findings],
        }


def kind_types(kind: str) -> tuple[str, ...]:
    return KIND_TYPES.get(kind, BOOL_TYPES)


def catalog_label(catalog: Catalog) -> str:
    if catalog.source.startswith("<shipped"):
        return f"leverctl/catalogs/{catalog.engine}.toml"
    return catalog.source


def _type_agrees(fd: Field, kind: str) -> bool:
    want = kind_types(kind)
    return fd.type in want or fd.type_name in want


def _same(a: Any, b: Any) -> bool:
    return type(a) is type(b) and a == b


def _fmt(value: Any) -> str:
    if value is None:
        return "unset (None)"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _names(vars_: tuple[str, ...] | list[str]) -> str:
    return ", ".join(vars_) if vars_ else "no variable"


def check(src: LeverSource, catalog: Catalog) -> Report:
    label = catalog_label(catalog)
    lines = _header_lines(catalog.data.decode("utf-8"))

    def at_catalog(field: str) -> str:
        return f"{label}:{lines[field]}" if field in lines else label

    findings: list[Finding] = []
    add = findings.append
    for fd in src.fields.values():
        here = f"{fd.file}:{fd.line}"
        lv = catalog.levers.get(fd.name)
        if lv is None:
            own = f" (its doc names {_names(fd.own_vars)})" if fd.own_vars else ""
            add(Finding(fd.name, "added", f"`{fd.name}: {fd.type}` has no catalog entry{own}", here, label))
            continue
        cat_at = at_catalog(fd.name)
        if not _type_agrees(fd, lv.kind):
            add(
                Finding(
                    fd.name,
                    "type",
                    f"the field is `{fd.type}`, but kind {lv.kind} gives {' or '.join(kind_types(lv.kind))}",
                    here,
                    cat_at,
                )
            )
        findings.extend(_variables(fd, lv, src, cat_at))
        findings.extend(_rule(fd, lv, src, cat_at))
        findings.extend(_default(fd, lv, src, cat_at))
    for name in catalog.levers:
        if name not in src.fields:
            add(
                Finding(
                    name,
                    "removed",
                    f"the catalog has an entry for `{name}`, which {src.struct} no longer has",
                    f"{src.struct_file}:{src.struct_line}",
                    at_catalog(name),
                )
            )
    findings.extend(_unchecked(src))
    return Report(src, catalog, label, tuple(findings))


def _variables(fd: Field, lv: Lever, src: LeverSource, cat_at: str) -> list[Finding]:
    out = []
    rule = (src.rules or {}).get(fd.name)
    read = set(rule.vars) if rule is not None else set()
    named = {v.name for v in fd.doc_vars}
    for dv in fd.doc_vars:
        if dv.name in lv.vars:
            continue
        at = f"{fd.file}:{dv.line}"
        if dv.own:
            out.append(
                Finding(
                    fd.name,
                    "variable",
                    f"the doc gives {dv.name} as the field's variable; the entry reads {_names(lv.vars)}",
                    at,
                    cat_at,
                )
            )
        else:
            out.append(
                Finding(
                    fd.name,
                    "mention",
                    f"the doc mentions {dv.name} ({dv.why}); not the field's own variable",
                    at,
                    cat_at,
                )
            )
    for var in lv.vars:
        if var not in named and var not in read:
            out.append(
                Finding(
                    fd.name,
                    "variable",
                    f"the entry reads {var}, which the source no longer names for "
                    "this field (neither its doc nor from_values)",
                    f"{fd.file}:{fd.line}",
                    cat_at,
                )
            )
    return out


def _rule(fd: Field, lv: Lever, src: LeverSource, cat_at: str) -> list[Finding]:
    if src.rules is None:
        return []  # said once, by _unchecked
    rule = src.rules.get(fd.name)
    if rule is None:
        return [Finding(fd.name, "unverified", "from_values does not set this field by name", src.rules_where, cat_at)]
    at = f"{rule.file}:{rule.line}"
    if rule.no_kind:
        return [
            Finding(
                fd.name,
                "rule",
                f"from_values's rule on {_names(rule.vars)} behaves as none of "
                f"leverctl's kinds; the entry says {lv.kind} on {_names(lv.vars)}",
                at,
                cat_at,
            )
        ]
    if rule.unverifiable:
        return [Finding(fd.name, "unverified", f"rule not verifiable: {rule.unverifiable}", at, cat_at)]
    if rule.is_constant:
        if lv.kind == "config" and not lv.vars:
            return []
        return [
            Finding(
                fd.name,
                "rule",
                f"from_values sets the constant {_fmt(rule.constant)}, not a variable; "
                f"the entry reads {_names(lv.vars)} as {lv.kind}",
                at,
                cat_at,
            )
        ]
    if lv.kind in rule.kinds and tuple(lv.vars) == rule.vars and (lv.kind != "count_clamped" or lv.cap == rule.cap):
        return []
    said = f"{rule.kind} on {_names(rule.vars)}" + (f" capped at {rule.cap}" if rule.cap is not None else "")
    has = f"{lv.kind} on {_names(lv.vars)}" + (f" capped at {lv.cap}" if lv.cap is not None else "")
    return [Finding(fd.name, "rule", f"from_values reads {said}; the entry says {has}", at, cat_at)]


def _default(fd: Field, lv: Lever, src: LeverSource, cat_at: str) -> list[Finding]:
    if src.defaults is None:
        return []
    d = src.defaults.get(fd.name)
    if d is None:
        return []
    at = f"{d.file}:{d.line}"
    if d.unknown:
        return [Finding(fd.name, "unverified", f"default not verifiable: {d.unknown}", at, cat_at)]
    if _same(d.value, lv.default):
        return []
    return [
        Finding(
            fd.name,
            "default",
            f"defaults() gives {_fmt(d.value)}; the entry's default is {_fmt(lv.default)}",
            at,
            cat_at,
        )
    ]


def _unchecked(src: LeverSource) -> list[Finding]:
    out = []
    where = f"{src.struct_file}:{src.struct_line}"
    elsewhere = (
        f" (the struct's module keeps its resolution in {src.resolve_module}; pass it too)"
        if src.resolve_module
        else ""
    )
    if src.rules is None:
        out.append(
            Finding(
                "",
                "unchecked",
                f"from_values is not in the files given{elsewhere}: the {len(src.fields)} "
                "fields' parse rules, described here only in prose, were not checked",
                where,
            )
        )
    if src.defaults is None:
        out.append(
            Finding(
                "",
                "unchecked",
                f"defaults() is not in the files given{elsewhere}: the catalog's defaults were not checked against it",
                where,
            )
        )
    return out

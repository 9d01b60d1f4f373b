"""Lint: settings that do not do what they look like they do.

Works on a :class:`~leverctl.levers.resolve.Resolution` (resolved without the
strict unknown-variable check, so typos become findings rather than errors)
and reads nothing itself. Each finding has a severity:

* ``error``   the setting is ignored, inverted, or overridden: the engine does
              something other than the text asks for;
* ``warning`` probably unintended or costly: a lever that has no effect without
              another, a diagnostic left on, a known slow policy, an unknown
              variable with no near match;
* ``info``    worth knowing, harmless.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Callable, Mapping

from .catalog import Catalog
from .intent import is_drafter_prefill_only, judge, state
from .present import printable, safe, where_of
from .resolve import Raw, Resolution, show_raw
from .suggest import suggestion

SEVERITIES = ("error", "warning", "info")

# Every shipped engine's prefix, to recognise another engine's variable.
ENGINE_PREFIXES = ("ATLAS_", "METRALE_")


@dataclass(frozen=True)
class Finding:
    severity: str
    code: str
    message: str
    where: str
    var: str | None = None
    field: str | None = None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    def line(self) -> str:
        return f"{self.where}: {self.severity}: {self.message} [{self.code}]"


def _on(value: Any) -> bool:
    return bool(value) if not isinstance(value, (int, float)) or isinstance(value, bool) else value > 0


def misnamed(var: str, cat: Catalog) -> tuple[str, str, str] | None:
    """(code, the variable meant, why the engine ignores ``var``) when
    ``var`` is one of ``cat``'s lever variables but for its engine prefix,
    its case, or another engine's prefix; None otherwise."""
    known = cat.variables()
    if var in known:
        return None
    title, prefix = cat.title, cat.prefix
    up = var.upper()
    for k in known:
        if k == prefix + var:
            return (
                "unprefixed",
                k,
                f"{var} lacks the engine prefix {prefix}: {title} reads only {k}, so it ignores {var}",
            )
    for k in known:
        if k.upper() == up:
            return (
                "case",
                k,
                f"{var} differs from {k} only in case: variable names are case-sensitive, so {title} ignores {var}",
            )
        if k.upper() == prefix.upper() + up:
            return (
                "unprefixed",
                k,
                f"{var} lacks the engine prefix {prefix} (and differs in case): "
                f"{title} reads only {k}, so it ignores {var}",
            )
    for other in ENGINE_PREFIXES:
        if other != prefix and up.startswith(other):
            for k in known:
                if k.upper() == prefix.upper() + up[len(other) :]:
                    return (
                        "other-engine",
                        k,
                        f"{var} carries another engine's prefix {other}: {title} reads {k}, so it ignores {var}",
                    )
    return None


def lint(
    res: Resolution, env_where: Callable[[str], str] | None = None, env: Mapping[str, Raw] | None = None
) -> list[Finding]:
    """The findings for ``res``. ``env`` is the environment it was resolved
    from (the process's, or an env file's when ``env_where`` is given): its
    variables the resolution left out as not the engine's are searched for
    lever names missing the prefix or miscased."""
    cat = res.catalog
    by_var = cat.by_var()
    known = cat.variables()
    found: list[Finding] = []

    def add(
        sev: str, code: str, msg: str, var: str | None = None, field: str | None = None, where: str | None = None
    ) -> None:
        w = where or (where_of(res, var, env_where) if var else (res.recipe or "levers"))
        found.append(Finding(sev, code, safe(msg), safe(w), safe(var) if var else None, field))

    # Unknown variables: a prefixed variable no lever reads (or any unknown
    # variable a recipe sets). A lever name missing its prefix, miscased, or
    # with another engine's prefix is said to be that; a near match is
    # almost certainly a typo.
    for s in res.ignored:
        wrong = misnamed(s.var, cat)
        near = suggestion(s.var, known)
        if wrong is not None:
            code, meant, why = wrong
            add("error", "unknown-variable", f"{why} (did you mean {meant}?)", s.var, by_var[meant].field)
        elif near:
            add(
                "error",
                "unknown-variable",
                f"{s.var} is not a known {cat.title} lever variable (did you mean {near}?); the engine ignores it",
                s.var,
            )
        elif s.var.startswith(cat.prefix):
            add(
                "warning",
                "unknown-variable",
                f"{s.var} carries the {cat.prefix} prefix but is not a lever leverctl knows; "
                f"no {cat.title} lever reads it",
                s.var,
            )
        else:
            add(
                "warning",
                "unknown-variable",
                f"{s.var} is not a lever variable of {cat.title}; the engine ignores it",
                s.var,
            )

    # The environment's variables the resolution set aside as not the
    # engine's: a lever name there without its prefix, or miscased, is a
    # setting the engine never sees. An env file is meant for the engine
    # (error); so is a lever's own name in another case, wherever it is set
    # (error: it can mean nothing else); the process environment holds much
    # else, so a name without the prefix there is a warning, and another
    # engine's variables there are that engine's business.
    from_file = env_where is not None
    for var in sorted(env or {}):
        if var in res.variables:
            continue
        wrong = misnamed(var, cat)
        if wrong is None or (wrong[0] == "other-engine" and not from_file):
            continue
        code, meant, why = wrong
        add(
            "error" if from_file or code == "case" else "warning",
            "unknown-variable",
            f"{why} (did you mean {meant}?)",
            var,
            by_var[meant].field,
            where=env_where(var) if from_file else "environment",
        )

    # Values the engine ignores or reads against their likely meaning.
    for var, s in res.variables.items():
        lv = by_var.get(var)
        if lv is None or s.raw is None:
            continue
        sur = judge(lv, var, s.raw)
        if sur is not None:
            add(sur.severity, sur.code, sur.message, var, lv.field)

    values = res.values()

    # Levers that need another lever on to have any effect.
    for lv in cat.levers.values():
        r = res.levers[lv.field]
        if not lv.requires or not _on(r.value):
            continue
        missing = [f for f in lv.requires if not _on(values.get(f))]
        if not missing:
            continue
        need = ", ".join(f"{f} ({_how(res, f)})" for f in missing)
        explicit = r.provenance.source not in ("default", "build")
        if explicit:
            add(
                "warning",
                "missing-dependency",
                f"{lv.field} is on but has no effect while {need} is off",
                r.provenance.var,
                lv.field,
            )
        else:
            add(
                "info",
                "missing-dependency",
                f"{lv.field} stays on by default but has no effect while {need} is off",
                None,
                lv.field,
                where=_where_field(res, missing[0], env_where),
            )

    # A veto variable overriding its opt-in.
    for lv in cat.levers.values():
        if lv.kind != "opt_in_vetoed":
            continue
        on_var, veto_var = lv.vars
        veto = res.variables.get(veto_var)
        if veto is None or veto.raw is None:
            continue
        on = res.variables.get(on_var)
        if on is not None and on.raw == "1":
            add(
                "error",
                "overridden",
                f"{veto_var} (set, {where_of(res, veto_var, env_where)}) overrides {on_var}=1 "
                f"({where_of(res, on_var, env_where)}): any value of {veto_var} turns {lv.field} off",
                veto_var,
                lv.field,
            )
        else:
            add("info", "veto", f"{veto_var} is set: {lv.field} is off. {lv.notes}".strip(), veto_var, lv.field)

    # Couplings the catalog's `requires` cannot say (they need a lever OFF).
    for field, other, want, sev, why in CONFLICTS:
        if field not in values or other not in values:
            continue
        if _on(values[field]) and values[other] == want:
            r = res.levers[field]
            add(sev, "conflict", f"{field} is on, but {why}", r.provenance.var, field)

    for field, sev, why in RISKS:
        if field in values and _on(values[field]) and values[field] != cat.lever(field).default:
            r = res.levers[field]
            add(sev, "risk", f"{field} is on: {why}", r.provenance.var, field)

    # Diagnostics left on, and the drafter's known-slow policy.
    for lv in cat.levers.values():
        r = res.levers[lv.field]
        if lv.diagnostic and r.value != lv.default and _on(r.value):
            note = f" {lv.notes}" if lv.notes else ""
            add(
                "warning",
                "diagnostic-on",
                f"diagnostic lever {lv.field} is {state(r.value)} ({lv.summary[:1].lower() + lv.summary[1:]}).{note}",
                r.provenance.var,
                lv.field,
            )
        if lv.kind == "drafter" and is_drafter_prefill_only(r.value):
            add(
                "warning",
                "drafter-prefill-only",
                f"the MTP drafter prefills its context but does not carry it across turns. "
                f"{lv.notes or 'Prefill without carry is a known loss.'}",
                r.provenance.var,
                lv.field,
            )

    order = {s: i for i, s in enumerate(SEVERITIES)}
    fields = {f: i for i, f in enumerate(cat.fields)}
    found.sort(key=lambda f: (order[f.severity], fields.get(f.field or "", -1), f.var or ""))
    return found


def _how(res: Resolution, field: str) -> str:
    r = res.levers[field]
    p = r.provenance
    if p.var and p.raw is not None:
        return f"{p.var}={printable(show_raw(p.raw) or '')}"
    if p.var:
        return f"{p.var} unset"
    return p.source


def _where_field(res: Resolution, field: str, env_where) -> str:
    p = res.levers[field].provenance
    return where_of(res, p.var, env_where) if p.var and p.var in res.variables else (res.recipe or "levers")


# (field, other field, other's value that defeats it, severity, why). Only
# applied where both fields exist in the catalog.
CONFLICTS: tuple[tuple[str, str, Any, str, str], ...] = (
    (
        "ffn_mmq",
        "ffn_nvfp4_mmq",
        True,
        "info",
        "the Q4_K MMQ arm is taken only where the NVFP4 MMQ arm is not active, and ffn_nvfp4_mmq is on "
        "(on models whose NVFP4 MMQ kernels load, set METRALE_NO_FFN_NVFP4_MMQ to let it through)",
    ),
    (
        "moe_prefill_max_load_factor",
        "moe_prefill_exact_tiles",
        True,
        "warning",
        "the load-factor cap applies only with exact tiles off, and moe_prefill_exact_tiles is on",
    ),
)

# (field, severity, why): levers with a known correctness or speed cost.
RISKS: tuple[tuple[str, str, str], ...] = (
    (
        "moe_max_m_tiles_estimate",
        "warning",
        "an expert with more rows than twice the average gets no block for the excess, "
        "which is then not computed (a correctness risk on skewed routing)",
    ),
)


def counts(findings: list[Finding]) -> dict[str, int]:
    return {s: sum(1 for f in findings if f.severity == s) for s in SEVERITIES}


def exit_code(findings: list[Finding], strict: bool = False) -> int:
    failing = {"error", "warning"} if strict else {"error"}
    return 1 if any(f.severity in failing for f in findings) else 0

"""Shell completion that knows the domain: kernel paths and families for
``-k``, lever variables for ``--set`` (``VAR=`` and then the values its
rule gives a meaning), ``--unset`` and ``explain``, engines for ``-e``,
recipe names for ``--recipe``. Each function is a Typer ``autocompletion``
callback: it gets the command line parsed so far (``ctx``) and the word
being typed, and returns ``(candidate, help)`` pairs. They read the
catalogs (TOML) and the decision tables (pure Python), never numba, so
completion answers at the speed of ``show``; a failure completes nothing
rather than printing a traceback into the shell."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

RECIPES = Path(__file__).resolve().parents[2] / "recipes"


def _quiet(fn: Callable[..., list]) -> Callable[..., list]:
    def run(ctx: Any = None, incomplete: str = "") -> list:
        try:
            return fn(ctx, incomplete or "")
        except Exception:  # noqa: BLE001 (completion must never break the shell)
            return []

    run.__name__ = fn.__name__
    return run


def _param(ctx: Any, name: str) -> Any:
    while ctx is not None:
        v = (getattr(ctx, "params", None) or {}).get(name)
        if v is not None:
            return v
        ctx = getattr(ctx, "parent", None)
    return None


def _catalogs(ctx: Any) -> list:
    """The catalog the line names (``-e``, or its recipe's engine), else both shipped ones."""
    from ..levers.catalog import SHIPPED, load_catalog

    engine = _param(ctx, "engine")
    recipe = _param(ctx, "recipe")
    if engine is None and recipe is not None:
        try:
            from ..levers.recipes import load_recipe

            path = Path(recipe)
            if not path.exists() and (RECIPES / f"{recipe}.toml").is_file():
                path = RECIPES / f"{recipe}.toml"  # a name in recipes/, as --recipe takes it
            engine = load_recipe(path).engine
        except Exception:  # noqa: BLE001
            engine = None
    names = [engine] if engine in SHIPPED else list(SHIPPED)
    return [load_catalog(n) for n in names]


@_quiet
def engines(ctx: Any, incomplete: str) -> list:
    from ..levers.catalog import SHIPPED, load_catalog

    return [(n, load_catalog(n).title) for n in SHIPPED if n.startswith(incomplete)]


@_quiet
def recipes(ctx: Any, incomplete: str) -> list:
    """The recipes shipped in ``recipes/`` by name (what ``--recipe NAME`` finds)."""
    out = []
    for p in sorted(RECIPES.glob("*.toml")):
        if p.stem.startswith(incomplete):
            from ..levers.recipes import load_recipe

            try:
                r = load_recipe(p)
                out.append((p.stem, r.description or r.engine or ""))
            except Exception:  # noqa: BLE001
                out.append((p.stem, ""))
    return out


@_quiet
def kernels(ctx: Any, incomplete: str) -> list:
    """Kernel paths (``gdn.verify``) and families (``gdn``), with their engines."""
    from leverctl_kernels.selection import TABLES

    out: dict[str, str] = {}
    for name, table in TABLES.items():
        family = name.split(".")[0]
        out.setdefault(family, "a family of kernel paths")
        engines = getattr(table, "engines", None)
        out[name] = f"kernel path ({', '.join(engines)})" if engines else "kernel path"
    return [(n, h) for n, h in sorted(out.items()) if n.startswith(incomplete)]


def _variables(ctx: Any) -> dict[str, tuple[Any, Any]]:
    """variable -> (lever, catalog) of the catalogs the line names."""
    out: dict[str, tuple[Any, Any]] = {}
    for cat in _catalogs(ctx):
        for lv in cat.levers.values():
            for var in lv.vars:
                out.setdefault(var, (lv, cat))
    return out


@_quiet
def variables(ctx: Any, incomplete: str) -> list:
    """Lever variables (``--unset``, ``explain``), with each lever's summary."""
    low = incomplete.lower()
    return [(v, lv.summary) for v, (lv, _) in _variables(ctx).items() if v.lower().startswith(low)]


@_quiet
def assignments(ctx: Any, incomplete: str) -> list:
    """``--set``: ``VAR=`` for each lever variable; after the ``=``, the
    values the variable's rule gives a meaning, each with what it does."""
    from ..levers.kinds import KINDS

    vars_ = _variables(ctx)
    if "=" not in incomplete:
        low = incomplete.lower()
        return [(f"{v}=", lv.summary) for v, (lv, _) in vars_.items() if v.lower().startswith(low)]
    var, _, value = incomplete.partition("=")
    if var not in vars_:
        return []
    lv, _ = vars_[var]
    kind = KINDS[lv.kind]
    out = []
    for text, meaning in ((kind.on_value, "on"), (kind.off_value, "off")):
        if text is not None and text.startswith(value):
            said = next((what for write, what in kind.values if write.split(",")[0].strip() == text), meaning)
            out.append((f"{var}={text}", f"{kind.title}: {said}"))
    return out


@_quiet
def assignments_or_variables(ctx: Any, incomplete: str) -> list:
    """``explain NAME``: a variable or a lever's field, or with ``=`` one of
    the variable's values."""
    if "=" in incomplete:
        return assignments(ctx, incomplete)
    fields = {f: lv.summary for cat in _catalogs(ctx) for f, lv in cat.levers.items() if f.startswith(incomplete)}
    return variables(ctx, incomplete) + sorted(fields.items())


@_quiet
def axes(ctx: Any, incomplete: str) -> list:
    """``--axis``: the dimensions the named paths' shapes have (``NAME=``,
    with their model values). The only completion that loads the kernel
    declarations (in simulator mode): shapes are theirs to make."""
    import os

    os.environ.setdefault("NUMBA_ENABLE_CUDASIM", "1")  # declarations only: never a GPU for a completion
    from leverctl_kernels.registry import all_paths

    from ..bench.axes import axes_of

    names = _param(ctx, "kernel") or []
    paths = [p for p in all_paths() if not names or p.name in names or p.family in names]
    seen: dict[str, list[int]] = {}
    for p in paths:
        try:
            for k, vals in axes_of(p.shapes("model", None)).items():
                seen.setdefault(k, [])
                seen[k] += [v for v in vals if v not in seen[k]]
        except Exception:  # noqa: BLE001
            continue
    return [
        (f"{k}=", "model: " + ",".join(map(str, v[:6]))) for k, v in sorted(seen.items()) if k.startswith(incomplete)
    ]

"""Options shared by every command, declared once, and the way they become a
resolution. Diagnostics go to stderr, data to stdout."""

from __future__ import annotations

import contextlib
import functools
import gc
import inspect
import math
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Iterable, Optional

import typer
from rich.console import Console

from ..errors import UserError
from ..levers.suggest import did_you_mean

# Data on stdout; diagnostics (warnings, progress) on stderr. Tables take the
# terminal's width, or COLUMNS when it is set (piped too: `COLUMNS=80 leverctl
# show | less`); piped without COLUMNS they are 200 wide, so nothing wraps. No
# emoji codes: a value such as ``:fire:`` is user data, printed as it is.
PIPED_WIDTH = 200


def _columns() -> int | None:
    """COLUMNS when it holds a usable width, else None."""
    value = os.environ.get("COLUMNS", "")
    return int(value) if value.isdigit() and int(value) > 0 else None


out = Console(soft_wrap=False, width=_columns() or (None if sys.stdout.isatty() else PIPED_WIDTH), emoji=False)
err = Console(stderr=True, soft_wrap=True, emoji=False)


def _complete(name: str):
    """The completion callback ``name`` of :mod:`.complete`, imported only
    when a shell asks (a lever command never loads it)."""

    def run(ctx: typer.Context, incomplete: str) -> list:
        from . import complete

        return getattr(complete, name)(ctx, incomplete)

    run.__name__ = name
    return run


class _Completions:
    def __getattr__(self, name: str):
        return _complete(name)


complete = _Completions()


EngineOpt = Annotated[
    Optional[str],
    typer.Option(
        "--engine",
        "-e",
        metavar="ENGINE",
        help="Shipped engine catalog: atlas (default) or metrale; a recipe names its own.",
        autocompletion=complete.engines,
    ),
]
CatalogOpt = Annotated[
    Optional[Path],
    typer.Option("--catalog", metavar="FILE", help="A catalog TOML file describing another engine's levers."),
]
RecipeOpt = Annotated[
    Optional[Path],
    typer.Option(
        "--recipe",
        "-r",
        metavar="RECIPE",
        help="A recipe TOML file (or the name of one in recipes/).",
        autocompletion=complete.recipes,
    ),
]
SetOpt = Annotated[
    Optional[list[str]],
    typer.Option(
        "--set",
        "-s",
        metavar="VAR=VALUE",
        help="Set a variable, above the recipe and the environment. Repeatable.",
        autocompletion=complete.assignments,
    ),
]
UnsetOpt = Annotated[
    Optional[list[str]],
    typer.Option(
        "--unset",
        "-u",
        metavar="VAR",
        help="Unset a variable wherever it was set. Repeatable.",
        autocompletion=complete.variables,
    ),
]
EnvFileOpt = Annotated[
    Optional[Path],
    typer.Option(
        "--env-file",
        metavar="FILE",
        help="Resolve as though this file were the whole environment: env, export -p or "
        "declare -x output, or KEY=VALUE lines; - reads standard input.",
    ),
]
MaxBatchOpt = Annotated[
    Optional[int],
    typer.Option(
        "--max-batch-size",
        metavar="N",
        help="The serve max batch size (max_decode_seqs, a u32 from 1); overrides the recipe.",
    ),
]
NoEnvOpt = Annotated[
    bool, typer.Option("--no-env", help="Ignore the process environment (resolve the recipe and --set alone).")
]

# The options above, as every lever command takes them, in --help order:
# parameter name -> (declaration, default). See with_setup.
LEVER_OPTIONS: dict[str, tuple[Any, Any]] = {
    "engine": (EngineOpt, None),
    "catalog": (CatalogOpt, None),
    "recipe": (RecipeOpt, None),
    "set_": (SetOpt, None),
    "unset": (UnsetOpt, None),
    "env_file": (EnvFileOpt, None),
    "max_batch_size": (MaxBatchOpt, None),
    "no_env": (NoEnvOpt, False),
}

# ── options of the commands that run kernel paths (bench, sweep) ────────────

KernelOpt = Annotated[
    Optional[list[str]],
    typer.Option(
        "--kernel",
        "-k",
        metavar="NAME",
        help="Only this kernel path (w4a16.gemv) or family (w4a16). Repeatable.",
        autocompletion=complete.kernels,
    ),
]
ShapesOpt = Annotated[
    Optional[str],
    typer.Option(
        "--shapes",
        metavar="smoke|model",
        help="smoke (tiny, odd) or model (the recipe's sizes). Default: model on a GPU, smoke in the simulator.",
    ),
]
DeviceOpt = Annotated[
    str,
    typer.Option(
        "--device", metavar="auto|gpu|sim", help="auto (a GPU if there is one, else the simulator), gpu, or sim."
    ),
]
SeedOpt = Annotated[int, typer.Option("--seed", metavar="N", min=0, help="Seed of the random inputs (0 or more).")]
ForceOpt = Annotated[
    bool, typer.Option("--force", help="Run model shapes in the simulator anyway (hours, not minutes).")
]
TimeCapOpt = Annotated[
    float,
    typer.Option(
        "--time-cap",
        metavar="SECONDS",
        help="GPU: stop sampling a configuration after this long if the noise is still above 0.5%.",
    ),
]
# The GPU architectures `profile` and `bench --profile` compile for.
ARCHS = ("sm_90a", "sm_90", "sm_80", "sm_89", "sm_100a")
ArchOpt = Annotated[
    Optional[str],
    typer.Option(
        "--arch",
        metavar="ARCH",
        help="sm_90a (H100/H200), sm_90, sm_80, sm_89 or sm_100a. Default: this machine's GPU, else sm_90a.",
    ),
]


def check_arch(arch: str | None) -> None:
    from ..errors import UserError

    if arch is not None and arch not in ARCHS:
        raise UserError(f"--arch {arch!r}: one of {', '.join(ARCHS)}")


# Every report of records (bench, sweep, compare, report) comes in these;
# bench and report show also write the records as CSV rows.
FORMATS = ("table", "json", "markdown")
RECORD_FORMATS = (*FORMATS, "csv")
FormatOpt = Annotated[Optional[str], typer.Option("--format", "-f", metavar="FORMAT", help="table, json or markdown.")]
RecordFormatOpt = Annotated[
    Optional[str],
    typer.Option("--format", "-f", metavar="FORMAT", help="table, json, markdown or csv (one row per record)."),
]
SHAPES = ("smoke", "model")

# The format an output file's suffix asks for, when --format does not say.
SUFFIX_FORMATS = {".txt": "table", ".json": "json", ".md": "markdown", ".markdown": "markdown", ".csv": "csv"}


def check_format(fmt: str, formats: tuple[str, ...] = FORMATS) -> None:
    if fmt not in formats:
        raise UserError(f"--format {fmt!r}: choose one of {', '.join(formats)}")


def output_format(fmt: str | None, out: Path | None, formats: tuple[str, ...] = FORMATS, default: str = "table") -> str:
    """The format to write: ``--format`` when given (checked against
    ``formats``); else the one ``--out``'s suffix names (``results.json``
    writes JSON, ``report.md`` Markdown, ``results.csv`` CSV, ``.txt`` the
    table); else ``default``, as on stdout, for no --out or an --out without
    a suffix. An --out whose suffix names no format of this command
    (``results.xlsx``) is bad input: guessing would write one format under
    another's name."""
    if fmt is not None:
        check_format(fmt, formats)
        return fmt
    if out is None or not out.suffix:
        return default
    named = SUFFIX_FORMATS.get(out.suffix.lower())
    if named not in formats:
        known = ", ".join(f"{suf} ({f})" for suf, f in SUFFIX_FORMATS.items() if f in formats)
        raise UserError(
            f"--out {out}: no format is known for a {out.suffix} file; name the file {known}, "
            f"or choose one with --format"
        )
    return named


def check_run_options(fmt: str, shapes: str | None, time_cap: float, formats: tuple[str, ...] = FORMATS) -> None:
    """Refuse bad --format, --shapes and --time-cap before anything runs."""
    check_format(fmt, formats)
    if shapes is not None and shapes not in SHAPES:
        raise UserError(f"--shapes {shapes!r}: choose smoke or model")
    if not (time_cap > 0 and math.isfinite(time_cap)):  # nan compares false either way
        raise UserError(f"--time-cap must be a positive number of seconds, not {time_cap}")


def shape_preset(shapes: str | None, on_gpu: bool, *, model_in_sim: bool) -> str:
    """The --shapes preset to run: as given, else model on a GPU and smoke in
    the simulator, where model shapes are refused unless ``model_in_sim``."""
    preset = shapes or ("model" if on_gpu else "smoke")
    if not on_gpu and preset == "model" and not model_in_sim:
        raise UserError(
            "--shapes model in the CUDA simulator would take hours (about a millisecond per "
            "simulated thread); use --shapes smoke, a GPU, or --force"
        )
    return preset


AxisOpt = Annotated[
    Optional[list[str]],
    typer.Option(
        "--axis",
        metavar="NAME=V1,V2",
        help="Refine the preset's shapes along one of their dimensions, as nvbench's axes: --axis m=1,16,64 "
        "--axis k=4096 (the product of the values given). leverctl kernels -k PATH lists each path's. Repeatable.",
        autocompletion=complete.axes,
    ),
]


def axes_for(texts, paths, preset: str, model, res=None):
    """The ``--axis`` values parsed and checked against the shapes of the
    paths the run plans (those the engine has), before any kernel runs."""
    from ..bench.axes import check_axes, parse_axes

    axes = parse_axes(texts)
    if axes:
        from ..bench.plan import applies

        shapes = {}
        for p in paths:
            if res is not None and not applies(p, res.engine, res.catalog.fields):
                continue
            try:
                shapes[p.name] = list(p.shapes(preset, model))
            except Exception:  # noqa: BLE001 - a broken declaration is the plan's FAIL to report
                continue
        check_axes(axes, shapes)
    return axes


def registered_paths():
    """Every declared kernel path (imports numba: call after choosing the device)."""
    from leverctl_kernels.registry import all_paths

    return all_paths()


@dataclass(frozen=True)
class TablePath:
    """What :func:`select_paths` reads of a kernel path, as its decision
    table gives it (the path's declaration takes these from the table)."""

    name: str
    family: str
    levers: tuple[str, ...]
    engines: tuple[str, ...]

    @classmethod
    def of(cls, path) -> TablePath:
        """A declared path's (or a table's) view."""
        return cls(path.name, path.family, tuple(path.levers), tuple(path.engines))


def table_paths() -> list[TablePath]:
    """Every kernel path, from the decision tables alone: no numba, no
    kernel module (their declarations import both)."""
    from leverctl_kernels.selection import TABLES

    return [TablePath(name, t.family, tuple(t.levers), tuple(t.engines)) for name, t in TABLES.items()]


def check_selection(kernel: list[str] | None, axis: list[str] | None, res) -> None:
    """``--kernel`` and the form of ``--axis``, checked before the device is
    chosen and the kernels load (seconds): a typo is told at once. The
    axes' names need the paths' shapes, so they are checked later
    (:func:`axes_for`)."""
    from ..bench.axes import parse_axes

    select_paths(table_paths(), kernel, res)
    parse_axes(axis)


def select_paths(paths, names: list[str] | None, res=None):
    """The paths named by ``--kernel`` (a path such as ``w4a16.gemv`` or a
    whole family such as ``w4a16``), in registry order; all when none named.
    With a resolution ``res``, a family stands for those of its paths the
    engine has, and a path (or a whole family) the engine lacks is refused."""
    if not names:
        return list(paths)
    known = [p.name for p in paths]
    families = sorted({p.family for p in paths})
    if res is not None:
        from ..bench.plan import applies

        has = lambda p: applies(p, res.engine, res.catalog.fields)  # noqa: E731
    else:
        has = lambda p: True  # noqa: E731
    chosen = set()
    for name in names:
        hits = [p for p in paths if name in (p.name, p.family)]
        if not hits:
            listing = ", ".join(known) if known else "none are registered yet"
            raise UserError(
                f"--kernel {name}: no such kernel path{did_you_mean(name, known + families)}; known: {listing}"
            )
        kept = [p for p in hits if has(p)]
        if not kept:
            p = hits[0]
            if len(hits) > 1:
                why = f"none of the {name} family's paths is one of its"
            elif p.engines:
                why = f"it is a path of {' and '.join(p.engines)} only"
            else:
                why = f"none of its levers {', '.join(p.levers)} is in the catalog"
            raise UserError(f"--kernel {name}: {res.engine} has no such path ({why})")
        chosen.update(p.name for p in kept)
    return [p for p in paths if p.name in chosen]


def tty_table(fmt: str) -> tuple[int | None, bool]:
    """(width, color) for rendering ``fmt``: a table gets the width of
    ``out`` (the terminal's, or COLUMNS) and, on a terminal, colour; piped
    without COLUMNS, plain text at the renderer's default width."""
    color = fmt == "table" and sys.stdout.isatty()
    sized = fmt == "table" and (color or _columns() is not None)
    return (out.width if sized else None), color


def find_recipe(path: Path) -> Path:
    """A recipe path as given, or a name in the repository's recipes/ folder."""
    if path.exists() or path.suffix == ".toml" or "/" in str(path):
        return path
    here = Path(__file__).resolve().parents[2] / "recipes"
    for cand in (here / f"{path}.toml", Path("recipes") / f"{path}.toml"):
        if cand.exists():
            return cand
    return path


@dataclass
class Setup:
    engine: str | None = None
    catalog: Path | None = None
    recipe: Path | None = None
    sets: list[str] = field(default_factory=list)
    unsets: list[str] = field(default_factory=list)
    env_file: Path | None = None
    max_batch_size: int | None = None
    no_env: bool = False

    env_lines: dict[str, int] = field(default_factory=dict)  # env-file variable -> line

    def load(self):
        """(catalog, recipe or None)."""
        from ..levers import load_catalog, load_recipe

        check_catalog_options(self.engine, self.catalog)
        recipe = load_recipe(find_recipe(self.recipe)) if self.recipe else None
        if self.catalog is not None:
            catalog = load_catalog(path=self.catalog)
            if recipe is not None and recipe.engine != catalog.engine:
                raise UserError(
                    f"recipe is for engine {recipe.engine!r}, but the catalog is {catalog.engine!r}", recipe.path
                )
        else:
            engine = self.engine or (recipe.engine if recipe else "atlas")
            if recipe is not None and self.engine and self.engine != recipe.engine:
                load_catalog(self.engine)  # an unknown or miscased --engine is reported as such first
                raise UserError(
                    f"--engine {self.engine} disagrees with the recipe's engine {recipe.engine!r}", recipe.path
                )
            catalog = recipe_catalog(recipe) if recipe is not None and not self.engine else load_catalog(engine)
        return catalog, recipe

    def environment(self):
        """The environment to resolve against: the env file (``-``: standard
        input), nothing (--no-env), or this process's."""
        from ..levers import read_env_file, read_process_env

        if self.env_file is not None:
            if self.no_env:
                raise UserError(
                    "--env-file already replaces the environment; --no-env with it says nothing more (give one)"
                )
            self.env_lines = {}
            return read_env_file(self.env_file, self.env_lines)
        return {} if self.no_env else read_process_env()

    def resolve(self, *, strict: bool = True, quiet: bool = False):
        """The resolution these options describe (see :func:`resolve_setup`)."""
        return resolve_setup(self, strict=strict, quiet=quiet).res


def recipe_catalog(recipe):
    """The shipped catalog a recipe names; an unknown engine is reported at
    the `engine` line of the file in its chain that declares it."""
    from ..levers import load_catalog
    from ..levers.recipes import line_of

    try:
        return load_catalog(recipe.engine)
    except UserError as e:
        for path in reversed(recipe.chain):
            try:
                line = line_of(Path(path).read_text("utf-8"), "engine")
            except OSError:
                line = None
            if line:
                raise UserError(e.message, f"{path}:{line}") from None
        raise UserError(e.message, recipe.path) from None


def check_catalog_options(engine: str | None, catalog: Path | None) -> None:
    """--engine and --catalog both choose the catalog; giving both is a conflict."""
    if engine is not None and catalog is not None:
        raise UserError(
            f"--engine {engine} and --catalog {catalog} both choose the lever catalog; give one "
            "(a catalog file names its own engine)"
        )


def check_known(catalog, recipe, sets, unsets) -> None:
    """Every variable the recipe, --set and --unset name is one of the
    catalog's, and :func:`check_structure` holds."""
    known = catalog.variables()
    if recipe is not None:
        for var in recipe.vars:
            if var not in known:
                raise UserError(
                    f"unknown {catalog.title} lever variable {var}{did_you_mean(var, known)}", recipe.where(var)
                )
    for var, _ in sets:
        if var not in known:
            raise UserError(f"--set {var}: unknown {catalog.title} lever variable{did_you_mean(var, known)}")
    for var in unsets:
        if var not in known:
            raise UserError(f"--unset {var}: unknown {catalog.title} lever variable{did_you_mean(var, known)}")
    check_structure(catalog, recipe, sets, unsets)


def check_structure(catalog, recipe, sets, unsets) -> None:
    """What is bad input even to lint, which reports a variable a recipe sets
    by mistake as a finding: a recipe that unsets a variable no lever reads
    (there is nothing to unset), a [build] key that is not one of the
    catalog's build-default fields, and a variable both in --set and --unset."""
    if recipe is not None:
        known = catalog.variables()
        for var in recipe.unset:
            if var not in known:
                raise UserError(
                    f"`unset` names {var}, which is not a {catalog.title} lever variable{did_you_mean(var, known)}",
                    recipe.where(var),
                )
        builds = [f for f, lv in catalog.levers.items() if lv.kind == "build_default"]
        for key, s in recipe.build.items():
            if key not in builds:
                what = (
                    "a lever read from a variable, not a build default"
                    if key in catalog.levers
                    else f"not a lever field of {catalog.title}"
                )
                raise UserError(
                    f"[build] {key} is {what}{did_you_mean(key, builds)}; the build defaults are "
                    f"{', '.join(builds) or 'none'}",
                    f"{s.file}:{s.line}" if s.line else s.file,
                )
    check_set_unset(sets, unsets)


def check_set_unset(sets, unsets) -> None:
    """One variable in both --set and --unset is a conflict, whatever the
    order; so is one variable --set twice to different values (which one
    the user meant cannot be guessed; the same value twice is harmless)."""
    both = [var for var, _ in sets if var in set(unsets)]
    if both:
        raise UserError(f"--set {both[0]}=... and --unset {both[0]} contradict each other; give one")
    from ..levers.present import safe

    seen: dict = {}
    for var, value in sets:
        if var in seen and seen[var] != value:
            first, second = (safe(v) for v in (seen[var], value))
            raise UserError(f"--set {var}={first} and --set {var}={second} contradict each other; give one")
        seen[var] = value


def setup(
    engine=None, catalog=None, recipe=None, sets=None, unsets=None, env_file=None, max_batch_size=None, no_env=False
) -> Setup:
    return Setup(engine, catalog, recipe, list(sets or []), list(unsets or []), env_file, max_batch_size, no_env)


def with_setup(command):
    """Give ``command`` the shared lever options (LEVER_OPTIONS), declared
    once here rather than in each command: they come first in its --help, and
    it receives them as one ``setup: Setup`` argument instead of eight."""
    keyword = inspect.Parameter.KEYWORD_ONLY
    shared = [
        inspect.Parameter(name, keyword, annotation=decl, default=default)
        for name, (decl, default) in LEVER_OPTIONS.items()
    ]
    own = [
        p.replace(kind=keyword)
        for name, p in inspect.signature(command, eval_str=True).parameters.items()
        if name != "setup"
    ]

    @functools.wraps(command)
    def run(**params):
        st = setup(*(params.pop(name) for name in LEVER_OPTIONS))
        return command(setup=st, **params)

    run.__signature__ = inspect.Signature([*shared, *own])  # what Typer reads
    return run


class Interrupted(Exception):
    """Ctrl-C, after the command has said on stderr what it leaves behind
    (the sweep: what is on disk, and how to resume): exit 130, no second line."""


# ── resolving the shared options, as every command does ─────────────────────

# Bad input noticed while a command could still do its work (a lever value
# that is not UTF-8): the command finishes, so its output shows how the engine
# reads the value, and then exits 2. Cleared by app.main for every run.
BAD_INPUT: list[str] = []


@contextlib.contextmanager
def many_records():
    """For a command that reads a result set into objects: the cyclic
    garbage collector waits until it is done. The records hold no cycles,
    and the collector's full passes walk every object held, again and again
    as a million records arrive (a third of a 100,000-record merge's time)."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def bad_input(msg: str) -> None:
    """One stderr line now; exit code 2 once the command has finished."""
    from ..levers.present import safe

    BAD_INPUT.append(msg)
    print(f"leverctl: {safe(msg)}", file=sys.stderr)


def warn(msg: str) -> None:
    """One diagnostic line on stderr (never Rich markup: values are user data)."""
    from ..levers.present import safe

    print(f"leverctl: warning: {safe(msg)}", file=sys.stderr)


def robust_output() -> None:
    """Never die on a character the terminal's encoding lacks (an ASCII
    locale, a non-UTF-8 value): escape it instead. Called by every lever command."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.reconfigure(errors="backslashreplace")
        except (AttributeError, ValueError, OSError):
            pass


def write(text: str) -> None:
    """Data to stdout, surviving a terminal that cannot encode it."""
    write_pieces((text,))


def write_pieces(pieces: Iterable[str]) -> None:
    """Data to stdout as it comes, piece by piece (a report too large to
    hold as one string), surviving a terminal that cannot encode it."""
    for text in pieces:
        try:
            sys.stdout.write(text)
        except UnicodeEncodeError:
            sys.stdout.flush()
            sys.stdout.buffer.write(text.encode("utf-8", "backslashreplace"))
    sys.stdout.flush()


class Resolved:
    """A resolution with what the commands need around it."""

    def __init__(self, res, recipe, env_where, env_label: str, inferred: str | None):
        self.res = res
        self.recipe = recipe
        self.env_where = env_where
        self.env_label = env_label
        self.inferred = inferred


def resolve_setup(st: Setup, *, strict: bool = True, quiet: bool = False, exact_bytes: bool = False) -> Resolved:
    """Resolve the shared options. When neither engine, catalog nor recipe is
    given, the engine is the one whose variables the environment sets (so a
    pasted Metrale bug report shows Metrale), else Atlas. ``exact_bytes``: the
    output carries a value that is not UTF-8 exactly (shell lines), so such a
    value is a warning rather than bad input."""
    from ..levers import parse_assignment, resolve
    from ..levers.present import env_line_finder, infer_engine

    env = st.environment()
    inferred = None
    if st.engine is None and st.catalog is None and st.recipe is None:
        inferred = infer_engine(env)
        st.engine = inferred
    catalog, recipe = st.load()
    sets = [parse_assignment(s) for s in st.sets]
    if strict:
        check_known(catalog, recipe, sets, st.unsets)
    else:
        check_structure(catalog, recipe, sets, st.unsets)
    res = resolve(catalog, recipe=recipe, env=env, sets=sets, unsets=list(st.unsets), max_batch_size=st.max_batch_size)
    env_where = env_line_finder(st.env_file, st.env_lines)
    label = "env-file" if st.env_file is not None else ("no-env" if st.no_env else "env")
    out = Resolved(res, recipe, env_where, label, inferred)
    if not quiet:
        warn_inputs(out, exact_bytes=exact_bytes)
    return out


def warn_inputs(r: Resolved, *, exact_bytes: bool = False) -> None:
    """Unknown prefixed variables and values that are not UTF-8: one stderr
    line each, saying what and where. Neither stops the command: the engine
    itself ignores the first and reads the second as Rust's std::env does, and
    the output shows exactly that. A value that is not UTF-8 is still bad
    input, so the command then exits 2 (see :func:`bad_input`)."""
    from ..levers.present import where_of

    res = r.res
    cat = res.catalog
    if r.inferred and r.inferred != "atlas":
        print(
            f"leverctl: engine {r.inferred} (its variables are the ones set; pass --engine to choose)", file=sys.stderr
        )
    for s in res.ignored:
        hint = did_you_mean(s.var, cat.variables())
        warn(f"{where_of(res, s.var, r.env_where)}: {s.var} is not a known {cat.title} lever variable{hint}; ignored")
    flag_not_utf8(res, r.env_where, exact_bytes=exact_bytes)


def flag_not_utf8(res, env_where=None, *, exact_bytes: bool = False) -> None:
    """Every lever variable whose value is not UTF-8 is bad input: one line
    each now, exit 2 when the command has finished (see :func:`bad_input`).
    With ``exact_bytes`` (an output that reproduces the bytes) it is a warning."""
    from ..levers.present import raw_display, where_of
    from ..levers.resolve import utf8

    by_var = res.catalog.by_var()
    for var, s in res.variables.items():
        if s.raw is not None and utf8(s.raw) is None and var in by_var:
            (warn if exact_bytes else bad_input)(
                f"{where_of(res, var, env_where)}: {var}={raw_display(s.raw)} is not valid UTF-8: "
                f"value rules read it as unset, presence rules as set"
            )

"""`leverctl recipe freeze` and `leverctl env RECIPE`: resolutions to recipes
and recipes to shell lines."""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path
from typing import Annotated, Optional

import typer

from ..errors import UserError
from ..levers.files import check_output_path, path_label, write_atomically
from . import common
from .common import CatalogOpt, resolve_setup, robust_output, warn, write
from .show import _freeze_header

recipe_app = typer.Typer(
    name="recipe",
    help="Recipes: freeze the current resolution into one.",
    no_args_is_help=True,
)


def _verify(text: str, res) -> None:
    """Load the frozen text as a recipe, alone, and check it resolves to the
    same values; a mismatch is a leverctl bug, never the user's."""
    from ..levers import load_recipe, resolve

    fd, tmp = tempfile.mkstemp(prefix="leverctl-freeze-", suffix=".toml")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        again = resolve(res.catalog, recipe=load_recipe(tmp))
    finally:
        os.unlink(tmp)
    if again.values() != res.values():
        bad = [f for f in res.levers if again[f].value != res[f].value]
        raise RuntimeError(f"frozen recipe does not reproduce {', '.join(bad)}")


@recipe_app.command("freeze")
@common.with_setup
def freeze(
    setup: common.Setup,
    out: Annotated[
        Optional[Path],
        typer.Option(
            "--out",
            "-o",
            metavar="FILE",
            help="Write the recipe here (atomically) instead of to stdout.",
            parser=lambda s: check_output_path(s, "--out"),
        ),
    ] = None,
) -> None:
    """Write the current resolution as a recipe that reproduces it exactly.

    Every lever variable in effect (recipe chain, environment, --set) is written
    as the exact string the engine sees, with the serve setting, the recipe's
    build defaults and model shapes. A value that is not valid UTF-8 cannot be
    written in TOML: one read by presence becomes "" (still set), one read as
    text is left out (the engine reads it as unset); each is reported on stderr.
    """
    from ..levers.freeze import dumps
    from ..levers.freeze import freeze as build

    robust_output()
    r = resolve_setup(setup)
    frozen = build(r.res, r.recipe)
    for n in frozen.notes:
        warn(n)
    text = dumps(frozen, header=_freeze_header(r))
    _verify(text, r.res)
    if out is None:
        write(text)
    else:
        write_atomically(out, text)
        print(f"leverctl: wrote {path_label(out)}", file=sys.stderr)


def env(
    recipe: Annotated[Path, typer.Argument(metavar="RECIPE", help="A recipe file (or recipes/ name).")],
    catalog: CatalogOpt = None,
    keep_others: Annotated[
        bool, typer.Option("--keep-others", help="Do not unset the engine's lever variables the recipe leaves unset.")
    ] = False,
) -> None:
    """Print a recipe as shell export/unset lines to eval.

    `export VAR='value'` for every lever variable the recipe sets, `unset VAR`
    for the rest of the engine's lever variables, so the shell then resolves
    exactly like the recipe.

    Example: eval "$(leverctl env recipes/qwen3-next-80b-a3b.toml)"
    """
    from ..levers import load_catalog, load_recipe
    from ..levers.freeze import shell_lines

    robust_output()
    rec = load_recipe(common.find_recipe(recipe))
    cat = load_catalog(path=catalog) if catalog is not None else common.recipe_catalog(rec)
    if catalog is not None and rec.engine != cat.engine:
        raise UserError(f"recipe is for engine {rec.engine!r}, but the catalog is {cat.engine!r}", rec.path)
    common.check_known(cat, rec, [], [])
    sets: dict = {v: s.value for v, s in rec.vars.items()}
    for v in rec.unset:
        sets.setdefault(v, None)
    comments = [f"{cat.title} levers of {rec.path}; eval in a POSIX shell"]
    if "max_batch_size" in rec.serve:
        n = rec.serve["max_batch_size"].value
        comments.append(f"max_batch_size = {n} is a serve setting, not a variable: pass --max-batch-size {n}")
    for k, s in rec.build.items():
        comments.append(f"[build] {k} = {str(s.value).lower()} is a build default, not a variable")
    lines, notes = shell_lines(cat, sets, unset_others=not keep_others, comments=comments)
    for n in notes:
        warn(n)
    write("\n".join(lines) + "\n")


def register(app: typer.Typer) -> None:
    app.add_typer(recipe_app, name="recipe")
    app.command("env")(env)

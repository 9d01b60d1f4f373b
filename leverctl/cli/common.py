"""Options shared by every command, declared once, and the way they become a
resolution. Diagnostics go to stderr, data to stdout."""
from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console

from ..errors import UserError

# Data on stdout; diagnostics (warnings, progress) on stderr. Width is pinned
# when not a terminal so piped tables do not wrap at 80 columns.
out = Console(soft_wrap=False, width=None if sys.stdout.isatty() else 200)
err = Console(stderr=True, soft_wrap=True)

EngineOpt = Annotated[Optional[str], typer.Option(
    "--engine", "-e", help="Shipped engine catalog: atlas (default) or metrale; a recipe names its own.")]
CatalogOpt = Annotated[Optional[Path], typer.Option(
    "--catalog", help="A catalog TOML file describing another engine's levers.")]
RecipeOpt = Annotated[Optional[Path], typer.Option(
    "--recipe", "-r", help="A recipe TOML file (or the name of one in recipes/).")]
SetOpt = Annotated[Optional[list[str]], typer.Option(
    "--set", "-s", metavar="VAR=VALUE", help="Set a variable, above the recipe and the environment. Repeatable.")]
UnsetOpt = Annotated[Optional[list[str]], typer.Option(
    "--unset", "-u", metavar="VAR", help="Unset a variable wherever it was set. Repeatable.")]
EnvFileOpt = Annotated[Optional[Path], typer.Option(
    "--env-file", help="Resolve as though this file's KEY=VALUE lines were the whole environment.")]
MaxBatchOpt = Annotated[Optional[int], typer.Option(
    "--max-batch-size", help="The serve max batch size (max_decode_seqs); overrides the recipe.")]
NoEnvOpt = Annotated[bool, typer.Option(
    "--no-env", help="Ignore the process environment (resolve the recipe and --set alone).")]


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

    def load(self):
        """(catalog, recipe or None)."""
        from ..levers import load_catalog, load_recipe

        recipe = load_recipe(find_recipe(self.recipe)) if self.recipe else None
        if self.catalog is not None:
            catalog = load_catalog(path=self.catalog)
        else:
            engine = self.engine or (recipe.engine if recipe else "atlas")
            if recipe is not None and self.engine and self.engine.lower() != recipe.engine:
                raise UserError(f"--engine {self.engine} disagrees with the recipe's engine {recipe.engine!r}",
                                recipe.path)
            catalog = recipe_catalog(recipe) if recipe is not None and not self.engine else load_catalog(engine)
        return catalog, recipe

    def environment(self):
        from ..levers import read_env_file, read_process_env

        if self.env_file is not None:
            return read_env_file(self.env_file)
        return {} if self.no_env else read_process_env()

    def resolve(self, *, strict: bool = True):
        """The resolution these options describe. ``strict`` refuses unknown
        variables in the recipe and in --set (lint reports them instead)."""
        from ..levers import parse_assignment, resolve

        catalog, recipe = self.load()
        sets = [parse_assignment(s) for s in self.sets]
        if strict:
            check_known(catalog, recipe, sets, self.unsets)
        return resolve(catalog, recipe=recipe, env=self.environment(), sets=sets,
                       unsets=list(self.unsets), max_batch_size=self.max_batch_size)


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


def suggest(name: str, choices) -> str:
    import difflib

    near = difflib.get_close_matches(name, list(choices), n=1, cutoff=0.6)
    return f" (did you mean {near[0]}?)" if near else ""


def check_known(catalog, recipe, sets, unsets) -> None:
    known = catalog.variables()
    if recipe is not None:
        for var in recipe.vars:
            if var not in known:
                raise UserError(f"unknown {catalog.title} lever variable {var}{suggest(var, known)}",
                                recipe.where(var))
    for var, _ in sets:
        if var not in known:
            raise UserError(f"--set {var}: unknown {catalog.title} lever variable{suggest(var, known)}")
    for var in unsets:
        if var not in known:
            raise UserError(f"--unset {var}: unknown {catalog.title} lever variable{suggest(var, known)}")


def setup(engine=None, catalog=None, recipe=None, sets=None, unsets=None, env_file=None,
          max_batch_size=None, no_env=False) -> Setup:
    return Setup(engine, catalog, recipe, list(sets or []), list(unsets or []), env_file,
                 max_batch_size, no_env)

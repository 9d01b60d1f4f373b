"""Lever catalogs, parsing rules, recipes and the pure resolver."""

from .catalog import Catalog, Lever, load_catalog
from .kinds import Drafter
from .recipes import Recipe, load_recipe
from .resolve import Provenance, Resolution, Resolved, parse_assignment, resolve
from .sources import read_env_file, read_process_env

__all__ = [
    "Catalog",
    "Drafter",
    "Lever",
    "Provenance",
    "Recipe",
    "Resolution",
    "Resolved",
    "load_catalog",
    "load_recipe",
    "parse_assignment",
    "read_env_file",
    "read_process_env",
    "resolve",
]

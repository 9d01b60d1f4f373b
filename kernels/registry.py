"""Every kernel path, by family. Adding a family is adding it to FAMILIES."""
from __future__ import annotations

import importlib

from .common.path import KernelPath

# Each module exposes PATHS: tuple[KernelPath, ...].
FAMILIES = ("w4a16", "gdn", "attention", "ffn_prefill", "lora", "mamba2", "moe", "moe_prefill")


def all_paths() -> tuple[KernelPath, ...]:
    paths: list[KernelPath] = []
    for fam in FAMILIES:
        mod = importlib.import_module(f"{__package__}.{fam}")
        paths.extend(mod.PATHS)
    return tuple(paths)


def get_path(name: str) -> KernelPath:
    for p in all_paths():
        if p.name == name:
            return p
    raise KeyError(name)

"""The import graph of ``leverctl`` and ``leverctl_kernels``: no module
imports itself back through others (a cycle, function-local imports
included), and no kernel family imports another family's private module
(what families share lives in ``kernels/common/``)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = {"leverctl": ROOT / "leverctl", "leverctl_kernels": ROOT / "kernels"}


def _modules() -> dict[str, tuple[Path, bool]]:
    """Every module: dotted name -> (file, whether it is a package's __init__)."""
    out = {}
    for name, base in PACKAGES.items():
        for f in base.rglob("*.py"):
            parts = [name, *f.relative_to(base).with_suffix("").parts]
            init = parts[-1] == "__init__"
            out[".".join(parts[:-1] if init else parts)] = (f, init)
    return out


def _imports(name: str, file: Path, init: bool, known: set[str]) -> set[str]:
    """The modules of ours ``name`` imports, anywhere in its body."""
    pkg = name if init else name.rsplit(".", 1)[0]
    out = set()
    for node in ast.walk(ast.parse(file.read_text(), str(file))):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names if a.name in known)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = pkg.split(".")[: len(pkg.split(".")) - node.level + 1]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            if mod not in known:
                continue
            subs = [f"{mod}.{a.name}" for a in node.names if f"{mod}.{a.name}" in known]
            out.update(subs)
            if len(subs) < len(node.names):  # a name of the module itself
                out.add(mod)
    out.discard(name)
    return out


def graph() -> dict[str, set[str]]:
    mods = _modules()
    return {n: _imports(n, f, init, set(mods)) for n, (f, init) in mods.items()}


def cycles(g: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(g.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(g):
        if v not in index:
            visit(v)
    return found


def test_the_import_graph_has_no_cycle():
    assert cycles(graph()) == []


def test_the_cycle_check_finds_one():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def _family(module: str) -> str | None:
    parts = module.split(".")
    if parts[0] != "leverctl_kernels" or len(parts) < 3 or parts[1] in ("common", "selection", "registry"):
        return None
    return parts[1]


def private_imports(g: dict[str, set[str]]) -> list[str]:
    """``importer -> imported`` where a family imports a module of another
    family with a private (``_``) name anywhere on its path."""
    bad = []
    for mod, deps in g.items():
        mine = _family(mod)
        for dep in deps:
            theirs = _family(dep)
            if mine and theirs and mine != theirs and any(p.startswith("_") for p in dep.split(".")[2:]):
                bad.append(f"{mod} -> {dep}")
    return sorted(bad)


def test_no_family_imports_another_familys_private_module():
    assert private_imports(graph()) == []


def test_the_private_import_check_finds_one():
    g = {
        "leverctl_kernels.gdn.decode.spec": {"leverctl_kernels.w4a16._device"},
        "leverctl_kernels.gdn.family": {"leverctl_kernels.gdn._layout", "leverctl_kernels.common.int4_device"},
    }
    assert private_imports(g) == ["leverctl_kernels.gdn.decode.spec -> leverctl_kernels.w4a16._device"]

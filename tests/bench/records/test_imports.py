"""No import cycle in the bench: no module of leverctl/bench imports one that
imports it, directly or through others, function-local imports included;
and the records import nothing of the bench outside their package."""

from __future__ import annotations

import ast
from pathlib import Path

BENCH = Path(__file__).resolve().parents[3] / "leverctl" / "bench"


def _modules() -> dict[str, Path]:
    out = {}
    for py in BENCH.rglob("*.py"):
        parts = py.relative_to(BENCH.parent.parent).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = py
    return out


def imports(mod: str, py: Path, known: set[str]) -> set[str]:
    """The modules of ``known`` that ``mod`` (at ``py``) imports, anywhere in it."""
    package = mod if py.name == "__init__.py" else mod.rpartition(".")[0]
    out = set()
    for node in ast.walk(ast.parse(py.read_text("utf-8"))):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = package.split(".")[: len(package.split(".")) - node.level + 1] if node.level else []
            stem = ".".join(base + ([node.module] if node.module else []))
            names = [f"{stem}.{a.name}" if f"{stem}.{a.name}" in known else stem for a in node.names]
        else:
            continue
        for name in names:
            while name and name not in known:
                name = name.rpartition(".")[0]
            if name and name != mod:
                out.add(name)
    return out


def cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """A cycle of ``graph`` (its modules in order, the first again at the end), or None."""
    state: dict[str, int] = {}  # 1: on the path, 2: done
    path: list[str] = []

    def visit(v: str) -> list[str] | None:
        state[v] = 1
        path.append(v)
        for w in sorted(graph[v]):
            if state.get(w) == 1:
                return path[path.index(w) :] + [w]
            if w not in state and (found := visit(w)):
                return found
        path.pop()
        state[v] = 2
        return None

    for v in sorted(graph):
        if v not in state and (found := visit(v)):
            return found
    return None


def test_no_module_of_the_bench_imports_one_that_imports_it():
    mods = _modules()
    graph = {m: imports(m, py, set(mods)) for m, py in mods.items()}
    assert "leverctl.bench.records.read" in graph["leverctl.bench.records.merge"]  # the walk sees imports
    assert cycle(graph) is None, " -> ".join(cycle(graph))


def test_the_records_import_nothing_of_the_bench_outside_their_package():
    mods = _modules()
    for m, py in mods.items():
        if m.startswith("leverctl.bench.records"):
            outside = {x for x in imports(m, py, set(mods)) if not x.startswith("leverctl.bench.records")}
            assert not outside, (m, outside)


def test_a_cycle_is_found_where_there_is_one():
    assert cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == ["a", "b", "c", "a"]
    assert cycle({"a": {"b"}, "b": set()}) is None

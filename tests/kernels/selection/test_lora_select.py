"""The LoRA paths' decision tables and lever binding, without a kernel run.

Atlas: ``lora_eager`` picks the merged weights, off the per-forward adapter,
whatever ``lora_rotate`` says; ``lora_rotate`` reaches the run as ``rotate``
(a swap permitted or refused). Metrale: the per-forward adapter at every
setting of its ``lora_rotate``; its ``lora_eager`` steers the decode step's
CUDA graph, not these paths. ``leverctl explain`` and ``leverctl kernels``
say the same from the tables.
"""

from __future__ import annotations

import itertools

import pytest

from leverctl.bench.plan import applies, path_levers
from leverctl.levers import load_catalog
from leverctl.levers.explain import explain
from leverctl_kernels.selection import TABLES
from leverctl_kernels.selection.lora import PROJ as LORA_PROJ
from leverctl_kernels.selection.lora import PROJ_POOL as LORA_PROJ_POOL


def _paths():
    from leverctl_kernels.lora.proj.spec import PATH as PROJ
    from leverctl_kernels.lora.proj_pool.spec import PATH as PROJ_POOL

    return PROJ, PROJ_POOL


def _shapes(path):
    return [*path.shapes("smoke", None), *path.shapes("model", None)]


def engine_variant(engine: str, lv: dict) -> str:
    """What each engine runs, from its lever file: Atlas folds the adapter
    in at load under lora_eager; Metrale always applies it per forward."""
    return "merged" if engine == "atlas" and lv["lora_eager"] else "per_forward"


@pytest.mark.parametrize("engine", ("atlas", "metrale"))
def test_select_for_every_lever_combination_of_each_engine(engine):
    cat = load_catalog(engine)
    proj, pool = _paths()
    path = proj if engine == "atlas" else pool
    assert applies(path, engine, cat.fields) and not applies(pool if engine == "atlas" else proj, engine, cat.fields)
    for eager, rotate in itertools.product((False, True), repeat=2):
        values = {f: None for f in cat.fields} | {"lora_eager": eager, "lora_rotate": rotate}
        levers = path_levers(path, values, cat.fields)
        for shape in _shapes(path):
            got = path.select(levers, shape)
            assert got.variant == engine_variant(engine, {"lora_eager": eager}), (engine, eager, rotate)
            assert path.bind(levers, shape, engine)["rotate"] == int(rotate)
            assert path.bind(levers, shape, engine).label == shape.label


def test_unset_levers_take_the_catalog_defaults_per_forward_and_no_rotation():
    proj, pool = _paths()
    s = proj.shapes("smoke", None)[0]
    assert proj.select({}, s).variant == pool.select({}, s).variant == "per_forward"
    assert proj.bind({}, s, "atlas")["rotate"] == 0
    assert dict(LORA_PROJ.assumed) == {"lora_eager": False, "lora_rotate": False}


def test_the_catalogs_steer_the_lora_paths_and_metrales_lora_eager_stays_with_the_decode_graph():
    atlas, metrale = load_catalog("atlas"), load_catalog("metrale")
    assert list(atlas.lever("lora_eager").steers) == ["lora.proj"]
    assert "lora.proj" in atlas.lever("lora_rotate").steers
    assert list(metrale.lever("lora_rotate").steers) == ["lora.proj_pool"]
    steers = metrale.lever("lora_eager").steers
    assert "attention.decode_graph" in steers and not any(s.startswith("lora.") for s in steers)
    assert "lora_eager" in TABLES["attention.decode_graph"].levers
    assert "lora_eager" not in LORA_PROJ_POOL.levers


def test_explain_words_the_table_and_the_binding():
    atlas = load_catalog("atlas")
    (st,) = [s for s in explain(atlas, atlas.lever("lora_eager")).selects if s.path == "lora.proj"]
    assert st.kernel and st.applies
    words = {s.value: s.text for s in st.selected}
    assert words[False].startswith("per_forward") and words[True].startswith("merged")
    (rot,) = [s for s in explain(atlas, atlas.lever("lora_rotate")).selects if s.path == "lora.proj"]
    assert "permits swapping the adapter" in rot.binds and "refused" in rot.binds
    metrale = load_catalog("metrale")
    (pool,) = explain(metrale, metrale.lever("lora_rotate")).selects
    assert pool.path == "lora.proj_pool" and {s.text for s in pool.selected} == {"per_forward"}


def _cli(capsys, *args: str) -> str:
    from leverctl.cli.app import main

    with pytest.raises(SystemExit) as e:
        main(list(args))
    out = capsys.readouterr().out
    assert e.value.code in (0, None), out
    return " ".join(out.split())  # the tables wrap long cells


def test_leverctl_kernels_and_explain_list_the_lora_paths(capsys, monkeypatch):
    for var in ("ATLAS_LORA_EAGER", "ATLAS_LORA_ROTATE", "METRALE_LORA_EAGER", "METRALE_LORA_ROTATE"):
        monkeypatch.delenv(var, raising=False)
    out = _cli(capsys, "kernels")
    assert "lora.proj " in out and "lora.proj_pool" in out and "merged" in out
    out = _cli(capsys, "explain", "METRALE_LORA_EAGER")
    assert "attention.decode_graph" in out and "lora.proj_pool" in out
    out = _cli(capsys, "explain", "ATLAS_LORA_EAGER")
    assert "lora_eager on: merged" in out and "lora_eager off (default): per_forward" in out


def test_model_shapes_are_the_qwen3_8b_projections_at_both_ranks_and_three_row_counts():
    proj, _ = _paths()
    dims = {(s["m"], s["n"], s["k"], s["r"]) for s in proj.shapes("model", None)}
    assert dims == {(m, n, 4096, r) for m in (1, 8, 512) for n in (4096, 12288) for r in (16, 64)}
    no_ffn = proj.shapes("model", {"hidden": 2048})
    assert {s["n"] for s in no_ffn} == {2048}
    with pytest.raises(ValueError, match="unknown shape preset"):
        proj.shapes("huge", None)

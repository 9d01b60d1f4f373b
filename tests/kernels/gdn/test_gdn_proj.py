"""``gdn.proj_gemv_batch``: Qwen3-Next's GDN-layer projections in a
multi-sequence decode through the contiguous-batch GEMV tier or one GEMV
per row.

The decision table against Metrale's rule for every lever value, row
count (1 to 17) and whether the tier's kernel resolved; the model shapes
from the Qwen3-Next recipe at decode batches 1, 4 and 16. In the
simulator, every variant at the smoke shapes passes the bench's check
(fp16 outputs of fp32 sums against the float64 product), and a tier
kernel that skips a row's activations fails it.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from leverctl_kernels.selection.gdn import PROJ_GEMV_BATCH as GDN_PROJ_GEMV_BATCH


def engine_tier(on: bool, rows: int, resolved: bool) -> str:
    if on and resolved and rows <= 16:
        return "batch4" if rows <= 4 else "batch16"
    return "per_row"


def test_the_table_is_the_engines_for_every_lever_value_row_count_and_resolution():
    seen = set()
    for on, rows, resolved in itertools.product((False, True), range(1, 18), (False, True)):
        got = GDN_PROJ_GEMV_BATCH.select({"ssm_gemv_batch4": on}, {"m": rows, "gemv_tier_loaded": int(resolved)})
        assert got.variant == engine_tier(on, rows, resolved), (on, rows, resolved)
        seen.add(got.variant)
    assert seen == {"batch4", "batch16", "per_row"}


def test_the_notes_say_why_the_tier_was_not_taken():
    c = GDN_PROJ_GEMV_BATCH.select({}, {"m": 17})
    assert c.variant == "per_row" and "17 rows, more than 16" in c.note
    c = GDN_PROJ_GEMV_BATCH.select({}, {"m": 2, "gemv_tier_loaded": 0})
    assert c.variant == "per_row" and "did not resolve" in c.note


def _path():
    from leverctl_kernels.gdn.proj_gemv_batch.spec import PATH as PROJ_GEMV_BATCH

    return PROJ_GEMV_BATCH


def test_model_shapes_are_qwen3_nexts_projections_at_1_4_and_16_rows():
    from pathlib import Path

    from leverctl.levers.recipes import load_recipe

    recipe = load_recipe(Path(__file__).resolve().parents[3] / "recipes" / "qwen3-next-80b-a3b-metrale.toml")
    shapes = _path().shapes("model", recipe.model)
    assert {(s["n"], s["k"]) for s in shapes} == {(12288, 2048), (64, 2048), (2048, 4096)}
    assert sorted({s["m"] for s in shapes}) == [1, 4, 16]
    assert {s["m"]: _path().select({}, s).variant for s in shapes} == {1: "batch4", 4: "batch4", 16: "batch16"}
    assert _path().engines == ("metrale",)
    assert all(s.as_dict()["gemv_tier_loaded"] == 1 for s in shapes)  # the record states the condition


def test_the_tiers_read_the_weights_once_and_per_row_once_per_row():
    s = next(s for s in _path().shapes("model", None) if s["m"] == 16)
    once, per_row = _path().variant_traffic("batch16", s), _path().variant_traffic("per_row", s)
    assert per_row.bytes - once.bytes == 15 * (once.bytes - 2 * 16 * s["k"] - 2 * 16 * s["n"])
    assert _path().variant_launches("per_row", s) == 16 and _path().variant_launches("batch16", s) == 1


def _check(variant, shape, launch=None, seed=0):
    from numba import cuda

    from leverctl.bench.check import check

    path = _path()
    inputs = path.make_inputs(shape, np.random.default_rng(seed))
    launch = launch or path.variants[variant].build(shape)
    bufs, fig = check(path, variant, shape, launch, inputs, cuda)
    return fig, bufs["y"].copy_to_host()


def _smoke(m):
    return next(s for s in _path().shapes("smoke", None) if s["m"] == m)


# batch4 takes at most 4 rows; per_row runs at the 5-row shape only (its
# launches cost the simulator the most), where it is what the lever off picks.
CASES = [("batch4", 3), ("batch16", 3), ("batch16", 5), ("per_row", 5)]


@pytest.mark.sim
@pytest.mark.parametrize("variant,m", CASES, ids=[f"{v}-m{m}" for v, m in CASES])
def test_each_variant_passes_the_bench_check(variant, m):
    fig, _ = _check(variant, _smoke(m))
    assert fig.passed, fig


@pytest.mark.sim
def test_a_tier_kernel_that_skips_a_row_fails_the_check():
    shape = _smoke(5)
    broken = _path().variants["batch16"].build(shape, ROWS_USED=4)  # the fifth row's activations never read
    fig, y = _check("batch16", shape, broken)
    assert not fig.passed, fig
    assert np.all(y[4] == 0) and np.any(y[:4] != 0)


def test_the_4_row_kernel_refuses_a_fifth_row():
    from leverctl_kernels.gdn.proj_gemv_batch import batch4 as proj_batch4

    with pytest.raises(ValueError, match="1 to 4 rows"):
        proj_batch4.build(_smoke(5))


@pytest.mark.sim
@pytest.mark.parametrize("variant,m", [("batch4", 4), ("batch16", 16)])
def test_each_tier_kernel_takes_its_full_row_count(variant, m):
    from leverctl_kernels.common.path import Shape

    fig, _ = _check(variant, Shape(f"full m{m}", dict(m=m, n=3, k=136)), seed=m)
    assert fig.passed, fig


# Rows of 16-byte groups (k % 32 == 0): the tiers' 16-byte path. k = 1056 is
# 33 groups: the 4-row kernel's one chunk ends one group into a second warp
# step; the 16-row kernel's 512-input chunks hold 16, 16 and 1.
WIDE = dict(m=3, n=5, k=1056)


@pytest.mark.sim
@pytest.mark.parametrize("variant", ["batch4", "batch16"])
def test_the_tiers_stream_16_byte_groups_and_their_tail_counts_once(variant):
    from leverctl.profile import memtrace as mt
    from leverctl_kernels.common.path import Shape

    shape = Shape(f"wide m3 k{WIDE['k']}", WIDE)
    box = []
    trace = mt.run_traced(lambda: box.append(_check(variant, shape, seed=4)))
    fig, _ = box[0]
    assert fig.passed, fig
    rows = [r for r in mt.summarize(trace).sites if r.space == mt.GLOBAL and r.kind == "load"]
    weights = shape["n"] * shape["k"] // 2
    wide = sum(r.used_bytes for r in rows if r.bytes == 16 * r.accesses)
    assert wide >= weights, [r.to_json() for r in rows]  # every weight byte by a 16-byte load
    for fault in (1, 2):  # the last group dropped, or counted twice
        broken = _path().variants[variant].build(shape, TAIL_FAULT=fault)
        fig, _ = _check(variant, shape, broken, seed=4)
        assert not fig.passed, (fault, fig)

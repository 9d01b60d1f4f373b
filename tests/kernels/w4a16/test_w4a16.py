"""The W4A16 family: path declarations, lever selection, and every variant
against the float64 reference in the CUDA simulator (tiny odd shapes).

The comparator here (``_check_test_local``) is this file's own; it applies
a path's :class:`Tolerance` the way the contract defines it and also fails
on any non-finite element (outputs are poisoned with NaN before each run, so
an element a kernel never writes fails).
"""

from __future__ import annotations

import itertools
import pathlib
import re

import numpy as np
import pytest

from leverctl_kernels.common import int4
from leverctl_kernels.common.path import Shape, Tolerance

KERNELS_DIR = pathlib.Path(__file__).resolve().parents[3] / "kernels"


def _paths():
    # Imported lazily: importing a path's spec imports numba.cuda, which must
    # happen after conftest has chosen the simulator.
    from leverctl_kernels.registry import family_paths

    return family_paths("w4a16")


def _path(name):
    return {p.name: p for p in _paths()}[name]


def _w4a16():
    """The family's paths as ``GEMV``, ``GEMV_DUAL``, ``FFN_DECODE``, ``GEMM``
    (``w4a16.gemv``...) and ``PATHS``."""
    from types import SimpleNamespace

    return SimpleNamespace(PATHS=_paths(), **{p.name.split(".")[1].upper(): p for p in _paths()})


# ── test-local comparator ────────────────────────────────────────────────────


def _check_test_local(got, ref, tol: Tolerance) -> tuple[bool, str]:
    """Test-local check: ``||got - ref|| / ||ref|| <= tol.rel`` and
    ``max|got - ref| <= tol.abs_bound(ref)``, and every element finite."""
    g = np.asarray(got, dtype=np.float64)
    r = np.asarray(ref, dtype=np.float64)
    if g.shape != r.shape:
        return False, f"shape {g.shape} != reference {r.shape}"
    bad = ~np.isfinite(g)
    if bad.any():
        first = tuple(int(i) for i in np.argwhere(bad)[0])
        return False, f"{int(bad.sum())} non-finite elements (first at {first}): unwritten?"
    diff = g - r
    rel = float(np.linalg.norm(diff) / max(np.linalg.norm(r), 1e-30))
    mx = float(np.abs(diff).max()) if diff.size else 0.0
    bound = tol.abs_bound(r)
    ok = rel <= tol.rel and mx <= bound
    return ok, f"rel={rel:.3g} (<= {tol.rel:g}) max_abs={mx:.3g} (<= {bound:.3g})"


def test_comparator_test_local():
    tol = Tolerance(rel=1e-3, abs=1e-2)
    ref = np.array([1.0, -2.0, 3.0])
    assert _check_test_local(ref + 1e-4, ref, tol)[0]
    assert not _check_test_local(ref * 1.01, ref, tol)[0]  # relative norm
    assert not _check_test_local(ref + [0, 0, 0.02], ref, Tolerance(1.0, 1e-2))[0]  # max abs
    assert not _check_test_local(np.array([1.0, np.nan, 3.0]), ref, Tolerance(1e9, 1e9))[0]
    assert not _check_test_local(ref[:2], ref, tol)[0]


# ── declarations (fast) ──────────────────────────────────────────────────────


def test_paths_declared():
    by = {p.name: p for p in _paths()}
    assert set(by) == {"w4a16.gemv", "w4a16.gemv_dual", "w4a16.ffn_decode", "w4a16.gemm"}
    assert by["w4a16.gemv"].levers == ("gemv_sw",)
    assert by["w4a16.gemv_dual"].levers == ("gemv_sw",)
    assert by["w4a16.ffn_decode"].levers == ("decode_ffn_via_gemm", "decode_split_silu", "gemv_sw")
    assert dict(by["w4a16.ffn_decode"].lever_defaults) == {"decode_split_silu": False}
    assert by["w4a16.gemm"].levers == ("ffn_small_m",)
    assert set(by["w4a16.gemv"].variants) == {"gemv_sw", "gemv_64t"}
    assert set(by["w4a16.gemv_dual"].variants) == {"gemv_dual_sw", "gemv_dual_64t"}
    assert set(by["w4a16.ffn_decode"].variants) == {
        "gemv_sw+fused",
        "gemv_64t+fused",
        "gemv_sw+split",
        "gemv_64t+split",
        "gemm_m1",
    }
    assert list(by["w4a16.gemm"].variants) == ["small_m", "default_tiles", "fma_tiles"]
    for p in _paths():
        assert p.family == "w4a16" and p.name.startswith("w4a16.")
        for name, v in p.variants.items():
            assert v.name == name and v.summary


def test_registered_family():
    from leverctl_kernels import registry

    assert "w4a16" in {p.family for p in registry.all_paths()}
    assert registry.get_path("w4a16.gemm").name == "w4a16.gemm"
    assert registry.spec_module("w4a16.gemm") == "leverctl_kernels.w4a16.gemm.spec"


def test_kernels_never_read_the_environment():
    files = sorted((KERNELS_DIR / "w4a16").rglob("*.py")) + [KERNELS_DIR / "common" / "int4.py"]
    assert len(files) > 15
    for f in files:
        src = f.read_text()
        assert not re.search(r"\benviron\b|\bgetenv\b|NUMBA_", src), f


# ── select: every lever combination (fast) ───────────────────────────────────

SMOKE_GEMV = Shape("m1-n37-k264", {"m": 1, "n": 37, "k": 264})
SMOKE_FFN = Shape("h72-i40", {"m": 1, "hidden": 72, "inter": 40})


@pytest.mark.parametrize("sw", [True, False], ids=["sw-on", "sw-off"])
def test_select_gemv_and_dual(sw):
    assert _path("w4a16.gemv").select({"gemv_sw": sw}, SMOKE_GEMV).variant == ("gemv_sw" if sw else "gemv_64t")
    assert _path("w4a16.gemv_dual").select({"gemv_sw": sw}, SMOKE_GEMV).variant == (
        "gemv_dual_sw" if sw else "gemv_dual_64t"
    )


FFN_CASES = [
    # (decode_ffn_via_gemm, decode_split_silu, gemv_sw) -> variant
    ((via, split, sw), "gemm_m1" if via else f"gemv_{'sw' if sw else '64t'}+{'split' if split else 'fused'}")
    for via, split, sw in itertools.product([False, True], repeat=3)
]


@pytest.mark.parametrize(
    "levers,expected",
    FFN_CASES,
    ids=[f"via_gemm={a}-split_silu={b}-gemv_sw={c}" for (a, b, c), _ in FFN_CASES],
)
def test_select_ffn_decode(levers, expected):
    path = _path("w4a16.ffn_decode")
    choice = path.select(dict(zip(path.levers, levers)), SMOKE_FFN)
    assert choice.variant == expected
    assert choice.variant in path.variants


def test_select_ffn_decode_without_split_lever_is_fused():
    # Atlas has no decode_split_silu: its lever_defaults value (fused) applies.
    from leverctl.bench.plan import path_levers
    from leverctl.levers import load_catalog

    path = _path("w4a16.ffn_decode")
    atlas = load_catalog("atlas")
    assert "decode_split_silu" not in atlas.fields and dict(path.lever_defaults) == {"decode_split_silu": False}

    def atlas_select(**values):
        return path.select(path_levers(path, values, atlas.fields), SMOKE_FFN).variant

    assert atlas_select(decode_ffn_via_gemm=False, gemv_sw=True) == "gemv_sw+fused"
    assert atlas_select(decode_ffn_via_gemm=False, gemv_sw=False) == "gemv_64t+fused"
    assert atlas_select(decode_ffn_via_gemm=True, gemv_sw=False) == "gemm_m1"


def test_select_ffn_decode_assumes_metrales_split_default_where_a_mapping_leaves_the_lever_out():
    """A mapping without decode_split_silu (or with None) takes the catalogs'
    default, which only Metrale's catalog has: on, the split kernels."""
    from leverctl.levers import load_catalog

    path = _path("w4a16.ffn_decode")
    assert load_catalog("metrale").lever("decode_split_silu").default is True
    assert path.select({"decode_ffn_via_gemm": False, "gemv_sw": True}, SMOKE_FFN).variant == "gemv_sw+split"
    assert path.select({"decode_split_silu": None, "gemv_sw": False}, SMOKE_FFN).variant == "gemv_64t+split"
    assert path.select({"decode_ffn_via_gemm": True}, SMOKE_FFN).variant == "gemm_m1"


GEMM_CASES = [
    # (ffn_small_m, m, k) -> (variant, what the note mentions)
    (True, 1, 2048, "small_m", None),
    (True, 64, 512, "small_m", None),
    (True, 5, 160, "small_m", None),
    (True, 16, 272, "small_m", None),  # k % 32 != 0: the FMA small-M tiles needed 32, tensor cores need 16
    (True, 65, 2048, "default_tiles", "m=65"),
    (True, 67, 160, "default_tiles", "m=67"),
    (True, 16, 264, "fma_tiles", "step K by 16"),
    (True, 67, 136, "fma_tiles", "step K by 16"),
    (False, 1, 2048, "default_tiles", None),
    (False, 5, 160, "default_tiles", None),
    (False, 67, 160, "default_tiles", None),
    (False, 67, 264, "fma_tiles", "step K by 16"),
    (False, 5, 8, "fma_tiles", "step K by 16"),
]


@pytest.mark.parametrize(
    "lever,m,k,expected,note",
    GEMM_CASES,
    ids=[f"small_m={c[0]}-m{c[1]}-k{c[2]}" for c in GEMM_CASES],
)
def test_select_gemm(lever, m, k, expected, note):
    path = _path("w4a16.gemm")
    choice = path.select({"ffn_small_m": lever}, Shape(f"m{m}-n37-k{k}", {"m": m, "n": 37, "k": k}))
    assert choice.variant == expected
    if note is None:
        assert choice.note == ""
    else:
        assert note in choice.note
    if expected == "default_tiles" and lever:
        assert choice.note == f"ffn_small_m is on but m={m} > 64: default tiles"  # the guard is no reason
    if expected == "fma_tiles":
        assert "FP32-FMA" in choice.note and f"m={m}" not in choice.note


@pytest.mark.parametrize("engine", ["atlas", "metrale"])
def test_select_gemm_every_lever_value_in_both_engines(engine):
    """Each engine's ffn_small_m (unset, on, off, as its catalog resolves
    them) at a small-M, a large-M and a k % 16 != 0 shape."""
    from leverctl.bench.plan import path_levers
    from leverctl.levers import load_catalog

    cat = load_catalog(engine)
    path = _path("w4a16.gemm")
    assert "ffn_small_m" in cat.fields
    defaults = {f: lv.default for f, lv in cat.levers.items()}
    shapes = {
        "small": Shape("m16-n37-k2048", {"m": 16, "n": 37, "k": 2048}),
        "large": Shape("m256-n37-k2048", {"m": 256, "n": 37, "k": 2048}),
        "odd_k": Shape("m16-n37-k264", {"m": 16, "n": 37, "k": 264}),
    }
    want = {
        True: {"small": "small_m", "large": "default_tiles", "odd_k": "fma_tiles"},
        False: {"small": "default_tiles", "large": "default_tiles", "odd_k": "fma_tiles"},
    }
    for value in (None, True, False):
        values = dict(defaults) if value is None else {**defaults, "ffn_small_m": value}
        levers = path_levers(path, values, cat.fields)
        on = defaults["ffn_small_m"] if value is None else value
        for name, shape in shapes.items():
            assert path.select(levers, shape).variant == want[on][name], (engine, value, name)


def test_explain_words_the_gemm_guard_first():
    from leverctl.levers.explain import words
    from leverctl_kernels.selection.w4a16 import GEMM as W4A16_GEMM

    on = words(W4A16_GEMM.cases({"ffn_small_m": True}))
    assert on.startswith("k % 16 != 0: fma_tiles")
    assert "m <= 64: small_m" in on
    assert "[ffn_small_m is on but m > 64: default tiles]" in on  # the guard is not among the reasons
    off = words(W4A16_GEMM.cases({"ffn_small_m": False}))
    assert off.startswith("k % 16 != 0: fma_tiles") and off.endswith("otherwise: default_tiles")


def test_select_defaults_when_levers_missing():
    assert _path("w4a16.gemv").select({}, SMOKE_GEMV).variant == "gemv_sw"
    assert _path("w4a16.gemm").select({}, Shape("s", {"m": 8, "n": 64, "k": 256})).variant == "small_m"


# ── shapes, inputs, traffic (fast) ───────────────────────────────────────────

QWEN3_8B = {"name": "Qwen3-8B", "hidden": 4096, "ffn": {"intermediate": 12288}, "bench": {"gemm_rows": [16, 64, 256]}}
MOE = {
    "hidden": 2048,
    "moe": {"expert_intermediate": 512, "shared_intermediate": 1024},
    "bench": {"gemm_rows": [32]},
}


def test_smoke_shapes_are_tiny_and_odd():
    fam = _w4a16()
    for p in fam.PATHS:
        shapes = p.shapes("smoke", None)
        assert shapes and all(s.label for s in shapes)
        for s in shapes:
            d = dict(s.dims)
            if "n" in d:
                assert d["n"] % 2 == 1 and d["k"] % 128 != 0
            else:
                assert d["hidden"] % 128 and d["inter"] % 128
    gemm = fam.GEMM.shapes("smoke", None)
    assert {s["m"] for s in gemm} == {5, 67}
    with pytest.raises(ValueError):
        fam.GEMV.shapes("huge", None)


def test_model_shapes_dense_recipe():
    fam = _w4a16()
    assert [s.label for s in fam.GEMV.shapes("model", QWEN3_8B)] == [
        "ffn-gate n12288 k4096",
        "ffn-down n4096 k12288",
    ]
    assert [dict(s.dims) for s in fam.FFN_DECODE.shapes("model", QWEN3_8B)] == [
        {"m": 1, "hidden": 4096, "inter": 12288}
    ]
    gemm = fam.GEMM.shapes("model", QWEN3_8B)
    assert [s["m"] for s in gemm] == [16, 16, 64, 64, 256, 256]
    assert gemm[0].label == "ffn-gate m16 n12288 k4096"


def test_the_ffn_profile_shape_keeps_every_row_and_traces_a_few_blocks():
    """The FFN's profile shape is the model's token (both row lengths: the
    gate and up rows ``hidden`` long, the down rows ``inter``), and the
    trace runs a few blocks of each launch instead of cutting rows."""
    fam = _w4a16()
    make = fam.FFN_DECODE.extra["profile_shape"]
    (model,) = fam.FFN_DECODE.shapes("model", None)
    assert (model["hidden"], model["inter"]) == (2048, 512)
    ps = make(model)
    assert dict(ps.dims) == {"m": 1, "hidden": 2048, "inter": 512} and ps.label == "profile h2048 i512"
    assert dict(make(fam.FFN_DECODE.shapes("model", QWEN3_8B)[0]).dims) == {"m": 1, "hidden": 4096, "inter": 12288}
    assert fam.FFN_DECODE.extra["profile_blocks"] == 4


def test_model_shapes_moe_recipe_and_fallback():
    fam = _w4a16()
    labels = [s.label for s in fam.GEMV.shapes("model", MOE)]
    assert labels == [
        "expert-gate n512 k2048",
        "expert-down n2048 k512",
        "shared-gate n1024 k2048",
        "shared-down n2048 k1024",
    ]
    assert [s["m"] for s in fam.GEMM.shapes("model", MOE)] == [32] * 4
    # No recipe (or one without FFN sizes): Qwen3-Next-80B-A3B, whose expert
    # and shared-expert FFNs have the same size and share their shapes.
    for model in (None, {}, {"name": "x", "hidden": 1024}):
        shapes = fam.GEMV.shapes("model", model)
        assert [s.label for s in shapes] == ["expert/shared-gate n512 k2048", "expert/shared-down n2048 k512"]
    assert [s["m"] for s in fam.GEMM.shapes("model", None)] == [16, 16, 64, 64, 256, 256, 1024, 1024, 4096, 4096]


def test_make_inputs_layout_seeded_and_fresh():
    fam = _w4a16()
    shape = Shape("m3-n40-k264", {"m": 3, "n": 40, "k": 264})
    for p, names in [
        (fam.GEMV, {"x", "qweight", "scales"}),
        (fam.GEMV_DUAL, {"x", "qw_gate", "s_gate", "qw_up", "s_up"}),
        (fam.GEMM, {"a", "qweight", "scales"}),
    ]:
        a = p.make_inputs(shape, np.random.default_rng(1))
        b = p.make_inputs(shape, np.random.default_rng(1))
        rng = np.random.default_rng(1)
        c1, c2 = p.make_inputs(shape, rng), p.make_inputs(shape, rng)
        assert set(a) == names
        for key in a:
            np.testing.assert_array_equal(a[key], b[key])
        assert not np.array_equal(
            c1["scales" if "scales" in c1 else "s_gate"], c2["scales" if "scales" in c2 else "s_gate"]
        )
        for key, v in a.items():
            if key.startswith("q"):
                assert v.dtype == np.uint32 and v.shape == (40, 33)
            elif key.startswith("s"):
                assert v.dtype == np.float16 and v.shape == (40, 3)
            else:
                assert v.dtype == np.float16 and v.shape[-1] == 264
        w = int4.dequantize_w4(a[[k for k in a if k.startswith("q")][0]], a[[k for k in a if k.startswith("s")][0]])
        assert 0.01 < w.std() < 0.03
    ffn = fam.FFN_DECODE.make_inputs(SMOKE_FFN, np.random.default_rng(0))
    assert ffn["qw_gate"].shape == (40, 9) and ffn["qw_down"].shape == (72, 5)
    assert ffn["s_down"].shape == (72, 1) and ffn["x"].shape == (72,)


def test_outputs_and_traffic():
    fam = _w4a16()
    assert dict(fam.GEMV.outputs(SMOKE_GEMV)) == {"y": ((37,), "float16")}
    assert dict(fam.GEMV_DUAL.outputs(SMOKE_GEMV)) == {"gate": ((37,), "float16"), "up": ((37,), "float16")}
    t = fam.GEMV.traffic(SMOKE_GEMV)
    assert t.bytes_read == 37 * 33 * 4 + 37 * 3 * 2 + 264 * 2 and t.bytes_written == 74
    assert t.flops == 2 * 37 * 264
    g = Shape("m5-n37-k160", {"m": 5, "n": 37, "k": 160})
    assert dict(fam.GEMM.outputs(g)) == {"c": ((5, 37), "float16")}
    assert fam.GEMM.traffic(g).flops == 2 * 5 * 37 * 160
    base = fam.FFN_DECODE.traffic(SMOKE_FFN)
    for name in fam.FFN_DECODE.variants:
        vt = fam.FFN_DECODE.variant_traffic(name, SMOKE_FFN)
        assert vt.bytes > base.bytes and vt.flops == base.flops
    # The library comparison does the same work as one fp16 product.
    assert fam.GEMV.extra["gemm_mnk"](SMOKE_GEMV) == (1, 37, 264)
    assert fam.GEMV_DUAL.extra["gemm_mnk"](SMOKE_GEMV) == (1, 74, 264)
    assert fam.GEMM.extra["gemm_mnk"](g) == (5, 37, 160)
    fused = fam.FFN_DECODE.variant_traffic("gemv_sw+fused", SMOKE_FFN)
    split = fam.FFN_DECODE.variant_traffic("gemv_sw+split", SMOKE_FFN)
    assert split.bytes - fused.bytes == 2 * 2 * 40  # h written and read back


def test_small_m_refuses_k_not_multiple_of_32():
    from leverctl_kernels.w4a16.gemm import gemm_tiled

    with pytest.raises(ValueError, match="multiple of 32"):
        gemm_tiled.build_small_m(Shape("m5-n37-k136", {"m": 5, "n": 37, "k": 136}))


def test_references_match_dense_loops():
    from leverctl_kernels.w4a16 import naive

    rng = np.random.default_rng(5)
    qw, s = int4.random_w4(rng, 3, 136)
    w = int4.dequantize_w4(qw, s).astype(np.float64)
    x = rng.standard_normal(136).astype(np.float16)
    y = [sum(w[r, c] * float(x[c]) for c in range(136)) for r in range(3)]
    np.testing.assert_allclose(naive.naive_gemv(qw, s, x), y, rtol=1e-12)
    a = rng.standard_normal((2, 136)).astype(np.float16)
    np.testing.assert_allclose(naive.naive_gemm(a, qw, s), a.astype(np.float64) @ w.T, rtol=1e-12)
    g = np.array([-3.0, 0.0, 2.0])
    np.testing.assert_allclose(naive.naive_silu_mul(g, [1.0, 5.0, 2.0]), [-3 / (1 + np.e**3), 0.0, 4 / (1 + np.e**-2)])


# ── simulator: every variant of every path at its smoke shapes ───────────────


def _run(path, variant, shape, seed=0, build=None):
    """Inputs -> device, NaN-poisoned outputs, one launch; returns (got, ref)."""
    from numba import cuda

    inputs = path.make_inputs(shape, np.random.default_rng(seed))
    ref = path.reference(shape, inputs)
    bufs = {k: cuda.to_device(v) for k, v in inputs.items()}
    outs = {name: cuda.to_device(np.full(shp, np.nan, dtype=dt)) for name, (shp, dt) in path.outputs(shape).items()}
    bufs.update(outs)
    launch = (build or path.variants[variant].build)(shape)
    launch(bufs)
    cuda.synchronize()
    return {k: v.copy_to_host() for k, v in outs.items()}, ref


def _assert_close(path, variant, got, ref):
    tol = path.variant_tolerance(variant) if variant in path.variants else path.tolerance
    for name in ref:
        ok, why = _check_test_local(got[name], ref[name], tol)
        assert ok, f"{path.name}/{variant} output {name!r}: {why}"


def _smoke_cases():
    cases = []
    for p in _paths():
        for shape in p.shapes("smoke", None):
            for v in p.variants:
                cases.append(pytest.param(p.name, v, shape, id=f"{p.name}/{v}/{shape.label}"))
    return cases


@pytest.mark.sim
@pytest.mark.parametrize("path_name,variant,shape", _smoke_cases())
def test_variant_matches_reference(path_name, variant, shape):
    path = _path(path_name)
    got, ref = _run(path, variant, shape)
    _assert_close(path, variant, got, ref)


# ── simulator: configurations the smoke preset does not reach ────────────────


def _gemv_bufs(n, k, seed=3):
    from numba import cuda

    shape = Shape(f"m1-n{n}-k{k}", {"m": 1, "n": n, "k": k})
    inputs = _path("w4a16.gemv").make_inputs(shape, np.random.default_rng(seed))
    ref = _path("w4a16.gemv").reference(shape, inputs)["y"]
    y = cuda.to_device(np.full(n, np.nan, dtype=np.float16))
    dev = [cuda.to_device(inputs[k_]) for k_ in ("qweight", "scales", "x")]
    return y, dev, ref


@pytest.mark.sim
@pytest.mark.parametrize("kchunk", [2048, 256], ids=["one-chunk-staged-once", "two-chunks-restaged"])
def test_gemv_sw_grid_stride(kchunk):
    """Two blocks for 13 rows (4 row groups): each block runs two passes,
    reusing (one chunk) or restaging (two chunks, the second of 8 inputs)
    its shared activations."""
    from leverctl_kernels.w4a16.gemv import gemv_sw

    y, (qw, s, x), ref = _gemv_bufs(13, 264)
    gemv_sw.make_gemv_sw(4, kchunk)[2, 128](y, qw, s, x)
    ok, why = _check_test_local(y.copy_to_host(), ref, _path("w4a16.gemv").tolerance)
    assert ok, why


@pytest.mark.sim
def test_dual_and_fused_two_chunks_one_block():
    """The dual GEMV and the fused SiLU+down kernel over two K-chunks (the
    second of 8 inputs), one block striding over two row groups."""
    from numba import cuda

    from leverctl_kernels.w4a16 import naive
    from leverctl_kernels.w4a16.ffn_decode import fused_silu_down as ffn_fused_silu_down
    from leverctl_kernels.w4a16.gemv_dual import gemv_dual_sw

    n, k = 5, 264
    rng = np.random.default_rng(9)
    qg, sg = int4.random_w4(rng, n, k)
    qu, su = int4.random_w4(rng, n, k)
    qd, sd = int4.random_w4(rng, n, k)
    x = rng.standard_normal(k).astype(np.float16)
    g = (rng.standard_normal(k) * 2).astype(np.float16)
    u = rng.standard_normal(k).astype(np.float16)
    tol = _path("w4a16.gemv_dual").tolerance

    gate = cuda.to_device(np.full(n, np.nan, dtype=np.float16))
    up = cuda.to_device(np.full(n, np.nan, dtype=np.float16))
    gemv_dual_sw.make_gemv_dual_sw(4, 256)[1, 128](gate, up, qg, sg, qu, su, x)
    ref_g, ref_u = naive.naive_gemv_dual(qg, sg, qu, su, x)
    for got, ref in ((gate, ref_g), (up, ref_u)):
        ok, why = _check_test_local(got.copy_to_host(), ref, tol)
        assert ok, why

    y = cuda.to_device(np.full(n, np.nan, dtype=np.float16))
    ffn_fused_silu_down.make_ffn_fused_silu_down(4, 256)[1, 128](y, qd, sd, g, u)
    ok, why = _check_test_local(y.copy_to_host(), naive.naive_gemv(qd, sd, naive.naive_silu_mul(g, u)), tol)
    assert ok, why


@pytest.mark.sim
def test_gemv_64t_two_chunks():
    from leverctl_kernels.w4a16.gemv import gemv_64t

    y, (qw, s, x), ref = _gemv_bufs(13, 264)
    gemv_64t.make_launch(13, 264, KCHUNK=256)(y, qw, s, x)
    ok, why = _check_test_local(y.copy_to_host(), ref, _path("w4a16.gemv").tolerance)
    assert ok, why


@pytest.mark.sim
def test_gemm_fma_tiles_take_k_not_multiple_of_16():
    """k = 136: the tensor-core variants cannot step K by 16; select sends
    the shape to the FMA tiles, whose last K tile holds one packed word."""
    path = _path("w4a16.gemm")
    shape = Shape("m5-n37-k136", {"m": 5, "n": 37, "k": 136})
    for on in (True, False):
        assert path.select({"ffn_small_m": on}, shape).variant == "fma_tiles"
    got, ref = _run(path, "fma_tiles", shape)
    _assert_close(path, "fma_tiles", got, ref)


@pytest.mark.sim
def test_silu_mul_kernel():
    from numba import cuda

    from leverctl_kernels.w4a16 import naive
    from leverctl_kernels.w4a16.ffn_decode import silu_mul

    rng = np.random.default_rng(11)
    g = (rng.standard_normal(301) * 3).astype(np.float16)
    u = rng.standard_normal(301).astype(np.float16)
    h = cuda.to_device(np.full(301, np.nan, dtype=np.float16))
    silu_mul.make_launch(301)(h, cuda.to_device(g), cuda.to_device(u))
    ok, why = _check_test_local(h.copy_to_host(), naive.naive_silu_mul(g, u), Tolerance(1e-3, 4e-3))
    assert ok, why


# ── simulator: broken variants must fail the check ───────────────────────────


def _broken_gemv_skips_last_group(shape):
    """The real 64-thread GEMV, handed only the full scale groups: the
    partial last group (8 inputs of k = 264) never contributes."""
    from leverctl_kernels.w4a16.gemv import gemv_64t

    kw_full = (shape["k"] // 128) * 16
    run = gemv_64t.make_launch(shape["n"], shape["k"])

    def launch(bufs):
        qw = bufs["qweight"].copy_to_host()[:, :kw_full].copy()
        run(bufs["y"], np.ascontiguousarray(qw), bufs["scales"], bufs["x"])

    return launch


def _broken_gemm_floor_grid(shape):
    """The real default-tile GEMM with the grid rounded down along M
    (``m // TILE_M`` instead of a ceiling): rows past the last full tile are
    never written."""
    from leverctl_kernels.w4a16.gemm import gemm_tiled

    cfg = gemm_tiled.DEFAULT
    kern = gemm_tiled.kernel_for(cfg)
    grid = (-(-shape["n"] // cfg.TILE_N), shape["m"] // cfg.TILE_M)
    block = (cfg.THREADS_N, cfg.THREADS_M)

    def launch(bufs):
        kern[grid, block](bufs["c"], bufs["a"], bufs["qweight"], bufs["scales"])

    return launch


def _broken_gemm_drops_last_k_word(shape):
    """Off by one packed word at the K edge: the last 8 inputs are dropped."""
    from leverctl_kernels.w4a16.gemm import gemm_tiled

    k = shape["k"] - 8
    run = gemm_tiled.make_launch(gemm_tiled.DEFAULT, shape["m"], shape["n"], k)

    def launch(bufs):
        a = np.ascontiguousarray(bufs["a"].copy_to_host()[:, :k])
        qw = np.ascontiguousarray(bufs["qweight"].copy_to_host()[:, : k // 8])
        run(bufs["c"], a, qw, bufs["scales"])

    return launch


BROKEN = [
    pytest.param(
        "w4a16.gemv",
        Shape("m1-n13-k264", {"m": 1, "n": 13, "k": 264}),
        _broken_gemv_skips_last_group,
        id="gemv-skips-last-scale-group",
    ),
    pytest.param(
        "w4a16.gemm",
        Shape("m67-n37-k160", {"m": 67, "n": 37, "k": 160}),
        _broken_gemm_floor_grid,
        id="gemm-grid-floor-drops-edge-rows",
    ),
    pytest.param(
        "w4a16.gemm",
        Shape("m5-n37-k136", {"m": 5, "n": 37, "k": 136}),
        _broken_gemm_drops_last_k_word,
        id="gemm-drops-last-k-word",
    ),
]


@pytest.mark.sim
@pytest.mark.parametrize("path_name,shape,builder", BROKEN)
def test_broken_variant_fails_the_check(path_name, shape, builder):
    path = _path(path_name)
    got, ref = _run(path, "broken", shape, build=builder)
    failures = [name for name in ref if not _check_test_local(got[name], ref[name], path.tolerance)[0]]
    assert failures, f"the broken {path_name} variant passed the check"


@pytest.mark.sim
@pytest.mark.parametrize("swizzle", [True, False], ids=["swizzled", "unswizzled-fails"])
@pytest.mark.parametrize("cfg", ["SMALL_M", "DEFAULT"])
def test_the_tiled_gemms_shared_tiles_are_conflict_free(cfg, swizzle):
    """Traced at m5 n37 k192 (one tile along M, partial tiles along N):
    every shared access of both tile configurations is served in the
    wavefronts its width needs, and the results are the reference's. The
    dequantised W tile unswizzled (its columns not XORed by K step) gives
    the same results, and the check sees its stores in conflict."""
    from leverctl.profile import memtrace as mt
    from leverctl_kernels.w4a16.gemm import gemm_tiled

    c = getattr(gemm_tiled, cfg)
    m, n, k = 5, 37, 192
    kern = gemm_tiled.make_gemm(c.TILE_M, c.TILE_N, c.TILE_K, c.THREADS_M, c.THREADS_N, c.K_EDGE, swizzle)
    grid, block = gemm_tiled.launch_config(c, m, n)

    def build(shape):
        return lambda bufs: kern[grid, block](bufs["c"], bufs["a"], bufs["qweight"], bufs["scales"])

    path = _path("w4a16.gemm")
    out = []
    shape = Shape("m5-n37-k192", {"m": m, "n": n, "k": k})
    trace = mt.run_traced(lambda: out.append(_run(path, "x", shape, build=build)))
    _assert_close(path, "fma_tiles", *out[0])
    prof = mt.summarize(trace)
    assert prof.shared_load_bytes > 0
    assert (prof.extra_wavefronts == 0) == swizzle, [r.to_json() for r in prof.sites if r.extra_wavefronts]


# ── simulator: the 16-byte weight loads (k % 32 == 0) and their tail ─────────

# k = 1056: 132 packed words a row, 33 groups of four (one 16-byte load
# each), so a warp's two-group step (64 groups) is partial and a 64-thread
# block's step (64 groups) too: one lane, one thread, loads the last group.
# Its last scale group is partial (32 of 128 inputs). KCHUNK = 256: 8 groups
# a chunk, the last chunk holds one group.
VEC_K = 1056


def _gemv_kernels(kchunk, tail_fault):
    """{name: (launch(outs, w), outputs)} of the five GEMV kernels for
    ``kchunk`` and a planted tail fault; ``w`` holds the operands."""
    from leverctl_kernels.w4a16.ffn_decode import fused_silu_down as fsd
    from leverctl_kernels.w4a16.gemv import gemv_64t, gemv_sw
    from leverctl_kernels.w4a16.gemv_dual import gemv_dual_64t, gemv_dual_sw

    sw = dict(WARPS=4, KCHUNK=kchunk, TAIL_FAULT=tail_fault)
    t64 = dict(ROWS=4, KCHUNK=kchunk, TAIL_FAULT=tail_fault)
    return {
        "gemv_sw": (lambda o, w: gemv_sw.make_gemv_sw(**sw)[2, 128](o[0], w["qg"], w["sg"], w["x"]), 1),
        "gemv_64t": (lambda o, w: gemv_64t.make_gemv_64t(**t64)[2, 64](o[0], w["qg"], w["sg"], w["x"]), 1),
        "gemv_dual_sw": (
            lambda o, w: gemv_dual_sw.make_gemv_dual_sw(**sw)[2, 128](*o, w["qg"], w["sg"], w["qu"], w["su"], w["x"]),
            2,
        ),
        "gemv_dual_64t": (
            lambda o, w: gemv_dual_64t.make_gemv_dual_64t(**t64)[2, 64](*o, w["qg"], w["sg"], w["qu"], w["su"], w["x"]),
            2,
        ),
        "ffn_fused_silu_down": (
            lambda o, w: fsd.make_ffn_fused_silu_down(**sw)[2, 128](o[0], w["qg"], w["sg"], w["x"], w["u"]),
            1,
        ),
    }


def _vec_operands(n, k, seed=5):
    from leverctl_kernels.w4a16 import naive

    rng = np.random.default_rng(seed)
    qg, sg = int4.random_w4(rng, n, k)
    qu, su = int4.random_w4(rng, n, k)
    x = rng.standard_normal(k).astype(np.float16)
    u = rng.standard_normal(k).astype(np.float16)
    w = dict(qg=qg, sg=sg, qu=qu, su=su, x=x, u=u)
    ref_g, ref_u = naive.naive_gemv_dual(qg, sg, qu, su, x)
    refs = {
        "gemv_sw": [ref_g],
        "gemv_64t": [ref_g],
        "gemv_dual_sw": [ref_g, ref_u],
        "gemv_dual_64t": [ref_g, ref_u],
        "ffn_fused_silu_down": [naive.naive_gemv(qg, sg, naive.naive_silu_mul(x, u))],
    }
    return w, refs


def _run_gemv_kernel(name, kchunk, tail_fault, w, n):
    from numba import cuda

    launch, nout = _gemv_kernels(kchunk, tail_fault)[name]
    outs = [cuda.to_device(np.full(n, np.nan, dtype=np.float16)) for _ in range(nout)]
    launch(outs, w)
    return [o.copy_to_host() for o in outs]


GEMV_KERNELS = ["gemv_sw", "gemv_64t", "gemv_dual_sw", "gemv_dual_64t", "ffn_fused_silu_down"]


@pytest.mark.sim
@pytest.mark.parametrize("kchunk", [2048, 256], ids=["one-chunk", "five-chunks"])
@pytest.mark.parametrize("name", GEMV_KERNELS)
def test_16_byte_path_matches_reference(name, kchunk):
    """k = 1056 (rows 16-byte aligned): the 16-byte loads, the partial last
    step and, with KCHUNK = 256, a last chunk of one group."""
    n = 5
    w, refs = _vec_operands(n, VEC_K)
    tol = _path("w4a16.gemv").tolerance
    for got, ref in zip(_run_gemv_kernel(name, kchunk, 0, w, n), refs[name]):
        ok, why = _check_test_local(got, ref, tol)
        assert ok, f"{name}: {why}"


@pytest.mark.sim
@pytest.mark.parametrize("fault", [1, 2], ids=["drops-last-group", "double-counts-last-group"])
@pytest.mark.parametrize("name", GEMV_KERNELS)
def test_a_broken_16_byte_tail_fails_the_check(name, fault):
    """The planted tail faults (``TAIL_FAULT``): the last group of the row
    dropped, or loaded again by the lane past the end and counted twice
    (32 of 1056 inputs, about 3 % of the row) must fail the reference check."""
    n = 5
    w, refs = _vec_operands(n, VEC_K)
    tol = _path("w4a16.gemv").tolerance
    got = _run_gemv_kernel(name, 2048, fault, w, n)
    assert not all(_check_test_local(g, r, tol)[0] for g, r in zip(got, refs[name])), f"{name}: fault {fault} passed"


@pytest.mark.sim
@pytest.mark.parametrize("name", GEMV_KERNELS)
def test_unaligned_weight_views_take_the_32_bit_path(name):
    """k = 1056 but the weights are a view starting 4 bytes into their
    allocation: the 16-byte loads would fault (the simulator's ``ldg_v4``
    refuses them), so the kernels read the rows word by word. Built with
    the dropped-tail fault, which only the 16-byte path has: a pass shows
    that path was not taken."""
    from numba import cuda

    n = 5
    w, refs = _vec_operands(n, VEC_K)
    for key in ("qg", "qu"):
        backing = cuda.to_device(np.concatenate([np.zeros(1, np.uint32), w[key].reshape(-1)]))
        w[key] = backing[1:].reshape(w[key].shape)
    tol = _path("w4a16.gemv").tolerance
    for got, ref in zip(_run_gemv_kernel(name, 2048, 1, w, n), refs[name]):
        ok, why = _check_test_local(got, ref, tol)
        assert ok, f"{name}: {why}"


@pytest.mark.sim
@pytest.mark.parametrize("name", GEMV_KERNELS)
def test_an_unaligned_activation_view_is_staged_element_by_element_to_the_same_bits(name):
    """The activations (``x``; the fused kernel's ``gate`` and ``up``) are
    staged with 16-byte loads when they start on 16 bytes; a view starting
    2 bytes into its allocation would fault (the simulator's ``ldg_v4``
    refuses it), so the kernels stage it one element at a time, and still
    match, bit for bit what the 16-byte staging gave (both stage the same
    fp32 values)."""
    from numba import cuda

    n = 5
    w, refs = _vec_operands(n, VEC_K)
    wide = _run_gemv_kernel(name, 2048, 0, w, n)
    backing = cuda.to_device(np.concatenate([np.zeros(1, np.float16), w["x"]]))
    w["x"] = backing[1:]
    tol = _path("w4a16.gemv").tolerance
    narrow = _run_gemv_kernel(name, 2048, 0, w, n)
    for got, same, ref in zip(narrow, wide, refs[name]):
        ok, why = _check_test_local(got, ref, tol)
        assert ok, f"{name}: {why}"
        assert np.array_equal(got.view(np.uint16), same.view(np.uint16)), name


@pytest.mark.sim
@pytest.mark.parametrize("aligned", [True, False], ids=["16-byte", "unaligned-fails"])
@pytest.mark.parametrize("name", ["ffn_fused_silu_down", "gemv_64t", "gemv_dual_64t"])
def test_traced_the_activations_are_staged_by_16_byte_loads(name, aligned):
    """Traced at k = 512 (the default model's intermediate, the down rows'
    length), five rows: 16-byte loads carry >= 90 % of the bytes loaded
    (the weights, and the activations every block stages: ``gate`` and
    ``up`` for the fused SiLU-down, ``x`` for the 64-thread blocks; the
    rest is the scales): 99.3 %, 98.8 % and 98.3 % measured. Staged one
    element at a time (an activation view off 16 bytes: the staging's
    2-byte loads, as every block staged them before 2026-12-05) the same
    check fails: 24 %, 38 % and 55 %."""
    from numba import cuda

    from leverctl.profile import memtrace as mt

    n, k = 5, 512
    w, _ = _vec_operands(n, k)
    if not aligned:
        backing = cuda.to_device(np.concatenate([np.zeros(1, np.float16), w["x"]]))
        w["x"] = backing[1:]
    prof = mt.summarize(mt.run_traced(lambda: _run_gemv_kernel(name, 2048, 0, w, n)))
    loads = [r for r in prof.sites if r.space == mt.GLOBAL and r.kind == "load"]
    wide = sum(r.used_bytes for r in loads if r.bytes == 16 * r.accesses)
    total = sum(r.used_bytes for r in loads)
    assert (wide >= 0.9 * total) == aligned, (wide, total, [r.to_json() for r in loads])


# ── simulator: the tiled FMA GEMM's 16-byte stage (``gemm_tiled`` WIDE) ──────

# (config, m, n, k): the small tiles at one row (``gemm_m1``) with seven
# 32-input tiles (an odd last round: its second tile past K), scales a
# window of eight groups (k 1024) and of four (k 512), one group (k 96:
# scales one element a load); the default tiles at a K edge inside a round
# (k 160: the second lane's 16 bytes past K), windows of four (k 512), and
# rows that are not 16-byte units (k 136: the element loads)
WIDE_CASES = [
    ("SMALL_M", 1, 37, 224),
    ("SMALL_M", 2, 32, 1024),
    ("SMALL_M", 3, 31, 512),
    ("SMALL_M", 2, 35, 96),
    ("DEFAULT", 67, 37, 160),
    ("DEFAULT", 3, 40, 512),
    ("DEFAULT", 3, 37, 136),
]


def _tiled_operands(m, n, k, seed=0):
    from numba import cuda

    rng = np.random.default_rng(seed)
    a = (rng.standard_normal((m, k)) * 0.5).astype(np.float16)
    qweight, scales = int4.random_w4(rng, n, k)
    ref = a.astype(np.float64) @ int4.dequantize_w4(qweight, scales).astype(np.float64).T
    return [cuda.to_device(x) for x in (a, qweight, scales)], ref


def _run_tiled(cfg_name, m, n, wide, ops, fault="", trace=False):
    from numba import cuda

    from leverctl.profile import memtrace as mt
    from leverctl_kernels.w4a16.gemm import gemm_tiled

    cfg = getattr(gemm_tiled, cfg_name)
    grid, block = gemm_tiled.launch_config(cfg, m, n)
    c = cuda.to_device(np.full((m, n), np.nan, np.float16))
    run = lambda: gemm_tiled.kernel_for(cfg, wide, fault)[grid, block](c, *ops)  # noqa: E731
    prof = mt.summarize(mt.run_traced(run)) if trace else run()
    return c.copy_to_host(), prof


@pytest.mark.sim
@pytest.mark.parametrize(("cfg", "m", "n", "k"), WIDE_CASES)
def test_the_tiled_gemms_16_byte_stage_gives_the_element_stages_bits(cfg, m, n, k):
    """The wide build stages the same float32 values as the element loads
    (the fp16 inputs and each weight times its group's scale), so its
    output is the same bits; both meet the path's tolerance. Traced, its
    16-byte loads carry the weights (none where the rows are not 16-byte
    units)."""
    from leverctl.profile import memtrace as mt

    ops, ref = _tiled_operands(m, n, k, seed=k)
    narrow, _ = _run_tiled(cfg, m, n, False, ops)
    wide, prof = _run_tiled(cfg, m, n, True, ops, trace=True)
    ok, why = _check_test_local(wide, ref, _path("w4a16.gemm").tolerance)
    assert ok, why
    assert np.array_equal(wide.view(np.uint16), narrow.view(np.uint16))
    loads = [r for r in prof.sites if r.space == mt.GLOBAL and r.kind == "load"]
    wide_bytes = sum(r.used_bytes for r in loads if r.bytes == 16 * r.accesses)
    assert (wide_bytes > 0) == (k % 32 == 0), [r.to_json() for r in loads]


@pytest.mark.sim
@pytest.mark.parametrize(
    ("cfg", "m", "n", "k", "fault"),
    [
        ("SMALL_M", 1, 37, 224, "carry_reused"),  # each round's second tile staged from its first's words
        ("SMALL_M", 1, 37, 224, "edge_short"),  # the last 16 bytes of each row dropped
        ("DEFAULT", 67, 37, 160, "edge_short"),
    ],
)
def test_a_tiled_gemm_whose_16_byte_stage_reuses_a_round_or_drops_its_tail_fails(cfg, m, n, k, fault):
    ops, ref = _tiled_operands(m, n, k, seed=k)
    got, _ = _run_tiled(cfg, m, n, True, ops, fault)
    ok, why = _check_test_local(got, ref, _path("w4a16.gemm").tolerance)
    assert not ok, why


@pytest.mark.sim
def test_traced_the_one_row_tiled_gemm_reads_whole_sectors_in_16_byte_loads():
    """``gemm_m1``'s GEMM (the small tiles at one row) at k 1024: a row's
    two lanes read its 32 bytes of a round, whole sectors, and the
    scales come 16 bytes a window: >= 90 % sector efficiency and >= 90 %
    of the loaded bytes in 16-byte loads (the element loads, as before
    2026-12-06: 50 % and none)."""
    m, n, k = 1, 32, 1024
    ops, _ = _tiled_operands(m, n, k)
    for wide in (True, False):
        _, prof = _run_tiled("SMALL_M", m, n, wide, ops, trace=True)
        assert (prof.sector_efficiency >= 0.9) == wide, prof.sector_efficiency
        assert (prof.wide_load_share >= 0.9) == wide, prof.wide_load_share

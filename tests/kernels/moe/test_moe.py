"""The MoE kernel paths in the CUDA simulator, at their tiny odd smoke
shapes: 8 experts, top-2, widths that leave partial 16-output blocks, a K
that ends inside the kernels' 64-input step, int4 groups and FP8 blocks
partial.

Every variant passes the bench's own check (``leverctl.bench.check``)
against the float64 reference. Deliberately broken kernels and launches
fail it: a router that skips renormalising or takes its softmax in base 2,
expert kernels routed to the wrong experts, a union count that misses a
row. The router's tie-aware check
(``routing``) passes a near-tie swap and fails a wrong selection without
running a kernel.
"""

from __future__ import annotations

import sys

import numpy as np
import pytest

from leverctl.bench.check import check, compare


def _paths():
    from leverctl_kernels.registry import family_paths

    return {p.name: p for p in family_paths("moe")}


def _run(path, variant, shape, launch=None, seed=7):
    from numba import cuda

    if path.bind is not None:
        shape = path.bind({"moe_union_stats": variant == "on"}, shape, "atlas")
    inputs = path.make_inputs(shape, np.random.default_rng(seed))
    launch = launch or path.variants[variant].build(shape)
    bufs, fig = check(path, variant, shape, launch, inputs, cuda)
    return fig, bufs, inputs, launch, shape


# The decode shapes of the expert stages run both formats; the prefill
# (grouped) shapes one format each, the kernels being the same code with
# another weight decoder.
CASES = [
    ("moe.router", "bf16", 0),
    ("moe.router", "fp32_gate", 0),
    ("moe.router", "fp32_routing", 0),
    ("moe.gateup_fp4", "int4", 0),
    ("moe.gateup_fp4", "nvfp4", 0),
    ("moe.gateup_fp4", "int4", 1),
    ("moe.down_fp4", "int4", 0),
    ("moe.down_fp4", "nvfp4", 0),
    ("moe.down_fp4", "nvfp4", 1),
    ("moe.decode_fp8_grouped", "grouped", 0),
    ("moe.decode_fp8_grouped", "per_row", 0),
    ("moe.decode_multi_seq", "token_major", 0),
    ("moe.decode_multi_seq", "per_token", 0),
    ("moe.decode_via_prefill", "decode", 0),
    ("moe.decode_via_prefill", "prefill", 0),
    ("moe.union_stats", "off", 0),
    ("moe.union_stats", "on", 0),
]


@pytest.fixture(scope="module")
def runs():
    """Every case once for the module."""
    paths = _paths()
    return {c: _run(paths[c[0]], c[1], paths[c[0]].shapes("smoke", None)[c[2]]) for c in CASES}


@pytest.mark.sim
@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0]}-{c[1]}-{c[2]}")
def test_every_variant_passes_the_bench_check_against_float64(runs, case):
    fig = runs[case][0]
    assert fig.passed, fig.why()


def _tc_weights(fmt, w, tc):
    """Expert ``e``'s weights as the kernel multiplies them: exactly on FP32
    cores; on the fp16 tensor cores an int4 weight rounds once to fp16, an
    NVFP4 one (E2M1 x E4M3) enters exactly and its tensor scale is applied
    in f32 after the sum (exact as a factor of the whole product)."""
    from leverctl_kernels.moe import formats

    if tc and fmt == "int4":
        return lambda e: formats.DECODE[fmt](w, e).astype(np.float16)
    return lambda e: formats.DECODE[fmt](w, e)


@pytest.mark.sim
@pytest.mark.parametrize(
    "case", [c for c in CASES if c[0] in ("moe.gateup_fp4", "moe.down_fp4")], ids=lambda c: f"{c[0]}-{c[1]}-{c[2]}"
)
def test_the_expert_stages_compute_exactly_on_their_own_weights(runs, case):
    """Each stage against float64 on the weights it reads, decoded exactly
    (and rounded to fp16 where they enter tensor cores); the bench's check
    measures NVFP4 against the model's int4 weights."""
    from leverctl_kernels.common.path import Tolerance
    from leverctl_kernels.moe import formats, naive

    name, fmt, prefill = case
    _, bufs, inputs, launch, _ = runs[case]
    if name == "moe.gateup_fp4":
        w = formats.get(inputs, f"wgu_{fmt}")
        tc = launch.tensor_cores == "mma.sync"
        assert tc == bool(prefill) and launch.tc_dtype == ("f16" if prefill else None)
        out, ref = "h", naive.naive_gateup(inputs["x"], inputs["ids"], _tc_weights(fmt, w, tc))
    else:
        w = formats.get(inputs, f"wd_{fmt}")
        tc = launch.tensor_cores == "mma.sync"
        assert tc == bool(prefill) and launch.tc_dtype == ("f16" if prefill else None)
        f16 = (lambda a: np.asarray(a).astype(np.float16)) if tc else (lambda a: a)
        out, ref = "y", naive.naive_down(f16(inputs["h"]), inputs["ids"], inputs["rw"], _tc_weights(fmt, w, tc))
    fig = compare({out: bufs[out].copy_to_host()}, {out: ref}, Tolerance(rel=1e-5, abs_of_max=1e-5))
    assert fig.passed, fig.why()


@pytest.mark.sim
def test_the_router_records_how_its_selection_and_weights_compare(runs):
    from numba import cuda

    path = _paths()["moe.router"]
    fig, bufs, _, launch, shape = runs[("moe.router", "fp32_routing", 0)]
    got = path.extra["findings"]("fp32_routing", shape, launch, bufs, cuda)["routing"]
    assert got["rows"] == 3 and got["slots"] == 6
    assert got["differ"] == 0 and got["beyond_tie"] == 0
    assert got["weights_rel"] < 1e-5


@pytest.mark.sim
def test_the_union_counts_are_exact(runs):
    from leverctl_kernels.moe import naive

    _, bufs, _, _, shape = runs[("moe.union_stats", "on", 0)]
    ids = bufs["ids"].copy_to_host()
    n, rows = naive.naive_union(ids, shape["experts"])
    assert bufs["union"].copy_to_host().tolist() == [n]
    assert bufs["expert_rows"].copy_to_host().tolist() == rows.tolist()
    assert int(rows.sum()) == ids.size


# ── broken kernels and launches the check must reject ─────────────────────


@pytest.mark.sim
@pytest.mark.parametrize("broken", ["unnormalised", "exp2"])
def test_a_broken_router_fails_the_check(broken):
    from leverctl_kernels.moe import _builds

    path = _paths()["moe.router"]
    shape = path.shapes("smoke", None)[0]
    fig = _run(path, "fp32_routing", shape, launch=_builds.router("fp32_routing", broken)(shape))[0]
    assert not fig.passed and "weights" in fig.why(), fig.why()


def _rerouted(launch, shift=1, experts=8):
    """``launch`` run with every row routed to the next expert along."""
    from numba import cuda

    def wrong(bufs):
        ids = bufs["ids"].copy_to_host()
        launch({**bufs, "ids": cuda.to_device(((ids + shift) % experts).astype(np.int32))})

    wrong.workspace = getattr(launch, "workspace", {})
    return wrong


@pytest.mark.sim
@pytest.mark.parametrize(
    "name,variant,prefill", [("moe.gateup_fp4", "nvfp4", 0), ("moe.gateup_fp4", "int4", 1), ("moe.down_fp4", "int4", 0)]
)
def test_expert_kernels_reading_the_wrong_experts_fail_the_check(name, variant, prefill):
    path = _paths()[name]
    shape = path.shapes("smoke", None)[prefill]
    fig = _run(path, variant, shape, launch=_rerouted(path.variants[variant].build(shape)))[0]
    assert not fig.passed, fig


@pytest.mark.sim
def test_a_union_count_that_misses_a_row_fails_the_check():
    from numba import cuda

    path = _paths()["moe.union_stats"]
    shape = path.shapes("smoke", None)[0]
    launch = path.variants["on"].build(path.bind({"moe_union_stats": True}, shape, "atlas"))
    from leverctl_kernels.moe import _union

    count = _union.union_count(shape["experts"])

    def broken(bufs):
        launch(bufs)
        count(bufs["union"], bufs["expert_rows"], cuda.to_device(bufs["ids"].copy_to_host()[1:]))

    fig = _run(path, "on", shape, launch=broken)[0]
    assert not fig.passed and fig.worst in ("union", "expert_rows"), fig.why()


# ── the router's tie-aware check, without a kernel ────────────────────────


def _aligned(logits, ids, weights, top_k):
    from leverctl_kernels.common.path import Tolerance
    from leverctl_kernels.moe import routing

    got, ref = routing.align(logits, top_k, {"ids": np.asarray(ids), "weights": np.asarray(weights)}, {})
    return compare(got, ref, Tolerance(rel=1e-6, abs_of_max=1e-6))


def _softmax_of(logits, ids):
    sel = np.take_along_axis(logits, np.asarray(ids), axis=1)
    p = np.exp(sel - sel.max(axis=1, keepdims=True))
    return p / p.sum(axis=1, keepdims=True)


def test_a_near_tie_swapped_across_the_kth_place_passes_the_router_check():
    # experts 2 and 3 tie within the margin (2^-6 of the largest logit, 4)
    logits = np.array([[4.0, -1.0, 1.0, 1.0 - 1e-3, 0.5]])
    swapped = [[0, 3]]  # the float64 top-2 is [0, 2]
    assert _aligned(logits, swapped, _softmax_of(logits, swapped), 2).passed


def test_a_wrong_selection_or_an_unrenormalised_weight_fails_the_router_check():
    logits = np.array([[4.0, -1.0, 1.0, 0.5, 0.25]])
    wrong = [[0, 3]]  # 0.5 below the 2nd largest logit: beyond the margin
    fig = _aligned(logits, wrong, _softmax_of(logits, wrong), 2)
    assert not fig.passed and fig.worst == "beyond_tie", fig.why()
    right = [[0, 2]]
    p = np.exp(logits - logits.max())
    p /= p.sum()
    fig = _aligned(logits, right, np.take_along_axis(p, np.array(right), axis=1), 2)
    assert not fig.passed and fig.worst == "weights", fig.why()
    for bad in ([[0, 0]], [[0, -1]], [[0, 5]]):  # repeated, unwritten, out of range
        assert not _aligned(logits, bad, [[0.9, 0.1]], 2).passed, bad


def test_nvfp4_and_fp8_expert_weights_decode_as_ml_dtypes_reads_them():
    """The experts' NVFP4 (E2M1 low nibble first, an E4M3 scale per 16, an
    FP32 scale per expert) and FP8 (E4M3, a float32 scale per 128 x 128
    block) weights, decoded independently with ml_dtypes."""
    import ml_dtypes

    from leverctl_kernels.moe import formats

    rng = np.random.default_rng(3)
    w4 = formats.draw_int4(rng, 3, 5, 272, [0, 2])
    fp4 = formats.nvfp4_from(w4, [0, 2])
    fp8 = formats.fp8_from(w4, [0, 2])
    for e in (0, 2):
        nib = np.stack([fp4["a"][e] & 15, fp4["a"][e] >> 4], axis=-1).reshape(5, 272)
        e2m1 = nib.astype(np.uint8).view(ml_dtypes.float4_e2m1fn).astype(np.float32)
        scale = fp4["b"][e].view(ml_dtypes.float8_e4m3fn).astype(np.float32)
        mine = (e2m1 * np.repeat(scale, 16, axis=1)) * fp4["c"][e]
        np.testing.assert_array_equal(formats.nvfp4_expert(fp4, e), mine)
        blocks = np.repeat(np.repeat(fp8["b"][e], 128, axis=0), 128, axis=1)[:5, :272]
        mine8 = fp8["a"][e].view(ml_dtypes.float8_e4m3fn).astype(np.float32) * blocks
        np.testing.assert_array_equal(formats.fp8_expert(fp8, e), mine8)
        # and both encodings are close to the int4 weights they re-encode
        w = formats.int4_expert(w4, e)
        assert np.linalg.norm(formats.fp8_expert(fp8, e) - w) / np.linalg.norm(w) < 0.05
        assert np.linalg.norm(formats.nvfp4_expert(fp4, e) - w) / np.linalg.norm(w) < 0.15


@pytest.mark.sim
@pytest.mark.simulator_only  # calls a device function from Python
def test_the_per_row_nvfp4_decode_places_every_e2m1_value_as_ml_dtypes_reads_it():
    """``_decode.fp4x8`` (a word's eight E2M1 nibbles placed in fp16 pairs,
    each value times ``2**-14``) against ml_dtypes' E2M1: every nibble at
    every position (the words ``n * 0x11111111``) and 500 random words,
    exactly; a placement that drops the sign bit fails."""
    import ml_dtypes

    from leverctl_kernels.moe import _decode

    rng = np.random.default_rng(11)
    words = [n * 0x11111111 for n in range(16)] + [int(w) for w in rng.integers(0, 2**32, 500, dtype=np.uint64)]

    def want(w):
        nib = np.array([(w >> (4 * j)) & 15 for j in range(8)], np.uint8)
        return nib.view(ml_dtypes.float4_e2m1fn).astype(np.float32)

    def got(fn, w):
        return np.array(fn(np.uint32(w)), np.float32) * np.float32(_decode.FP4_UNIT)

    for w in words:
        np.testing.assert_array_equal(got(_decode.fp4x8, w), want(w), err_msg=hex(w))

    def unsigned(w):  # the placement without its sign bits
        return _decode.fp4x8(np.uint32(w) & np.uint32(0x77777777))

    assert any(not np.array_equal(got(unsigned, w), want(w)) for w in words)


@pytest.mark.sim
@pytest.mark.simulator_only  # patches device functions the simulator looks up at each call
@pytest.mark.parametrize(
    "name,fmt,fault",
    [
        ("moe.gateup_fp4", "int4", "pre4"),
        ("moe.down_fp4", "int4", "pre4"),
        ("moe.gateup_fp4", "nvfp4", "sign"),
        ("moe.down_fp4", "nvfp4", "sign"),
        ("moe.down_fp4", "nvfp4", "tensor_scale"),  # gate/up's: SiLU of sums that large overflows Python's exp
        ("moe.down_fp4", "nvfp4", "unit"),
    ],
)
def test_the_per_row_sums_fail_the_check_with_a_broken_decode(name, fmt, fault, monkeypatch):
    """The unscaled per-row sums (rows of whole 16-byte loads, K = 512 and
    64) pass the check, and fail it with each piece they rest on broken:
    int4's activations staged with one position's pre-scale off by a factor
    of two (every fourth product doubled), NVFP4's values placed without
    their signs, a row's end without the expert's tensor scale, or without
    the fp16 placement's ``2**14``."""
    from leverctl_kernels.moe import _decode, _experts

    path = _paths()[name]
    dims = {"hidden": 512, "inter": 64} if name == "moe.gateup_fp4" else {"hidden": 64, "inter": 512}
    shape = _stage_shape(name, **dims)
    assert _run(path, fmt, shape)[0].passed
    if fault == "pre4":
        real = _experts.pre4
        monkeypatch.setattr(_experts, "pre4", lambda v0, v1, v2, v3: real(v0, v1, v2, v3 * np.float32(2)))
    elif fault == "sign":
        real = _decode.fp4x8
        monkeypatch.setattr(_decode, "fp4x8", lambda w: real(np.uint32(w) & np.uint32(0x77777777)))
    elif fault == "tensor_scale":
        monkeypatch.setattr(_decode, "fp4_finish", lambda acc, ts: acc * np.float32(_decode.FP4_UNIT))
    else:
        monkeypatch.setattr(_decode, "FP4_UNIT", 1.0)
    assert not _run(path, fmt, shape)[0].passed


# ── GPU: model shapes (Qwen3-Next: hidden 2048, 512 experts, top-10) ───────

GPU_CASES = [
    ("moe.router", "rows32 h2048 e512 k10"),
    ("moe.router", "rows1024 h2048 e512 k10"),
    ("moe.gateup_fp4", "decode rows8 h2048 i512 e512 k10"),
    ("moe.gateup_fp4", "prefill rows1024 h2048 i512 e512 k10"),
    ("moe.down_fp4", "decode rows32 h2048 i512 e512 k10"),
    ("moe.down_fp4", "prefill rows1024 h2048 i512 e512 k10"),
    ("moe.decode_fp8_grouped", "rows32 h2048 i512 e512 k10"),
    ("moe.decode_multi_seq", "rows8 h2048 i512 e512 k10"),
    ("moe.decode_via_prefill", "capture layer rows1 h2048 i512 e512 k10"),
    ("moe.union_stats", "rows4096 e512 k10"),
]


@pytest.mark.gpu
@pytest.mark.parametrize("name,label", GPU_CASES)
def test_on_a_gpu_at_model_shapes_every_variant_passes(name, label):
    from numba import cuda

    path = _paths()[name]
    shape = next(s for s in path.shapes("model", None) if s.label == label)
    for variant in path.variants:
        if path.bind is not None:
            shape = path.bind({"moe_union_stats": variant == "on"}, shape, "atlas")
        inputs = path.make_inputs(shape, np.random.default_rng(1))
        launch = path.variants[variant].build(shape)
        bufs, fig = check(path, variant, shape, launch, inputs, cuda)
        assert fig.passed, (variant, fig.why())
        if name == "moe.router":
            got = path.extra["findings"](variant, shape, launch, bufs, cuda)["routing"]
            assert got["beyond_tie"] == 0, got


@pytest.mark.sim
@pytest.mark.simulator_only  # patches what the simulator looks up at each call
@pytest.mark.parametrize(
    "name,variant",
    [
        ("moe.gateup_fp4", "int4"),
        ("moe.gateup_fp4", "nvfp4"),
        ("moe.down_fp4", "int4"),
        ("moe.down_fp4", "nvfp4"),
        ("moe.decode_fp8_grouped", "per_row"),
    ],
)
def test_the_per_row_kernels_stream_their_weights_in_16_byte_loads_where_rows_allow(name, variant, monkeypatch):
    """At K = 64 and 32 (whole 16-byte loads of every format) the decode
    kernels read the weights through ``ldg_v4``, and the activations in
    16-byte loads too, and pass the check; the smoke shapes' K of 40 and 24
    (or 48) keep the 8-value chunks."""
    from leverctl_kernels.common import vload
    from leverctl_kernels.moe import family as F

    calls = []
    real, real_f32 = vload.ldg_v4, vload.ld_f32x4
    monkeypatch.setattr(vload, "ldg_v4", lambda a, i: calls.append(str(vload._numpy(a).dtype)) or real(a, i))
    monkeypatch.setattr(vload, "ld_f32x4", lambda a, i: calls.append("float32") or real_f32(a, i))
    path = _paths()[name]
    base = path.shapes("smoke", None)[0]
    shape = F.shape_of({**base.dims, "hidden": 64, "inter": 32}, "decode ")
    fig = _run(path, variant, shape)[0]
    assert fig.passed, fig.why()
    weights = [c for c in calls if c in ("uint32", "uint8")]
    assert weights, f"no 16-byte weight load: {set(calls)}"
    # The activations too: fp16 x eight a load (gate/up), float32 h four a load (down).
    want = {"moe.gateup_fp4": {"float16"}, "moe.down_fp4": {"float32"}}.get(name, {"float16", "float32"})
    assert want <= set(calls), f"activations not in 16-byte loads: {set(calls)}"


def _stage_shape(name, **dims):
    from leverctl_kernels.moe import family as F

    base = {"rows": 1, "experts": 3, "top_k": 2, "prefill": 0, **dims}
    if name != "moe.gateup_fp4" and name != "moe.down_fp4":
        base.pop("prefill")
    return F.shape_of(base, "decode ")


WHOLE = ({(0, 2048), (2048, 3072)}, "stage_scales")  # K = 3072: a 2048-input chunk and one of 1024
NARROW = ({(0, 384)}, "stage_scales_narrow")  # K = 384: a row's three scales, 6 bytes
NV_WHOLE = ({(0, 512)}, "stage_nvfp4_scales")  # K = 512: a row's 32 scale bytes, two 16-byte loads
NV_NARROW = ({(0, 288)}, "stage_nvfp4_scales_narrow")  # K = 288: 18 bytes a row, nine pairs


@pytest.mark.sim
@pytest.mark.simulator_only  # patches what the simulator looks up at each call
@pytest.mark.parametrize(
    "name,fmt,dims,staged",
    [
        ("moe.gateup_fp4", "int4", {"hidden": 3072, "inter": 8}, WHOLE),
        ("moe.down_fp4", "int4", {"hidden": 8, "inter": 3072}, WHOLE),
        ("moe.gateup_fp4", "int4", {"hidden": 384, "inter": 8}, NARROW),
        ("moe.down_fp4", "int4", {"hidden": 8, "inter": 384}, NARROW),
        ("moe.gateup_fp4", "nvfp4", {"hidden": 512, "inter": 8}, NV_WHOLE),
        ("moe.gateup_fp4", "nvfp4", {"hidden": 288, "inter": 8}, NV_NARROW),
        ("moe.down_fp4", "nvfp4", {"hidden": 8, "inter": 288}, NV_NARROW),
    ],
    ids=[
        "int4-gateup-whole",
        "int4-down-whole",
        "int4-gateup-narrow",
        "int4-down-narrow",
        "nvfp4-gateup-whole",
        "nvfp4-gateup-narrow",
        "nvfp4-down-narrow",
    ],
)
@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")  # the broken run's NaN scales
def test_rows_stage_a_chunks_scales_once_and_a_wrong_row_fails(name, fmt, dims, staged, monkeypatch):
    """Each chunk's scales are staged once a block, a step reading its own
    from shared memory. int4's group scales: where a row's are whole 16-byte
    loads (K = 3072), two of them a row (one for the 1024-input chunk);
    where not (K = 384), one fp16 a thread. NVFP4's E4M3 block scales: 16
    bytes a thread where a row's are whole (K = 512), a pair a thread where
    not (K = 288; down's K = 288 is also the kernel without the scale
    shuffle, which needs K a multiple of 64). The kernels pass, and scales
    staged from the neighbouring row fail the check."""
    from leverctl_kernels.moe import _decode

    chunks_want, stager = staged
    path, shape = _paths()[name], _stage_shape(name, **dims)
    chunks = []
    real = getattr(_decode, stager)
    monkeypatch.setattr(_decode, stager, lambda *a: chunks.append((a[7], a[8])) or real(*a))
    fig = _run(path, fmt, shape)[0]
    assert fig.passed, fig.why()
    assert set(chunks) == chunks_want, set(chunks)

    def shifted(sa, wb, e, n0, nend, off, sets, c0, c1, t):
        real(sa, wb, e, n0 + 1, nend, off, sets, c0, c1, t)

    monkeypatch.setattr(_decode, stager, shifted)
    assert not _run(path, fmt, shape)[0].passed  # the last row's stage is never written or another row's


@pytest.mark.sim
@pytest.mark.simulator_only  # patches what the simulator looks up at each call
@pytest.mark.parametrize("dims", [{"hidden": 256, "inter": 16}], ids=["gateup"])
def test_fp8_block_scales_are_staged_a_chunk_at_a_time_and_a_shifted_stage_fails(dims, monkeypatch):
    """K = 256 (two 128-input scale blocks in one chunk): a chunk's 128 x
    128 block scales are staged once a block (16 a set, gate's and up's), a
    step reading its load's from shared memory; the kernels pass, and a
    stage one block column off fails the check."""
    from leverctl_kernels.moe import _decode

    path, shape = _paths()["moe.decode_fp8_grouped"], _stage_shape("moe.decode_fp8_grouped", **dims)
    chunks = []
    real = _decode.stage_fp8_scales
    monkeypatch.setattr(_decode, "stage_fp8_scales", lambda *a: chunks.append((a[6], a[7])) or real(*a))
    fig = _run(path, "per_row", shape)[0]
    assert fig.passed, fig.why()
    assert (0, 256) in set(chunks), set(chunks)

    def shifted(ss, wb, e, n0, off, sets, c0, c1, t):
        real(ss, wb, e, n0, off, sets, c0, c1, t)
        if t == 0 and wb.shape[2] > 1:  # the first block column staged with the second's scale
            ss.view(np.float32)[0] = wb[e, n0 // 128, 1]

    monkeypatch.setattr(_decode, "stage_fp8_scales", shifted)
    assert not _run(path, "per_row", shape)[0].passed


@pytest.mark.sim
@pytest.mark.parametrize(
    "name,variant,dims",
    [
        ("moe.decode_fp8_grouped", "per_row", {"hidden": 256, "inter": 128}),
        ("moe.gateup_fp4", "nvfp4", {"hidden": 256, "inter": 16}),
        ("moe.gateup_fp4", "int4", {"hidden": 1024, "inter": 16}),
        ("moe.down_fp4", "int4", {"hidden": 16, "inter": 1024}),
        ("moe.down_fp4", "int4", {"hidden": 16, "inter": 512}),
        ("moe.down_fp4", "nvfp4", {"hidden": 16, "inter": 512}),
    ],
)
def test_the_per_row_kernels_read_whole_sectors_and_their_staged_activations_without_conflicts(name, variant, dims):
    """The weights in 16-byte loads, the activations staged once a block
    (16-byte loads, swizzled 16-byte shared stores and reads), the block
    scales a pair a load (NVFP4 gate/up), a step's 32 bytes a row one
    4-byte load a lane (NVFP4 down) or a chunk's once (int4 at K = 1024; at
    K = 512 one fp16 a thread, eight rows a warp, into the swapped halves
    that keep rows ``r`` and ``r + 4`` off each other's banks): at
    least 90 % of the sectors' bytes used, no shared access served in more
    wavefronts than its width needs, and the activations no longer read
    once per output (requested bytes under twice the declared)."""
    from leverctl.profile import memtrace

    path, shape = _paths()[name], _stage_shape(name, top_k=1, experts=2, **dims)
    p = memtrace.profile_variant(path, variant, shape)
    assert p.sector_efficiency >= 0.9, [s.to_json() for s in p.sites[:6]]
    assert p.extra_wavefronts == 0 and p.shared_load_bytes > 0
    assert p.requested_bytes < 2 * p.declared_bytes


@pytest.mark.sim
@pytest.mark.parametrize(
    ("name", "variant", "loads"),
    [("moe.decode_fp8_grouped", "grouped", "uint32")],
)
def test_the_decode_tile_loads_a_weight_rows_chunks_16_bytes_at_a_time_where_rows_allow(
    name, variant, loads, monkeypatch
):
    """The FP8 grouped variant's decode tile (a few rows an expert) stages
    its weights from one 16-byte load per 16 codes
    where the rows are whole loads (hidden 64, inter 32; the smoke shape's
    40 and 24, run above, take them word by word), and passes the check;
    ``test_wide_stager`` holds the stager's block scales across blocks."""
    from leverctl_kernels.common import vload
    from leverctl_kernels.moe import family as F

    calls = []
    real = vload.ldg_v4
    monkeypatch.setattr(vload, "ldg_v4", lambda a, i: calls.append(str(vload._numpy(a).dtype)) or real(a, i))
    shape = F.shape_of({"rows": 2, "hidden": 64, "inter": 32, "experts": 2, "top_k": 1})
    fig = _run(_paths()[name], variant, shape)[0]
    assert fig.passed, fig.why()
    assert loads in calls, set(calls)


@pytest.mark.sim
@pytest.mark.parametrize("inter,shared", [(512, True), (320, True), (288, False)])
def test_nvfp4_down_shares_a_steps_scale_words_by_a_shuffle_and_a_wrong_source_fails(inter, shared):
    """NVFP4 down, a partial 16-output block (hidden 24), where a row's
    scales are whole words (K = 512: two whole steps; K = 320: a step and a
    tail of 2 loads) and where they are not (K = 288: a 2-byte load a
    load): exact against the decoded weights. A kernel shuffling from the
    wrong lane fails where the words are shared and, the 2-byte path not
    shuffling, passes where they are not."""
    from numba import cuda

    from leverctl_kernels.common.path import Tolerance
    from leverctl_kernels.moe import _experts, formats, naive
    from leverctl_kernels.moe import family as F

    path = _paths()["moe.down_fp4"]
    shape = F.shape_of({"rows": 1, "experts": 3, "top_k": 2, "prefill": 0, "hidden": 24, "inter": inter}, "decode ")
    inputs = path.make_inputs(shape, np.random.default_rng(5))
    w = formats.get(inputs, "wd_nvfp4")
    ref = naive.naive_down(inputs["h"], inputs["ids"], inputs["rw"], lambda e: formats.nvfp4_expert(w, e))
    for fault in (0, 1) if shared else (1,):
        bufs = {k: cuda.to_device(np.ascontiguousarray(v)) for k, v in inputs.items()}
        bufs["y"] = cuda.to_device(np.full((1, 24), np.nan, np.float32))
        weights = (bufs["wd_nvfp4_a"], bufs["wd_nvfp4_b"], bufs["wd_nvfp4_c"])
        run = _experts.down_rows("nvfp4", 24, 1, inter, SHFL_FAULT=fault)
        run(bufs["y"], bufs["h"], bufs["ids"], bufs["rw"], weights)
        fig = compare({"y": bufs["y"].copy_to_host()}, {"y": ref}, Tolerance(rel=1e-5, abs_of_max=1e-5))
        assert fig.passed == (fault == 0 or not shared), (fault, fig.why())

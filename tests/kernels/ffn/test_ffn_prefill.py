"""The dense-FFN prefill arms in the CUDA simulator, at the path's tiny odd
smoke shapes (partial row and column tiles, a K that ends mid-stage).

Each variant passes the bench's own check (``leverctl.bench.check``: the
float64 product of the unquantised activations and weights, within the
arm's declared tolerance) and, much more tightly, its own arithmetic
(``naive.*_exact``: the formats decoded exactly, the activation quantisation
in the kernels' float32 operations). The int8 faith2 and faith5 tilings are
bitwise equal, and the requant kernel's int8 rows and scales are exactly the
host's. A broken int8 GEMM (K stages past the first skipped) fails every one
of these comparisons; a BF16 GEMM that reads the wrong scale group, and an
FP8 GEMM that drops a K sub-step, fail the bench's check and their own
arithmetic; an NVFP4 MMQ that drops every odd block of 16 fails both, and
one that applies a k32 step's first block scales to both its blocks fails
its own (exact integer) arithmetic. The FP8 GEMM folds each stage with its
group's scales from the table in shared memory, whether a row's scales come
a window at a time or a stage at a time; one that takes every stage's scale
from its window's first group fails. The row quantisers (int8, E4M3) write
exactly the host's rows.
"""

from __future__ import annotations

import numpy as np
import pytest

from leverctl_kernels.common.path import Tolerance

# fp16 outputs of f32 epilogues: about 2^-11 relative per element.
EXACT = Tolerance(rel=2e-3, abs_of_max=2e-3)


def _path():
    from leverctl_kernels.ffn.prefill.spec import PATH as PREFILL

    return PREFILL


def _within(got, ref, tol: Tolerance) -> tuple[bool, str]:
    g = np.asarray(got, np.float64)
    r = np.asarray(ref, np.float64)
    if not np.all(np.isfinite(g)):
        return False, "non-finite (unwritten) elements"
    rel = np.linalg.norm(g - r) / np.linalg.norm(r)
    mx = float(np.abs(g - r).max())
    ok = rel <= tol.rel and mx <= tol.abs_bound(r)
    return ok, f"rel {rel:.3g} (<= {tol.rel}), max {mx:.3g} (<= {tol.abs_bound(r):.3g})"


def _exact(variant: str, inputs: dict) -> np.ndarray:
    from leverctl_kernels.ffn.prefill import naive

    if variant.startswith("int8"):
        return naive.int8_exact(inputs["a"], inputs["w_i8"], inputs["s_i8"])
    if variant == "nvfp4_mmq":
        return naive.nvfp4_mmq_exact(inputs["a"], inputs["w_fp4"], inputs["w_fp4_scales"], inputs["w_fp4_ts"])
    if variant == "w4a4":
        return naive.w4a4_exact(inputs["a"], inputs["w_fp4"], inputs["w_fp4_scales"], inputs["w_fp4_ts"])
    if variant == "q4k_mmq":
        return naive.q4k_exact(inputs["a"], inputs["w_q4k"])
    if variant == "fp8_m64":
        return naive.fp8_exact(inputs["a"], inputs["qweight"], inputs["scales"])
    if variant.startswith("bf16"):
        return naive.bf16_exact(inputs["a"], inputs["qweight"], inputs["scales"])
    return naive.w4a16_exact(inputs["a"], inputs["qweight"], inputs["scales"])


def _run(variant: str, shape, launch=None):
    """(figures of the bench's check, host c, inputs, the launch)."""
    from numba import cuda

    from leverctl.bench.check import check

    path = _path()
    inputs = path.make_inputs(shape, np.random.default_rng(shape["m"] * 1000 + shape["n"]))
    launch = launch or path.variants[variant].build(shape)
    bufs, fig = check(path, variant, shape, launch, inputs, cuda)
    return fig, bufs["c"].copy_to_host(), inputs, launch


def buildable(variant: str, shape) -> bool:
    """Q4_K weights exist only where k is a multiple of 256 (the table never
    picks the arm elsewhere, and its builder refuses)."""
    return variant != "q4k_mmq" or shape["k"] % 256 == 0


# Simulator time: the 256-thread blocks (the default GEMM's tiles, v2's two
# warpgroups) run at the small down shape only; the default GEMM is the
# w4a16 family's kernel, tested there at more shapes, and v2 stages through
# v1's code.
SLOW_AT_ONE_SHAPE = ("w4a16", "bf16_v2")


def in_fixture(variant: str, shape) -> bool:
    return buildable(variant, shape) and (variant not in SLOW_AT_ONE_SHAPE or shape["down"])


@pytest.fixture(scope="module")
def runs():
    """Every variant at the smoke shapes it runs at here, once for the module."""
    path = _path()
    return {(v, s.label): _run(v, s) for s in path.shapes("smoke", None) for v in path.variants if in_fixture(v, s)}


SMOKE = ["gate+up m19 n26 k160", "down m5 n19 k256"]


ARMS = [
    (v, label)
    for label in SMOKE
    for v in ("w4a16", "bf16_v1", "bf16_v2", "fp8_m64", "int8_faith2", "int8_faith5", "q4k_mmq", "w4a4", "nvfp4_mmq")
    if (v != "q4k_mmq" or "k256" in label) and (v not in SLOW_AT_ONE_SHAPE or label.startswith("down"))
]


@pytest.mark.sim
@pytest.mark.parametrize("variant,label", ARMS)
def test_each_arm_passes_the_bench_check_and_its_own_arithmetic(runs, variant, label):
    fig, c, inputs, _ = runs[(variant, label)]
    assert fig.passed, fig
    ok, why = _within(c, _exact(variant, inputs), EXACT)
    assert ok, why


@pytest.mark.sim
@pytest.mark.parametrize("label", SMOKE)
def test_int8_faith2_and_faith5_are_bitwise_equal(runs, label):
    c2 = runs[("int8_faith2", label)][1]
    c5 = runs[("int8_faith5", label)][1]
    assert np.array_equal(c2.view(np.uint16), c5.view(np.uint16))


@pytest.mark.sim
@pytest.mark.parametrize("variant,fmt", [("int8_faith2", "int8"), ("fp8_m64", "e4m3")])
def test_the_row_quantiser_writes_the_hosts_rows_and_scales(runs, variant, fmt):
    from leverctl_kernels.ffn.prefill import naive

    _, _, inputs, launch = runs[(variant, SMOKE[0])]
    q, s = getattr(naive, f"quantize_rows_{fmt}")(inputs["a"])
    assert np.array_equal(launch.workspace["aq"].copy_to_host(), q)
    assert np.array_equal(launch.workspace["sa"].copy_to_host().view(np.uint32), s.view(np.uint32))


@pytest.mark.sim
def test_the_q8_block_quantiser_writes_the_hosts_blocks(runs):
    from leverctl_kernels.ffn.prefill import naive

    _, _, inputs, launch = runs[("q4k_mmq", SMOKE[1])]
    q, d, s = naive.quantize_blocks_q8(inputs["a"])
    from leverctl_kernels.ffn.prefill import q8_blocks

    ws = {n: a.copy_to_host() for n, a in launch.workspace.items()}
    assert np.array_equal(ws["aq"], q)
    d8, s8 = q8_blocks.split(ws["ds8"])
    assert np.array_equal(d8.view(np.uint32), d.view(np.uint32))
    assert np.array_equal(s8.view(np.uint32), s.view(np.uint32))


@pytest.mark.sim
@pytest.mark.parametrize("used", [7, 4])
def test_a_q4k_mmq_that_skips_sub_blocks_fails_its_arithmetic_and_half_of_k_the_bench_check(used):
    """One sub-block in eight dropped hides inside Q4_K's format error at the
    bench's bound (its own arithmetic catches it); half of K does not."""
    from leverctl_kernels.ffn.prefill import q4k_mmq

    shape = next(s for s in _path().shapes("smoke", None) if s.label == SMOKE[1])
    broken = q4k_mmq.build(shape, kern=q4k_mmq.make_q4k_mmq(SUBS_USED=used))  # k past 32 * used never reach c
    fig, c, inputs, _ = _run("q4k_mmq", shape, broken)
    assert not _within(c, _exact("q4k_mmq", inputs), EXACT)[0]
    if used == 4:
        assert not fig.passed, fig


@pytest.mark.sim
def test_the_nvfp4_activation_encoder_writes_the_hosts_bytes_scales_and_tensor_scale(runs):
    from leverctl_kernels.ffn.prefill import naive

    _, _, inputs, launch = runs[("w4a4", SMOKE[0])]
    packed, scales, ts = naive.quantize_nvfp4(inputs["a"])
    ws = {n: a.copy_to_host() for n, a in launch.workspace.items()}
    assert np.array_equal(ws["packed"], packed) and np.array_equal(ws["scales"], scales)
    assert ws["ts"].view(np.uint32)[0] == np.float32(ts).view(np.uint32)


@pytest.mark.sim
@pytest.mark.parametrize("form", ["wgmma", "mma.sync"])
def test_a_w4a4_gemm_that_drops_a_k_step_fails_its_arithmetic_and_the_bench_check(form):
    from leverctl_kernels.ffn.prefill import w4a4

    shape = next(s for s in _path().shapes("smoke", None) if s.label == SMOKE[1])
    kern = w4a4.make_gemm(form, fault="short_k")  # k 16..31 of every 64 lost
    fig, c, inputs, _ = _run("w4a4", shape, w4a4.build(shape, kern=kern))
    assert not _within(c, _exact("w4a4", inputs), EXACT)[0]
    assert not fig.passed, fig


@pytest.mark.sim
def test_the_nvfp4_mmq_arms_encoder_writes_the_hosts_bytes_too(runs):
    from leverctl_kernels.ffn.prefill import naive

    _, _, inputs, launch = runs[("nvfp4_mmq", SMOKE[1])]
    packed, scales, ts = naive.quantize_nvfp4(inputs["a"])
    ws = {n: a.copy_to_host() for n, a in launch.workspace.items()}
    assert np.array_equal(ws["packed"], packed) and np.array_equal(ws["scales"], scales)
    assert ws["ts"].view(np.uint32)[0] == np.float32(ts).view(np.uint32)


@pytest.mark.sim
@pytest.mark.parametrize(
    "broken", [dict(HALVES=1), dict(SCALE_PER_32=True)], ids=["odd-blocks-dropped", "one-scale-per-32"]
)
def test_an_nvfp4_mmq_that_drops_blocks_or_misapplies_block_scales_fails_its_arithmetic(broken):
    """Every odd block of 16 dropped (half of K) fails the bench's check as
    well; the even block's scales applied to the odd block hide inside
    NVFP4's format error at the bench's bound, and the exact integer
    reference catches them."""
    from leverctl_kernels.common.path import Shape
    from leverctl_kernels.ffn.prefill import nvfp4_mmq

    shape = Shape("down m3 n8 k128", dict(m=3, n=8, k=128, down=1))  # one block, two K stages: quick
    fig, c, inputs, _ = _run("nvfp4_mmq", shape, nvfp4_mmq.build(shape, kern=nvfp4_mmq.make_nvfp4_mmq(**broken)))
    assert not _within(c, _exact("nvfp4_mmq", inputs), EXACT)[0]
    if "HALVES" in broken:
        assert not fig.passed, fig


@pytest.mark.sim
def test_the_nvfp4_mmq_weights_word_by_word_where_rows_are_not_16_byte_units_or_start_off_them():
    """The weights' stage comes 32 codes a 16-byte load where the rows are
    whole 16-byte units from a 16-byte start; K 48 (rows of 24 bytes: three
    blocks, the last load's second block past the row) and weights a word
    past 16 bytes take the words one a load, and both match the exact
    integer reference."""
    from numba import cuda

    from leverctl.bench.check import check
    from leverctl_kernels.common import vload
    from leverctl_kernels.common.path import Shape
    from leverctl_kernels.ffn.prefill import nvfp4_mmq

    shape = Shape("down m5 n11 k48", dict(m=5, n=11, k=48, down=1))
    fig, c, inputs, _ = _run("nvfp4_mmq", shape)
    assert fig.passed, fig
    assert _within(c, _exact("nvfp4_mmq", inputs), EXACT)[0]

    shape = Shape("down m5 n11 k128", dict(m=5, n=11, k=128, down=1))
    path = _path()
    inputs = path.make_inputs(shape, np.random.default_rng(23))
    launch = nvfp4_mmq.build(shape)
    w = inputs["w_fp4"]
    buf = cuda.to_device(np.concatenate([np.zeros(4, np.uint8), w.reshape(-1)]))
    off = buf[4:].reshape(w.shape)  # a device view 4 bytes past 16: the word loads
    assert off.is_c_contiguous() and not vload.aligned16(off)
    bufs, fig = check(path, "nvfp4_mmq", shape, _with_weights(launch, off), inputs, cuda)
    assert fig.passed, fig
    assert _within(bufs["c"].copy_to_host(), _exact("nvfp4_mmq", inputs), EXACT)[0]


@pytest.mark.sim
@pytest.mark.parametrize("k", [512, 640])
def test_the_nvfp4_mmq_scale_tables_come_a_window_of_four_stages_a_row(k):
    """Each row's scale bytes of four stages (16 blocks of 16) are one load
    at the first of them: K 512 (rows of 32 scale bytes, two windows, 16
    bytes a load) and K 640 (40 bytes: not whole 16-byte units, byte by
    byte; a last window of two stages) match the exact integer reference."""
    from leverctl_kernels.common.path import Shape

    shape = Shape(f"down m5 n11 k{k}", dict(m=5, n=11, k=k, down=1))
    fig, c, inputs, _ = _run("nvfp4_mmq", shape)
    assert fig.passed, fig
    assert _within(c, _exact("nvfp4_mmq", inputs), EXACT)[0]


@pytest.mark.sim
def test_an_nvfp4_mmq_whose_scale_window_is_reloaded_too_seldom_fails(monkeypatch):
    """Windows of eight stages loaded 16 bytes (four stages' scales): the
    second four stages of each take the fourth's scales."""
    from leverctl_kernels.common.gemm import mmq
    from leverctl_kernels.common.path import Shape
    from leverctl_kernels.ffn.prefill import nvfp4_mmq

    monkeypatch.setattr(mmq, "WINDOW_STAGES", 8)
    shape = Shape("down m5 n11 k512", dict(m=5, n=11, k=512, down=1))
    fig, c, inputs, _ = _run("nvfp4_mmq", shape, nvfp4_mmq.build(shape, kern=nvfp4_mmq.make_nvfp4_mmq()))
    assert not _within(c, _exact("nvfp4_mmq", inputs), EXACT)[0]


def _with_weights(launch, w_dev):
    """``launch`` reading its NVFP4 codes from ``w_dev`` (a device array
    of the same bytes) instead of the staged input."""

    def run(bufs):
        launch({**bufs, "w_fp4": w_dev})

    run.workspace = launch.workspace
    return run


def test_doubled_e2m1_codes_are_the_exact_small_integers_ml_dtypes_decodes():
    import ml_dtypes

    from leverctl_kernels.ffn.prefill import nvfp4_mmq

    codes = np.arange(8, dtype=np.uint8)
    want = 2 * codes.view(ml_dtypes.float4_e2m1fn).astype(np.float64)
    assert list(nvfp4_mmq.DOUBLED_VALUES) == [int(v) for v in want]
    assert max(nvfp4_mmq.DOUBLED_VALUES) ** 2 * 16 < 2**12  # a block's dot product: 12 bits, exact in f32


@pytest.mark.parametrize("seed", [0, 1])
def test_the_integer_nvfp4_reference_is_the_w4a4_arithmetic_and_sees_a_wrong_block_scale(seed):
    from leverctl_kernels.ffn.prefill import formats, naive
    from leverctl_kernels.ffn.prefill.spec import activations, weights

    rng = np.random.default_rng(seed)
    a, w = activations(rng, 5, 96), formats.nvfp4(weights(rng, 7, 96))
    exact = naive.nvfp4_mmq_exact(a, w["w_fp4"], w["w_fp4_scales"], w["w_fp4_ts"])
    ref = naive.w4a4_exact(a, w["w_fp4"], w["w_fp4_scales"], w["w_fp4_ts"])
    assert np.abs(exact - ref).max() <= 1e-6 * np.abs(ref).max()
    bad = w["w_fp4_scales"].copy()
    bad[:, 1] = bad[:, 0]
    assert np.abs(naive.nvfp4_mmq_exact(a, w["w_fp4"], bad, w["w_fp4_ts"]) - ref).max() > 1e-3 * np.abs(ref).max()


@pytest.mark.sim
def test_an_fp8_gemm_that_drops_a_k_substep_fails_the_bench_check_and_its_arithmetic():
    from leverctl_kernels.ffn.prefill import fp8_m64

    shape = next(s for s in _path().shapes("smoke", None) if s.label == SMOKE[0])
    broken = fp8_m64.build(shape, kern=fp8_m64.make_gemm(fault="short_k"))  # k 32..63 of every stage never reach c
    fig, c, inputs, _ = _run("fp8_m64", shape, broken)
    assert not fig.passed, fig
    assert not _within(c, _exact("fp8_m64", inputs), EXACT)[0]


@pytest.mark.sim
def test_the_fp8_gemm_takes_a_k_that_ends_inside_an_instruction():
    """k = 48 (a down projection seen in a GGUF file): one stage, its K
    zero-filled past 48, where the arm used to refuse any k % 32."""
    from leverctl_kernels.common.path import Shape

    shape = Shape("down m5 n11 k48", dict(m=5, n=11, k=48, down=1))
    fig, c, inputs, _ = _run("fp8_m64", shape)
    assert fig.passed, fig
    assert _within(c, _exact("fp8_m64", inputs), EXACT)[0]


# K of 512 (four scale groups: one window, the odd thread's half past K),
# 1152 (nine: a row's scales not whole 8-byte units, so each stage's is
# loaded alone) and 1536 (twelve: a window of eight, then one of four)
@pytest.mark.sim
@pytest.mark.parametrize("k", [512, 1152, 1536])
def test_the_fp8_gemm_folds_each_stage_with_its_groups_scales_from_the_table(k):
    from leverctl_kernels.common.path import Shape

    shape = Shape(f"down m5 n11 k{k}", dict(m=5, n=11, k=k, down=1))
    fig, c, inputs, _ = _run("fp8_m64", shape)
    assert fig.passed, fig
    assert _within(c, _exact("fp8_m64", inputs), EXACT)[0]


@pytest.mark.sim
def test_an_fp8_gemm_whose_table_takes_each_windows_first_group_fails():
    """Every stage of a window of eight groups folded with the window's
    first group's scale: stages 1-3 of K = 512 take group 0's."""
    from leverctl_kernels.common.path import Shape
    from leverctl_kernels.ffn.prefill import fp8_m64

    shape = Shape("down m5 n11 k512", dict(m=5, n=11, k=512, down=1))
    broken = fp8_m64.build(shape, kern=fp8_m64.make_gemm(scale_fault="window_first"))
    fig, c, inputs, _ = _run("fp8_m64", shape, broken)
    assert not fig.passed, fig
    assert not _within(c, _exact("fp8_m64", inputs), EXACT)[0]


@pytest.mark.sim
def test_a_broken_int8_gemm_fails_the_bench_check_its_arithmetic_and_bitwise_equality(runs):
    from leverctl_kernels.ffn.prefill import int8_faith2

    shape = next(s for s in _path().shapes("smoke", None) if s.label == SMOKE[0])
    # each stage reads the next one's slot
    broken = int8_faith2.build_with(shape, int8_faith2.WGS, 64, fault="stage_order", wn=int8_faith2.WN)
    fig, c, inputs, _ = _run("int8_faith2", shape, broken)
    assert not fig.passed, fig
    assert not _within(c, _exact("int8_faith2", inputs), EXACT)[0]
    assert not np.array_equal(c.view(np.uint16), runs[("int8_faith5", SMOKE[0])][1].view(np.uint16))


@pytest.mark.sim
def test_a_bf16_gemm_with_the_wrong_scale_group_fails_the_bench_check_and_its_arithmetic():
    """v1's tiles; v2 stages its weights through the same code."""
    from leverctl_kernels.common.path import Shape
    from leverctl_kernels.ffn.prefill import _wgmma_bf16

    shape = Shape("gate+up m5 n11 k256", dict(m=5, n=11, k=256, down=0))  # two scale groups
    good = _run("bf16_v1", shape)
    assert good[0].passed and _within(good[1], _exact("bf16_v1", good[2]), EXACT)[0]
    broken = _wgmma_bf16.build_with(shape, 2, 128, kern=_wgmma_bf16.make_gemm(2, 128, group_shift=8, wn=2))
    fig, c, inputs, _ = _run("bf16_v1", shape, broken)  # k 128..255 take the first group's scale
    assert not fig.passed, fig
    assert not _within(c, _exact("bf16_v1", inputs), EXACT)[0]


_TINY = ("gate+up m3 n8 k32", dict(m=3, n=8, k=32, down=0))  # one block, one K stage: the simulator's quickest


@pytest.mark.sim
@pytest.mark.parametrize("variant", ["bf16_v1", "w4a4"])
def test_the_wgmma_arms_mma_sync_form_passes_the_check_and_its_arithmetic(variant):
    """The form GPUs without wgmma build (``_mma_forms``); v2 differs from
    v1 only in its tile (its PTX is compiled in test_ffn_prefill_ptx)."""
    import importlib

    from leverctl_kernels.common.path import Shape

    shape = Shape(*_TINY)
    launch = importlib.import_module(f"leverctl_kernels.ffn.prefill.{variant}").build(shape, form="mma.sync")
    assert (launch.tensor_cores, launch.tc_dtype) == ("mma.sync", "bf16")
    fig, c, inputs, _ = _run(variant, shape, launch)
    assert fig.passed, fig
    ok, why = _within(c, _exact(variant, inputs), EXACT)
    assert ok, why


@pytest.mark.sim
def test_a_bf16_mma_sync_form_that_drops_a_k16_step_fails_the_check_and_its_arithmetic():
    from leverctl_kernels.common.gemm import mma_sync
    from leverctl_kernels.common.path import Shape
    from leverctl_kernels.ffn.prefill import _mma_forms

    shape = Shape(*_TINY)
    kern = mma_sync.make_kernel("bf16", 1, 128, b_kind="int4_bf16", fault="short_k")  # k 16..31 of each 64 lost
    fig, c, inputs, _ = _run("bf16_v1", shape, _mma_forms.build_bf16(shape, 1, 128, kern=kern))
    assert not fig.passed, fig
    assert not _within(c, _exact("bf16_v1", inputs), EXACT)[0]


def test_fp8_m64_has_no_mma_sync_form_and_the_others_build_both():
    from leverctl_kernels.common import tc
    from leverctl_kernels.ffn.prefill import bf16_v1, bf16_v2, fp8_m64, w4a4

    assert bf16_v1.build.forms == bf16_v2.build.forms == w4a4.build.forms == tc.FORMS
    assert getattr(fp8_m64.build, "forms", None) is None


def test_the_records_say_the_int8_arm_runs_on_s8_mma_sync():
    path = _path()
    for v in ("int8_faith2", "int8_faith5"):
        assert path.variants[v].tensor_cores == "mma.sync"
        assert path.variants[v].launches == 2
    assert path.variants["w4a16"].tensor_cores is None
    assert path.variants["bf16_v1"].tensor_cores == path.variants["bf16_v2"].tensor_cores == "wgmma"
    assert path.variants["fp8_m64"].tensor_cores == "wgmma" and path.variants["fp8_m64"].launches == 2
    assert path.variants["w4a4"].tensor_cores == "wgmma" and path.variants["w4a4"].launches(None) == 3
    assert path.variants["q4k_mmq"].tensor_cores == "mma.sync"
    assert path.variants["nvfp4_mmq"].tensor_cores == "mma.sync" and path.variants["nvfp4_mmq"].tc_dtype == "s8"
    assert path.variants["nvfp4_mmq"].launches == 3


def _declaration_cases():
    path = _path()
    return [(path, v, s) for s in path.shapes("smoke", None) for v in path.variants if buildable(v, s)]


@pytest.mark.parametrize("case", _declaration_cases(), ids=lambda c: f"{c[1]}/{c[2].label}")
def test_a_variant_makes_the_launches_and_allocates_the_workspace_it_declares(case, monkeypatch):
    import os

    if os.environ.get("NUMBA_ENABLE_CUDASIM") != "1":
        pytest.skip("counts simulator launches")
    from test_path_declarations import count_launches, fake_bufs, scratch_allocated

    from leverctl_kernels.common.path import workspace_of

    path, variant, shape = case
    allocated, launch = scratch_allocated(monkeypatch, path.variants[variant].build, shape)
    assert allocated == len(workspace_of(launch))
    assert count_launches(monkeypatch, launch, fake_bufs(path, shape)) == path.variant_launches(variant, shape)


@pytest.mark.sim
@pytest.mark.parametrize(
    "misread,offset", [(False, 0), (True, 0), (False, 4)], ids=["as-stored", "scale-top-bits-lost", "not-on-16-bytes"]
)
def test_q4k_mmq_reads_a_gguf_files_q4k_tensor_as_stored_and_matches_gguf_dequantisation(tmp_path, misread, offset):
    """A Q4_K tensor written by the ``gguf`` package's writer and read back by
    its reader is the kernel's input as is; the kernel's product matches one
    built on ``gguf``'s own dequantisation (not ours). Handing the kernel the
    bytes with the upper sub-blocks' scale bits lost fails the comparison.
    Blocks that do not start on 16 bytes (a view 4 bytes into its buffer)
    are read a word a load, values and headers alike, to the same sums."""
    import gguf
    from numba import cuda

    from leverctl_kernels.common import q4k, vload
    from leverctl_kernels.common.path import Shape
    from leverctl_kernels.ffn.prefill import naive, q4k_mmq
    from leverctl_kernels.ffn.prefill.spec import activations, weights

    rng = np.random.default_rng(11)
    n, k, m = 7, 512, 3
    path = tmp_path / "ffn.gguf"
    writer = gguf.GGUFWriter(str(path), "qwen3")
    writer.add_tensor(
        "blk.0.ffn_down.weight", q4k.quantize(weights(rng, n, k)), raw_dtype=gguf.GGMLQuantizationType.Q4_K
    )
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    tensor = gguf.GGUFReader(str(path)).get_tensor(0)
    assert tensor.tensor_type == gguf.GGMLQuantizationType.Q4_K
    blocks = np.ascontiguousarray(np.asarray(tensor.data, dtype=np.uint8).reshape(n, -1))

    a = activations(rng, m, k)
    q, d, _ = naive.quantize_blocks_q8(a)
    w_gguf = gguf.quants.dequantize(blocks, gguf.GGMLQuantizationType.Q4_K).astype(np.float64)
    ref = (q.astype(np.float64) * np.repeat(d.astype(np.float64), 32, axis=1)) @ w_gguf.T

    given = blocks.copy()
    if misread:
        given.reshape(n, -1, q4k.BLOCK_BYTES)[..., 4:8] &= 0x3F
    w = cuda.to_device(given)
    if offset:  # a device view 4 bytes into its buffer (a host view would be copied to one on 16 bytes)
        flat = np.zeros(given.size + offset, np.uint8)
        flat[offset:] = given.reshape(-1)
        w = cuda.to_device(flat)[offset:].reshape(given.shape)
        assert not vload.aligned16(w)
    c = cuda.to_device(np.full((m, n), np.nan, dtype=np.float16))
    q4k_mmq.build(Shape("gguf", dict(m=m, n=n, k=k, down=1)))({"c": c, "a": cuda.to_device(a), "w_q4k": w})
    ok, why = _within(c.copy_to_host(), ref, EXACT)
    assert ok != misread, why

"""The LoRA variants in the CUDA simulator at the paths' tiny odd smoke
shapes (K ends mid-warp, m = 9 crosses a row group, ranks 3 and 2).

Each variant passes the bench's check against the float64
``x W^T + s (x A^T) B^T``; the per-forward ``t = x A^T`` buffer and the
merged fp16 weights are each held to their own float64 value. With
rotation permitted, a swap between two calls takes effect at once
(``spec.swap_check``: the next call matches the NEW adapter's reference);
a variant that keeps the old adapter after a swap fails that check, and one
that drops the adapter, or never merges it, fails the bench's check.
Without rotation a swap is refused and the loaded adapter stays.
"""

from __future__ import annotations

import numpy as np
import pytest

from leverctl_kernels.common.path import Shape


def _path():
    from leverctl_kernels.lora.proj.spec import PATH as PROJ

    return PROJ


def _smoke(rotate: int) -> list[Shape]:
    from leverctl_kernels.lora import family as spec

    return [spec.bind({"lora_rotate": rotate}, s) for s in _path().shapes("smoke", None)]


def _check(variant: str, shape, launch=None):
    """(figures, bufs, inputs, launch) of the bench's check."""
    from numba import cuda

    from leverctl.bench.check import check

    path = _path()
    inputs = path.make_inputs(shape, np.random.default_rng(shape["m"] * 100 + shape["n"]))
    launch = launch or path.variants[variant].build(shape)
    bufs, fig = check(path, variant, shape, launch, inputs, cuda)
    return fig, bufs, inputs, launch


@pytest.fixture(scope="module")
def runs():
    """Every variant at every smoke shape, rotation permitted: the check,
    then the swap check on the same launch and buffers."""
    from numba import cuda

    from leverctl_kernels.lora import family as spec

    out = {}
    for shape in _smoke(1):
        for variant in _path().variants:
            fig, bufs, inputs, launch = _check(variant, shape)
            state = {
                "t": launch.workspace["t"].copy_to_host() if "t" in launch.workspace else None,
                "merged": launch.merged.copy_to_host() if hasattr(launch, "merged") else None,
            }
            found = spec.swap_check(variant, shape, launch, bufs, cuda) if fig.passed else None
            out[variant, shape.label] = (fig, inputs, state, found, shape)
    return out


@pytest.mark.sim
def test_every_variant_passes_the_bench_check(runs):
    assert len(runs) == 4
    for key, (fig, *_rest) in runs.items():
        assert fig.passed, (key, fig.why())


@pytest.mark.sim
def test_the_per_forward_buffer_and_the_merged_weights_are_their_own_float64_values(runs):
    from leverctl_kernels.lora import family as spec
    from leverctl_kernels.lora import naive

    for (variant, _), (_, inputs, state, _, shape) in runs.items():
        x, w, a, b = (inputs[n] for n in ("x", "w", "a", "b"))
        if variant == "per_forward":
            t = naive.naive_lora(x, np.zeros((a.shape[0], x.shape[1])), a, np.eye(a.shape[0]), 1.0)
            np.testing.assert_allclose(state["t"], t, rtol=1e-5, atol=1e-5 * np.abs(t).max())
        else:
            want = naive.naive_merge(w, a, b, spec.scale(shape))
            got = state["merged"].astype(np.float64)
            # one rounding to fp16: within half an fp16 ulp of the float64 value (plus fp32 sums)
            assert np.all(
                np.abs(got - want) <= np.spacing(np.abs(want).astype(np.float16)).astype(np.float64) * 0.5 + 1e-6
            ), variant


@pytest.mark.sim
def test_a_swap_takes_effect_at_the_next_call(runs):
    for (variant, label), (*_, found, _) in runs.items():
        assert found["takes_effect"] and found["rotate"], (variant, label, found)
        assert found["swap"] == {"per_forward": "pointer", "merged": "remerge"}[variant]
        assert found["rel_after_swap"] < 2e-3 and found["swap_ms"] is None  # timed on a GPU only


def _stale(variant: str):
    """The variant's launch class with a swap that keeps the old adapter
    (the merged one also leaves its merged weights alone)."""
    from leverctl_kernels.lora.proj import merged, per_forward

    base = per_forward.PerForward if variant == "per_forward" else merged.Merged

    class Stale(base):
        def swap(self, a, b):
            if not self.rotate:
                return super().swap(a, b)
            # accepted, but neither the adapter nor the weights change

    return Stale


@pytest.mark.sim
@pytest.mark.parametrize("variant", ("per_forward", "merged"))
def test_the_swap_check_fails_a_variant_that_keeps_the_old_adapter(variant):
    from numba import cuda

    from leverctl_kernels.lora import family as spec

    shape = _smoke(1)[0]
    fig, bufs, _, launch = _check(variant, shape, _stale(variant)(shape, True))
    assert fig.passed  # it computes the loaded adapter right; only the swap is broken
    with pytest.raises(AssertionError, match="does not use the new adapter"):
        spec.swap_check(variant, shape, launch, bufs, cuda)


@pytest.mark.sim
def test_without_rotation_a_swap_is_refused_and_the_loaded_adapter_stays():
    from numba import cuda

    from leverctl_kernels.lora import family as spec
    from leverctl_kernels.lora._adapter import SwapRefused

    shape = _smoke(0)[0]
    for variant in _path().variants:
        launch = _path().variants[variant].build(shape)
        assert launch.rotate is False
        before = launch.adapter
        with pytest.raises(SwapRefused, match="lora_rotate is off"):
            launch.swap(None, None)
        assert launch.adapter is before
        assert spec.swap_check(variant, shape, launch, None, cuda) == {
            "rotate": False,
            "swap": "refused",
            "swap_ms": None,
        }
    # a launch that accepts the swap with rotation off fails the check
    accepting = _stale("per_forward")(shape, True)
    accepting.rotate = False
    accepting.swap = lambda a, b: None
    with pytest.raises(AssertionError, match="not refused"):
        spec.swap_check("per_forward", shape, accepting, None, cuda)


@pytest.mark.sim
def test_the_check_rejects_a_dropped_adapter_and_an_unmerged_weight():
    from leverctl_kernels.lora.proj import merged, per_forward

    shape = _smoke(0)[1]

    class NoAdapter(per_forward.PerForward):
        def _forward(self, bufs):
            self.scale = 0.0
            super()._forward(bufs)

    class NeverMerged(merged.Merged):
        def _remerge(self, a, b):
            self.merged.copy_to_device(self._base)

    for variant, launch in (("per_forward", NoAdapter(shape, False)), ("merged", NeverMerged(shape, False))):
        fig, *_ = _check(variant, shape, launch)
        assert not fig.passed and fig.rel > 0.05, (variant, fig.why())


@pytest.mark.gpu
@pytest.mark.parametrize("variant", ("per_forward", "merged"))
def test_on_a_gpu_both_variants_pass_at_a_model_shape_and_time_the_swap(variant):
    """The Qwen3-8B FFN up projection (4096 -> 12288) at rank 64, 8 rows:
    the check, a swap that takes effect, and its time (a pointer swap costs
    next to nothing; a re-merge is a pass over the 96 MiB of weights)."""
    from numba import cuda

    from leverctl_kernels.lora import family as spec

    shape = next(s for s in _path().shapes("model", None) if (s["m"], s["n"], s["r"]) == (8, 12288, 64))
    shape = spec.bind({"lora_rotate": True}, shape)
    fig, bufs, _, launch = _check(variant, shape)
    assert fig.passed, fig.why()
    found = spec.swap_check(variant, shape, launch, bufs, cuda, on_gpu=True)
    assert found["takes_effect"] and found["swap_ms"] > 0
    if variant == "merged":
        assert found["swap_ms"] > 0.02  # at least the weights' read and write at H200 bandwidth


@pytest.mark.sim
@pytest.mark.simulator_only
def test_launches_per_call_and_per_swap_are_what_the_variants_declare(monkeypatch):
    """Counted on the simulator's kernel objects, nothing run: per_forward
    makes its 2 launches a call and none to swap; merged merges once at
    load, then 1 launch a call, and 1 (the re-merge) per swap."""
    from numba import cuda
    from numba.cuda.simulator.kernel import FakeCUDAKernel

    shape = _smoke(1)[0]
    inputs = _path().make_inputs(shape, np.random.default_rng(0))
    bufs = {n: cuda.to_device(a) for n, a in inputs.items()}
    bufs["y"] = cuda.to_device(np.zeros((shape["m"], shape["n"]), np.float16))
    calls = []
    monkeypatch.setattr(FakeCUDAKernel, "__call__", lambda self, *a, **k: calls.append(self))

    def count(fn) -> int:
        calls.clear()
        fn()
        return len(calls)

    for variant in _path().variants:
        launch = _path().variants[variant].build(shape)
        declared = _path().variant_launches(variant, shape)
        first = count(lambda: launch(bufs))
        assert count(lambda: launch(bufs)) == declared
        assert first == declared + (variant == "merged")  # the merge at load
        assert count(lambda: launch.swap(bufs["a"], bufs["b"])) == (variant == "merged")


@pytest.mark.sim
@pytest.mark.parametrize("k", [64, 72], ids=["k64-two-steps", "k72-a-lone-last-step"])
def test_rows_of_whole_16_byte_loads_are_read_wide_and_pass(k, monkeypatch):
    """K a multiple of 8 (the model's hidden sizes): the projection and the
    adapter's down-projection read x, W and A in 16-byte loads, two steps a
    lane in flight (at k 72 a lane's second step lies past the row: loaded
    again, not summed), and both variants pass the check; the smoke shapes'
    K of 37 and 70 keep one fp16 a lane."""
    from leverctl_kernels.common import vload

    calls = []
    real = vload.ldg_v4
    monkeypatch.setattr(vload, "ldg_v4", lambda a, i: calls.append(i) or real(a, i))
    base = _smoke(1)[0]
    shape = Shape(f"k{k}", {**base.dims, "k": k})
    for variant in _path().variants:
        fig = _check(variant, shape)[0]
        assert fig.passed, (variant, fig.why())
    assert calls


# ── the merge kernel: 16-byte path, scalar path, rank order ─────────────────


def _merge_operands(n: int, k: int, r: int, seed: int = 3):
    """fp16 ``w``, ``a``, ``b`` and the scale, sized as the path draws them."""
    from leverctl_kernels.lora import family as spec

    shape = Shape("merge", dict(m=1, n=n, k=k, r=r, alpha=2 * r))
    inputs = spec.make_inputs(shape, np.random.default_rng(seed))
    return inputs["w"], inputs["a"], inputs["b"], np.float32(spec.scale(shape))


def _fp32_merge(w, a, b, s) -> np.ndarray:
    """``fp16(W + s B A)`` with each weight's sum over the rank in fp32 in
    the order ``j = 0 .. r-1`` and one rounding to fp16: what one thread per
    weight computed."""
    acc = np.zeros(w.shape, np.float32)
    for j in range(a.shape[0]):
        acc = acc + b[:, j : j + 1].astype(np.float32) * a[j].astype(np.float32)
    return (w.astype(np.float32) + s * acc).astype(np.float16)


def _run_merge(w, a, b, s, *, fault: int = 0, offset: bool = False) -> np.ndarray:
    """The merge kernel's ``W'``; with ``offset``, ``W`` and ``W'`` are views
    starting 2 bytes into their allocations (not on 16 bytes)."""
    from numba import cuda

    from leverctl_kernels.lora import _kernels as K

    n, k = w.shape
    if offset:
        dw = cuda.to_device(np.concatenate([np.zeros(1, np.float16), w.reshape(-1)]))[1:].reshape(n, k)
        dd = cuda.to_device(np.zeros(n * k + 1, np.float16))[1:].reshape(n, k)
    else:
        dw, dd = cuda.to_device(w), cuda.to_device(np.zeros((n, k), np.float16))
    grid, threads = K.merge_grid(n, k)
    K.make_merge(fault)[grid, threads](dd, dw, cuda.to_device(a), cuda.to_device(b), s)
    return dd.copy_to_host()


@pytest.mark.sim
@pytest.mark.parametrize(
    "n, k, r, offset",
    [(13, 37, 3, False), (70, 264, 5, False), (5, 16, 65, False), (9, 72, 4, True)],
    ids=["k37-scalar", "k264-two-strips-two-blocks", "r65-two-rank-chunks", "k72-view-off-16-bytes"],
)
def test_the_merge_is_bit_identical_to_the_fp32_sum_in_rank_order(n, k, r, offset, monkeypatch):
    """Both paths, every shape: each weight's ``s * sum_j b[row, j] a[j, col]``
    in fp32 in rank order and one rounding, bit for bit. K a multiple of 8
    on 16 bytes takes the 16-byte path (k 264: a second column strip of one
    8-wide group, rows past a block's 64 and a step's 16); k 37 and a view
    of W starting 2 bytes in take one fp16 at a time (no 16-byte load);
    rank 65 stages A and B in two chunks of ranks."""
    from leverctl_kernels.common import vload

    wide = []
    real = vload.ldg_v4
    monkeypatch.setattr(vload, "ldg_v4", lambda arr, i: wide.append(i) or real(arr, i))
    w, a, b, s = _merge_operands(n, k, r)
    got = _run_merge(w, a, b, s, offset=offset)
    assert np.array_equal(got.view(np.uint16), _fp32_merge(w, a, b, s).view(np.uint16))
    assert bool(wide) == (k % 8 == 0 and not offset)


@pytest.mark.sim
def test_a_merge_that_drops_or_double_counts_the_last_16_byte_group_fails_the_check():
    """The planted faults (``make_merge(TAIL_FAULT)``, the 16-byte path's
    last 8-wide group of each row: 1 leaves it unwritten, 2 adds its
    adapter twice) fail the bench's check of the merged variant at k 72
    (nine groups a row); unplanted, the same launch passes."""
    from numba import cuda

    from leverctl_kernels.lora import _kernels as K
    from leverctl_kernels.lora.proj import merged

    shape = Shape("k72", {**_smoke(0)[0].dims, "k": 72})

    def planted(fault: int):
        class Planted(merged.Merged):
            def __init__(self, shape, rotate):
                super().__init__(shape, rotate)
                self._merge = K.make_merge(fault)
                self.merged = cuda.to_device(np.zeros((shape["n"], shape["k"]), np.float16))

        return Planted(shape, False)

    assert _check("merged", shape, planted(0))[0].passed
    for fault in (1, 2):
        fig = _check("merged", shape, planted(fault))[0]
        assert not fig.passed and fig.rel > 0.01, (fault, fig.why())


@pytest.mark.sim
def test_traced_the_merged_variant_reads_and_writes_whole_sectors():
    """The merged variant (the merge, then the projection) traced at the
    profile shape's rows (one decode row, eight output rows) with k 512 and
    rank 16: >= 90 % of the global sectors used (the merge's W, A's strip
    and W' in 16-byte accesses, B's rows in whole sectors), and what it
    requests under 8x the bytes the variant declares (x and W' once; the
    merge adds W, A and B once each). Merging one thread per weight, every
    thread re-reading its B row and A column for each rank, used 70 % of the
    sectors at 32x the declared bytes. The first call on a set of weights
    is traced, as it merges: the profile traces a warm call, after the
    load-time merge (``launch.load``), and the merge's accesses are not in it."""
    from numba import cuda

    from leverctl.bench.check import run_once
    from leverctl.profile import memtrace as mt

    shape = Shape("profile m1 n8 k512 r16", dict(m=1, n=8, k=512, r=16, alpha=32, rotate=0))
    path = _path()
    launch = path.variants["merged"].build(shape)
    with mt.trace() as t:
        run_once(path, shape, launch, path.make_inputs(shape, np.random.default_rng(0)), cuda)
    prof = mt.summarize(t, declared_bytes=path.variant_traffic("merged", shape).bytes)
    assert prof.launches == 2  # the merge and the projection
    assert mt.profile_variant(path, "merged", shape).launches == 1  # warm: the projection alone
    rows = [r.to_json() for r in prof.sites if r.space == mt.GLOBAL]
    assert prof.sector_efficiency >= 0.9, rows
    assert prof.requested_vs_declared < 8, (prof.requested_vs_declared, rows)

"""The profile's capture: every variant of every kernel path, at its model
shapes, launches its kernels against host stand-ins in a process that
compiles for sm_90a, and each launch is recorded with its argument types
and configuration (nothing runs, nothing needs a GPU).

The capture runs in a child process with the simulator off, as
``leverctl profile`` runs it; the suite itself runs in the simulator."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

CHILD = textwrap.dedent(
    """
    import json, sys
    from leverctl.profile import capture as C
    C.prepare("sm_90a")
    C.answer_device_lookups("sm_90a")
    import warnings; warnings.simplefilter("ignore")
    from leverctl_kernels.registry import all_paths
    from leverctl_kernels.common.path import Shape
    from leverctl.profile.run import _types_shape  # the smoke shape profile takes the types from
    def buildable(p, v, s):
        # variants select() never picks at such a shape, and whose build refuses it
        return not ((v == "wy17" and s["t"] != 17) or (v == "batch4" and s["m"] > 4))
    out = {}
    for p in all_paths():
        for s in p.shapes("model", None):
            smoke = _types_shape(p, s)
            for v in p.variants:
                if not buildable(p, v, s):
                    continue
                shape = p.bind({"moe_union_stats": v == "on"}, s, "metrale") if p.bind else s
                try:
                    ls = C.capture(p, v, shape, smoke)
                    got = [
                        [l.name, list(l.block), l.dynamic_shared, [str(t) for t in l.argtypes],
                         getattr(l.kernel, "async_stages", None), getattr(l.kernel, "tile_m", None)]
                        for l in ls
                    ]
                except Exception as e:
                    got = f"{type(e).__name__}: {e}"
                out.setdefault(p.name, {}).setdefault(v, []).append(got)
    json.dump(out, sys.stdout)
    """
)


@pytest.fixture(scope="module")
def captured():
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    r = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, env=env, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout)


def test_every_variant_of_every_path_launches_kernels_at_every_model_shape(captured):
    from leverctl_kernels.registry import all_paths

    assert set(captured) == {p.name for p in all_paths()}
    failed = {
        (path, v): shapes
        for path, variants in captured.items()
        for v, shapes in variants.items()
        if any(isinstance(s, str) or not s for s in shapes)
    }
    assert failed == {}


def test_a_launch_is_recorded_with_its_block_and_the_types_the_gpu_would_compile_for(captured):
    gemv = captured["w4a16.gemv"]["gemv_sw"][0]
    assert [name for name, *_ in gemv] == ["gemv_sw"]
    name, block, shared, types, _stages, _tile_m = gemv[0]
    assert block == [128, 1, 1] and shared == 0
    # device arrays are C-contiguous: so are the stand-ins' types
    assert all(t.endswith(", C)") for t in types if t.startswith("array(")), types


def test_nothing_stays_patched_after_a_capture():
    code = textwrap.dedent(
        """
        from leverctl.profile import capture as C
        C.prepare("sm_90a"); C.answer_device_lookups("sm_90a")
        from numba import cuda
        from numba.cuda import dispatcher as d
        before = (cuda.device_array, cuda.to_device, d.CUDADispatcher.__getitem__)
        with C.Recorder():
            assert cuda.device_array is not before[0]
        assert (cuda.device_array, cuda.to_device, d.CUDADispatcher.__getitem__) == before
        print("ok")
        """
    )
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert r.stdout.strip() == "ok", r.stderr[-2000:]


def test_an_unknown_arch_is_refused_by_name():
    from leverctl.profile import capture

    with pytest.raises(ValueError, match="unknown --arch 'sm_75'.*sm_90a"):
        capture.cc_of("sm_75")


def test_a_declared_profile_shape_keeps_the_model_rows_length_and_is_small():
    """A path's profile shape (where the memory trace runs) keeps every
    dimension of the model shape but the counts of rows, sequences, tokens
    or heads, and reads a small part of the model shape's bytes (or under
    128 KiB, where the model shape itself is that small), or, where no
    shape of few rows keeps every row length (an FFN's gate/up rows are
    its down rows' count; a GDN prefill chunk of the model's 64 tokens on
    128 x 128 state rows takes the simulator some 40 s a block), keeps them
    all and declares the few blocks a launch the trace runs
    (``profile_blocks``). A GEMM keeps its K (the row length) and cuts its
    rows and columns to one whole tile of 128, traced at one block a
    launch (a tile walks the whole K). A path
    whose model shapes are of several kinds keeps each kind's (those it
    has)."""
    from leverctl_kernels.registry import all_paths

    kept = {
        "w4a16.gemv": {"k"},
        "w4a16.gemv_dual": {"k"},
        "attention.paged_decode": {"hq", "hkv", "d"},
        "gdn.decode": {"dk", "dv"},
        "gdn.verify": {"t", "dk", "dv"},
        "gdn.fused_conv": {"dk", "dv", "conv_width"},
        "gdn.proj_gemv_batch": {"m", "k"},
        "lora.proj": {"k", "r"},
        "lora.proj_pool": {"k", "r"},
        "decode.per_sequence": {"mla", "dk", "dv", "hq", "hkv", "d", "r", "p", "qk_dim", "yarn_factor"},
        "attention.mla_decode": {"r", "p", "qk_dim", "yarn_factor"},
        "attention.dflash_contig": {"hq", "hkv", "d", "target_ctas", "min_split_blocks"},
        "attention.decode_graph": {"dk", "dv", "hq", "hkv", "d", "communicator", "lora_pool"},
        # both row lengths, a few blocks a launch traced
        "w4a16.ffn_decode": {"hidden", "inter"},
        "moe.gateup_fp4": {"hidden", "inter"},
        "moe.down_fp4": {"hidden", "inter"},
        "moe.decode_fp8_grouped": {"hidden", "inter"},
        "moe.decode_multi_seq": {"hidden", "inter"},
        "moe.decode_via_prefill": {"hidden", "inter"},
        # the model's gate (its weights' rows and their count): one token, a few blocks a launch traced
        "moe.router": {"hidden", "experts", "top_k"},
        # the model's rows and chunk: two chunks, two blocks a launch traced
        "gdn.prefill": {"dk", "dv", "chunk"},
        "gdn.prefill_multi_stream": {"dk", "dv", "chunk"},
        "mamba2.prefill_scan": {"p", "n"},
        # the model's row length, one whole tile traced: 128 rows (and columns), one block a launch
        "w4a16.gemm": {"k"},
        "ffn.prefill": {"k", "down"},
        "mamba2.prefill_proj": {"k", "out"},
        "attention.proj_bf16_tc": {"k"},
        "attention.proj_bf16_tc_w4a16": {"k"},
        "attention.proj_fp8": {"k"},
        "attention.rotation": {"hidden", "d", "outliers"},
        # the model's experts (a row of logits) and top-k, four rows
        "moe.union_stats": {"experts", "top_k"},
        # the model's expert rows, two experts of one 64-row tile each, two blocks a launch traced
        "moe.prefill_grouped": {"h", "i"},
        "moe.prefill_sorted": {"h", "i"},
        # the shared expert's rows, 128 tokens, one block a launch
        "moe.shared_expert": {"h", "s"},
    }
    sampled = set(kept) - {
        "w4a16.gemv",
        "w4a16.gemv_dual",
        "attention.paged_decode",
        "gdn.decode",
        "gdn.verify",
        "gdn.fused_conv",
        "gdn.proj_gemv_batch",
        "lora.proj",
        "lora.proj_pool",
        "decode.per_sequence",
        "attention.mla_decode",
        "attention.dflash_contig",
        "attention.decode_graph",
        "mamba2.prefill_scan",
        "moe.union_stats",
    }
    declared = {p.name: p for p in all_paths() if "profile_shape" in p.extra}
    assert set(declared) == set(kept), set(declared) ^ set(kept)
    for name, path in declared.items():
        for shape in path.shapes("model", None):
            ps = path.extra["profile_shape"](shape)
            assert all(ps[k] == shape[k] for k in kept[name] if k in shape.dims), (name, ps, shape)
            assert set(kept[name]) & set(shape.dims), (name, shape.label)
            assert (name in sampled) == ("profile_blocks" in path.extra), name
            if name in sampled:
                assert 1 <= path.extra["profile_blocks"] <= 16, name
                continue
            small = path.traffic(ps).bytes
            assert small * 8 <= path.traffic(shape).bytes or small <= 128 * 1024, (name, ps.label, shape.label)


def test_a_gemm_profile_shape_keeps_k_and_cuts_its_tile_to_one_whole_one():
    """Rows and columns cut to 128 (one whole tile of every GEMM here), K
    and the rest kept, the label's sizes rewritten and its first word
    ``profile``; rows already under 128 (a 16-token tile) stay."""
    from leverctl_kernels.common.path import GEMM_PROFILE_TILE, Shape, gemm_profile_shape

    assert GEMM_PROFILE_TILE == 128
    ps = gemm_profile_shape(Shape("down m4096 n4096 k12288", {"m": 4096, "n": 4096, "k": 12288, "down": 1}))
    assert ps.label == "profile down m128 n128 k12288"
    assert dict(ps.dims) == {"m": 128, "n": 128, "k": 12288, "down": 1}
    small = gemm_profile_shape(Shape("model m16 n5120 k2048", {"m": 16, "n": 5120, "k": 2048}))
    assert small.label == "profile m16 n128 k2048" and small["m"] == 16
    rows = gemm_profile_shape(Shape("t1024 h2688 s3712", {"t": 1024, "h": 2688, "s": 3712}), rows="t", cols=None)
    assert rows.label == "profile t128 h2688 s3712" and dict(rows.dims) == {"t": 128, "h": 2688, "s": 3712}


# GEMM engine kernels that keep one warpgroup a block, and why
ONE_WARPGROUP = {
    ("attention.proj_fp8", "m16"): "a 16-token tile: wgmma's narrowest useful N already",
    ("attention.proj_fp8", "m32"): "a 32-token tile: wgmma's narrowest useful N already",
}
DECODE_M = 16  # the grouped GEMMs' decode tile: 16 rows, one warpgroup whose four warps split K


def test_every_gemm_on_the_engine_runs_three_stages_or_more_on_two_consumer_warpgroups(captured):
    """Issue figures held at model shapes: every launch of a kernel on the
    GEMM engine (``async_stages`` set) keeps at least 3 stages of K in
    flight, and every GEMM's block is two consumer warpgroups (one CTA of
    two a SM at least), the MoE family's grouped tiles too (gate and up
    quarters side by side), but for the tiles listed with their reason and
    the grouped GEMMs' decode tile (a few rows a group: 16 rows, its four
    warps splitting K)."""
    seen, grouped, short, narrow = 0, 0, [], []
    for path, variants in captured.items():
        for v, shapes in variants.items():
            for launches in shapes:
                for name, block, _shared, _types, stages, tile_m in launches:
                    if stages is None:
                        continue
                    seen += 1
                    grouped += name == "gemm_grouped" and tile_m == 64
                    if stages < 3:
                        short.append((path, v, name, stages))
                    if tile_m != DECODE_M and (path, v) not in ONE_WARPGROUP and block[0] != 256:
                        narrow.append((path, v, name, block[0]))
    assert seen > 50 and grouped > 10, (seen, grouped)
    assert short == [] and narrow == [], (short, narrow)


def test_the_routed_prefill_profile_shape_gives_each_of_its_two_experts_one_whole_tile():
    """128 tokens dealt evenly over two experts, top-1: 64 rows each, one
    whole tile of the grouped GEMMs; a lever-bound grid's bound (worst case
    or estimate) becomes those 64 rows, so no row is dropped and no block
    of the bounded grid is empty; an exact grid (bound 0) stays exact."""
    import numpy as np

    from leverctl_kernels.common.path import Shape
    from leverctl_kernels.moe._prefill import bounds, inputs
    from leverctl_kernels.moe._prefill import family as F

    model = Shape("x", {"t": 4096, "h": 2688, "i": 1856, "e": 128, "k": 6, "skew": 1, "m_tiles": 512, "zero": 1})
    ps = F.profile_shape(model)
    assert ps.label == "profile uniform t128 e2 top1 h2688 i1856"
    assert dict(ps.dims) == {**model.dims, "t": 128, "e": 2, "k": 1, "skew": 0, "m_tiles": 8}
    ids, _ = inputs.routing(np.random.default_rng(0), ps["t"], ps["e"], ps["k"], False)
    counts = np.bincount(ids.ravel(), minlength=ps["e"])
    assert counts.tolist() == [64, 64] and bounds.rows_lost(counts, ps["m_tiles"]) == 0
    assert F.profile_shape(Shape("x", {**model.dims, "m_tiles": 0}))["m_tiles"] == 0


def test_a_tma_kernels_bytes_in_flight_are_its_stages_ahead_of_boxes():
    """The SASS shows a TMA copy but not its size: the profile takes a
    block's TMA bytes in flight from the kernel (its stages ahead of the
    boxes a stage brings), and adds them to the SM's figure per resident
    block; a kernel without TMA copies adds nothing."""
    from types import SimpleNamespace

    from leverctl.profile import capture, run
    from leverctl_kernels.common.gemm import wgmma_async as G

    kern = G.kernel("bf16", 2, 128, 4)  # A 128 rows and B 128 rows of 128 bytes a stage, 3 stages ahead
    assert capture.tma_bytes(kern) == 3 * 256 * 128
    staged_b = G.kernel("bf16", 1, 64, 4, b_kind="int4_bf16")  # A alone by TMA: 64 rows
    assert capture.tma_bytes(staged_b) == 3 * 64 * 128
    assert capture.tma_bytes(G.kernel("bf16", 2, 128, 4, copy="cp.async")) == 0
    assert capture.tma_bytes(SimpleNamespace(copy="tma")) == 0  # no boxes: not the engine's
    sass = "        /*0000*/                   LDG.E.128 R4, desc[UR4][R2.64] ;\n"
    occ = SimpleNamespace(active_warps=8, blocks=1)
    assert run.in_flight(sass, occ) == {"thread": 16, "sm": 16 * 8 * 32}
    assert run.in_flight(sass, SimpleNamespace(active_warps=16, blocks=2), 98304) == {
        "thread": 16,
        "sm": 16 * 16 * 32 + 2 * 98304,
        "tma_block": 98304,
    }

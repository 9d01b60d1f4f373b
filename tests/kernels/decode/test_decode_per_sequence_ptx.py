"""The kernels ``decode.per_sequence`` launches compile for sm_90 (H200) at
its model shapes, without a GPU (``ptx_harness``), at the argument types a
per-sequence launch passes them: the batched GDN decode at Qwen3-Next's
128 x 128 heads, the paged split and merge at 16 query heads over 2 KV
heads of 256, the MLA decode at DeepSeek-V3's 128 heads of rank 512 + 64
with its YaRN-scaled softmax. No fp64, spills or local memory; registers
and static shared memory within the SM's.

A sequence's batch-1 views are C-contiguous arrays of the batch's dtypes and
ranks, so a per-sequence launch is the same specialisation as the batched
one (``test_decode_per_sequence.py`` checks the launches' argument types in
the simulator); the GDN and paged kernels are listed as their families'
compile tests list them, and the harness compiles a kernel two modules list
alike once.
"""

from __future__ import annotations

import numpy as np
from ptx_harness import check_ptx, check_ptxas, compiled  # noqa: F401 (compiled: the fixture)


def _signatures() -> dict:
    """Each kernel of the step -> the argument types a per-sequence launch
    passes it, taken with numba's own typing from the path's smoke inputs
    viewed as the step views them (``_step``): a sequence's rows."""
    from numba import typeof, types

    from leverctl_kernels.registry import get_path

    path = get_path("decode.per_sequence")
    hybrid, mla = path.shapes("smoke", None)
    rows = slice(1, 2)
    rng = np.random.default_rng(0)

    def view(x, name, layered=True):
        a = x[name][0] if layered else x[name]
        return typeof(np.ascontiguousarray(a)[rows] if a.ndim else a)

    x = path.make_inputs(hybrid, rng)
    x.update({n: np.zeros(s, d) for n, (s, d) in path.outputs(hybrid).items() if n not in x})
    i64, f32 = types.int64, types.float32
    part = types.Array(f32, 4, "C")  # the partials the step allocates: C-contiguous, batch-1 when per sequence
    table = {t: view(x, t, layered=False) for t in ("slots", "block_table", "context_lens")}
    gdn = tuple(view(x, n) for n in ("q", "k", "v", "g", "beta"))
    gdn += (table["slots"], typeof(x["state"][0].reshape(-1)), view(x, "o"))
    cache = typeof(x["k_cache"][0])
    split = (view(x, "aq"), cache, cache, table["block_table"], table["context_lens"], i64, i64, part, part)
    merge = (table["context_lens"], i64, i64, part, part, view(x, "ao"))
    y = path.make_inputs(mla, rng)
    y["o"] = np.zeros(*path.outputs(mla)["o"])
    lat = tuple(view(y, n) for n in ("q_nope", "q_pe", "c_kv", "k_pe"))
    mla_sig = lat + (view(y, "context_lens", layered=False), i64, view(y, "o"))
    return {"gdn": gdn, "split": split, "merge": merge, "mla": mla_sig}


def jobs():
    """(name, dispatcher, signature, threads per block); runs in the compile process."""
    from leverctl_kernels.attention import _paged
    from leverctl_kernels.attention.mla_decode import _mla
    from leverctl_kernels.gdn import _layout
    from leverctl_kernels.gdn.decode import batched as decode_batched
    from leverctl_kernels.registry import get_path

    path = get_path("decode.per_sequence")
    shapes = path.shapes("model", None)
    h = next(s for s in shapes if not s["mla"])
    m = next(s for s in shapes if s["mla"])
    sig = _signatures()
    T, M = h["target_ctas"], h["min_split_blocks"]
    return [
        (
            "step_mla_decode",
            _mla.make_decode(m["h"], m["r"], m["p"], m["qk_dim"], False, _mla.mscale2(m)),
            sig["mla"],
            _mla.threads_for(m["r"]),
        ),
        (
            "step_gdn_decode",
            decode_batched.make_decode_batched(h["dk"], h["dv"]),
            sig["gdn"],
            _layout.tile_for(h["dk"], h["dv"]).threads,
        ),
        (
            "step_split",
            _paged.make_split(h["hkv"], h["hq"] // h["hkv"], h["d"], T, M),
            sig["split"],
            _paged.threads_for(h["d"]),
        ),
        ("step_merge", _paged.make_merge(h["hkv"], h["d"], T, M), sig["merge"], _paged.merge_threads(h["d"])),
    ]


def test_the_steps_kernels_compile_for_sm90_in_fp32(compiled):
    assert set(compiled["kernels"]) == {"step_mla_decode", "step_gdn_decode", "step_split", "step_merge"}
    check_ptx(compiled, fp64=False)


def test_the_steps_registers_spills_and_shared_memory_fit_the_launch(compiled):
    check_ptxas(compiled)

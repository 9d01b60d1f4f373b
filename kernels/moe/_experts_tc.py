"""The routed experts' GEMMs on tensor cores: gate/up with its SiLU product,
and down, over the assignments sorted by expert (``_experts.route_sort``),
on the grouped GEMM engine (``_prefill.grouped``'s launcher:
``common/gemm/grouped.py`` on the ``mma_sync`` form, ``mma.sync`` m16n8k16
fp16 with f32 accumulators, three ``cp.async`` stages, the walking
schedule: one launch computes every row of every expert, however the
routing falls; at decode, a few rows an expert, the engine's 16-row decode
tile, whose four warps split each stage's K). ``moe.gateup_fp4`` and ``moe.down_fp4`` run them at
prefill shapes; the grouped variants of ``moe.decode_fp8_grouped`` and
``moe.decode_via_prefill`` for every shape.

gate/up: sorted assignment ``p``'s A row is ``x[tok[p]]`` (its token,
fp16 as stored, copied asynchronously through the row map); its B tile is
the expert's gate rows and the matching up rows side by side (the engine's
``b_parts = 2``), decoded to fp16 on the way in by the format's stager;
the epilogue writes ``silu(gate) * up`` to ``h[order[p]]``, the
assignment's own row. down: A is ``h[order[p]]`` (float32, rounded once to
fp16 as it enters), each assignment's partial row written to
``ys[order[p]]`` for the combine.

Weights (``_decode``'s formats), and what enters the MMA:

* ``int4``: W4A16 words, ``(q - 8)`` times the fp16 scale of its group of
  128, rounded once to fp16 (``int4_f16``);
* ``nvfp4``: E2M1 times its E4M3 block scale, exact in fp16
  (``nvfp4_f16``); the per-expert tensor scale is applied in f32 by the
  epilogue;
* ``fp8``: E4M3 times its 128 x 128 block's float32 scale, rounded once to
  fp16 (``e4m3_blk_f16``: the scale changes along K, so it cannot wait for
  the epilogue).

A K (``hidden`` for gate/up, ``inter`` for down) must be a multiple of 8
(16-byte fp16 rows); the last stage is zero-filled past it.
"""

from __future__ import annotations

from ._prefill import grouped as G

FORMAT = {"int4": G.INT4, "nvfp4": G.NVFP4, "fp8": G.E4M3_BLOCK}
TENSOR_CORES, TC_DTYPE = G.TENSOR_CORES, G.TC_DTYPE


def _check(FMT: str, what: str, k: int) -> None:
    if FMT not in FORMAT:
        raise ValueError(f"expert weights {FMT!r}: one of {sorted(FORMAT)}")
    if k <= 0 or k % 8:
        raise ValueError(f"{what}={k}: the tensor-core expert GEMMs need a positive multiple of 8 (16-byte fp16 rows)")


def gateup(FMT: str, hidden: int, assignments: int):
    """``launch(h, x, (wa, wb, wc), ws)``: ``h[a] = silu(x W_gate^T) * (x
    W_up^T)`` for every assignment ``a`` of the sorted ``ws`` (``order``,
    ``tok``, ``offsets``); ``assignments`` is ``rows * top_k``."""
    _check(FMT, "hidden", hidden)
    run = G.launcher(G.GROUPED, True, G.SILU_GLU, G.FLOAT, FORMAT[FMT], scatter=True)

    def launch(h, x, w, ws):
        wa, wb, wc = w
        run(h, x, None, None, ws["tok"], wa, wb, wc, ws["offsets"], None, 0, assignments, dest=ws["order"])

    launch.tensor_cores, launch.tc_dtype = TENSOR_CORES, TC_DTYPE
    return launch


def down(FMT: str, inter: int, assignments: int):
    """``launch(ys, h, (wa, wb, wc), ws)``: ``ys[a] = h[a] W_down^T`` for
    every assignment ``a``."""
    _check(FMT, "expert_intermediate", inter)
    run = G.launcher(G.GROUPED, True, G.NONE, G.FLOAT, FORMAT[FMT], scatter=True)

    def launch(ys, h, w, ws):
        wa, wb, wc = w
        order = ws["order"]
        run(ys, h, None, None, order, wa, wb, wc, ws["offsets"], None, 0, assignments, dest=order)

    launch.tensor_cores, launch.tc_dtype = TENSOR_CORES, TC_DTYPE
    return launch

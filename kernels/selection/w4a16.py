"""Decision tables of the W4A16 family: the decode GEMVs, the FFN decode
and the GEMM (``kernels/w4a16/``)."""

from __future__ import annotations

from .rules import Rule, Table, compare, divisible, guard

SMALL_M_MAX_ROWS = 64
TC_K_MULTIPLE = 16  # the tensor-core GEMMs' K step (one m16n8k16 MMA, one wgmma k16)

GEMV = Table(
    path="w4a16.gemv",
    summary="Decode GEMV y = W x (int4 weights, fp16 activations, m = 1)",
    levers=("gemv_sw",),
    variants=("gemv_sw", "gemv_64t"),
    rules=(Rule("gemv_sw", {"gemv_sw": True}), Rule("gemv_64t")),
)

GEMV_DUAL = Table(
    path="w4a16.gemv_dual",
    summary="Decode dual GEMV: gate = W_gate x and up = W_up x in one pass",
    levers=("gemv_sw",),
    variants=("gemv_dual_sw", "gemv_dual_64t"),
    rules=(Rule("gemv_dual_sw", {"gemv_sw": True}), Rule("gemv_dual_64t")),
)

FFN_DECODE = Table(
    path="w4a16.ffn_decode",
    summary="Dense SiLU FFN for one token: y = W_down (silu(W_gate x) * (W_up x))",
    levers=("decode_ffn_via_gemm", "decode_split_silu", "gemv_sw"),
    fixed={"decode_split_silu": False},  # Atlas: always the fused kernel
    variants=("gemv_sw+fused", "gemv_64t+fused", "gemv_sw+split", "gemv_64t+split", "gemm_m1"),
    rules=(
        Rule("gemm_m1", {"decode_ffn_via_gemm": True}),
        Rule("gemv_sw+split", {"decode_split_silu": True, "gemv_sw": True}),
        Rule("gemv_64t+split", {"decode_split_silu": True}),
        Rule("gemv_sw+fused", {"gemv_sw": True}),
        Rule("gemv_64t+fused"),
    ),
)

_SMALL_M_ROWS = compare("m", "<=", SMALL_M_MAX_ROWS, why="m={m} > {bound}")
_NO_TC_K = guard(divisible("k", TC_K_MULTIPLE))

# small_m and default_tiles run on tensor cores (mma.sync or wgmma, the one
# `common/tc.py` picks), which step K by 16 and have no K edge; fma_tiles is
# the FP32-FMA GEMM they replaced, kept for the shapes they cannot run.
GEMM = Table(
    path="w4a16.gemm",
    summary="W4A16 GEMM c = a W^T (FFN projections of a batch) on tensor cores",
    levers=("ffn_small_m",),
    variants=("small_m", "default_tiles", "fma_tiles"),
    rules=(
        Rule(
            "fma_tiles",
            {},
            (_NO_TC_K,),
            note=f"the tensor-core GEMMs step K by {TC_K_MULTIPLE}: FP32-FMA tiles whatever ffn_small_m says",
        ),
        Rule("default_tiles", {"ffn_small_m": False}),
        Rule("small_m", {}, (_SMALL_M_ROWS,)),
        Rule("default_tiles", note="ffn_small_m is on but {unmet}: default tiles"),
    ),
)

TABLES = (GEMV, GEMV_DUAL, FFN_DECODE, GEMM)

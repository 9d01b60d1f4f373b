"""Decision tables of the MoE family: the routed-expert decode paths of
Qwen3-Next (512 experts, top-10), the routed grouped prefill, and
Nemotron's sorted prefill and shared expert (``kernels/moe/``).

The router's two Metrale levers are ordered as the engine's gate reads
them: an active fp32_routing hands the gate an FP32 input and implies FP32
logits, so it wins over fp32_gate; fp32_routing is the last of five
conditions, the other four being properties of the layer's weights and
kernels, which this project takes as met. The holo levers choose the weight
format of each stage on its own, so each stage is a path of its own.
"""

from __future__ import annotations

from .rules import Rule, Table, compare, flag

ROUTER = Table(
    path="moe.router",
    summary="MoE router: gate GEMM x Wg^T, softmax over the experts, top-k with renormalised weights",
    levers=("fp32_routing", "fp32_gate"),
    variants=("bf16", "fp32_gate", "fp32_routing"),
    engines=("metrale",),
    rules=(
        Rule(
            "fp32_routing",
            {"fp32_routing": True},
            note="fp32_routing: an FP32 router input and FP32 logits (the layer's four other conditions taken as met)",
        ),
        Rule("fp32_gate", {"fp32_gate": True}),
        Rule("bf16"),
    ),
)

GATEUP_FP4 = Table(
    path="moe.gateup_fp4",
    summary="routed experts' gate and up projections and their SiLU product: int4 (W4A16) or NVFP4 weights",
    levers=("holo_moe_gateup_fp4",),
    variants=("int4", "nvfp4"),
    engines=("atlas", "metrale"),
    rules=(Rule("nvfp4", {"holo_moe_gateup_fp4": True}), Rule("int4")),
)

DOWN_FP4 = Table(
    path="moe.down_fp4",
    summary="routed experts' down projection, weighted sum over each row's experts: int4 (W4A16) or NVFP4 weights",
    levers=("holo_moe_down_fp4",),
    variants=("int4", "nvfp4"),
    engines=("atlas", "metrale"),
    rules=(Rule("nvfp4", {"holo_moe_down_fp4": True}), Rule("int4")),
)

_MULTI_ROW = compare("rows", ">", 1, least=1, why="{rows} row: nothing to group across rows")

DECODE_FP8_GROUPED = Table(
    path="moe.decode_fp8_grouped",
    summary="multi-row FP8 MoE decode (target model): cross-row grouped kernels vs per-row kernels",
    levers=("moe_fp8_grouped_decode_target",),
    variants=("grouped", "per_row"),
    engines=("metrale",),
    rules=(
        Rule("grouped", {"moe_fp8_grouped_decode_target": True}, (_MULTI_ROW,)),
        Rule(
            "per_row",
            {"moe_fp8_grouped_decode_target": True},
            note="moe_fp8_grouped_decode_target is on but {unmet}: the per-row kernels",
        ),
        Rule("per_row"),
    ),
)

DECODE_MULTI_SEQ = Table(
    path="moe.decode_multi_seq",
    summary="multi-sequence MoE decode: token-major launches over the batch vs the legacy per-token path",
    levers=("moe_legacy_pertoken_decode",),
    variants=("token_major", "per_token"),
    engines=("metrale",),
    rules=(
        Rule(
            "per_token",
            {"moe_legacy_pertoken_decode": True},
            note="moe_legacy_pertoken_decode: the MoE kernels launched once per token of the batch",
        ),
        Rule("token_major"),
    ),
)

_CAPTURE_LAYER = flag(
    "capture_layer",
    on="DFlash capture layer",
    off="not a capture layer",
    default=0,
    why="the layer is not a DFlash capture layer",
)

DECODE_VIA_PREFILL = Table(
    path="moe.decode_via_prefill",
    summary="one row's MoE decode: the decode kernels vs the prefill path (expert-sorted rows) on capture layers",
    levers=("frankenstein_decode_via_prefill",),
    variants=("decode", "prefill"),
    engines=("metrale",),
    rules=(
        Rule(
            "prefill",
            {"frankenstein_decode_via_prefill": True},
            (_CAPTURE_LAYER,),
            note="frankenstein_decode_via_prefill on a DFlash capture layer: the prefill path with one row",
        ),
        Rule(
            "decode",
            {"frankenstein_decode_via_prefill": True},
            note="frankenstein_decode_via_prefill is on but {unmet}: the decode kernels",
        ),
        Rule("decode"),
    ),
)

UNION_STATS = Table(
    path="moe.union_stats",
    summary="top-k routing of a batch, with or without counting the distinct experts it touches",
    levers=("moe_union_stats",),
    variants=("off", "on"),
    engines=("atlas", "metrale"),
    rules=(
        Rule(
            "on",
            {"moe_union_stats": True},
            note="moe_union_stats: a counting kernel follows the top-k (a diagnostic's cost)",
        ),
        Rule("off"),
    ),
    binds={
        "moe_union_stats": "adds the union counts to the outputs (the record's shape says stats = 1), "
        "checked exactly against the reference's"
    },
)

# ── prefill (Metrale: routed grouped prefill, Nemotron sorted prefill and shared expert) ──
#
# The routed prefill sorts its rows by expert and runs gate/up, then down,
# as grouped GEMMs. ``moe_grouped_cutlass`` puts gate/up on the
# single-launch grouped NVFP4 GEMM (exact per-expert sizes on the device,
# so every row is computed); ``moe_grouped_down`` puts down there too and
# needs it; ``moe_prefill_fp8_down`` puts down on the FP8 grouped GEMM when
# that kernel and its BF16-to-FP8 conversion are loaded (a shape input
# here, ``fp8_loaded``). The seed does not order the two down levers;
# leverctl's decision: the grouped NVFP4 down (which asks for gate/up's route
# as well) comes first, then FP8. Every GEMM not on the single-launch route
# runs on a grid sized by the per-expert tile bound, which the other three
# levers set (``binds``: the same kernels, a different grid or scratch).

_FP8_LOADED = flag(
    "fp8_loaded",
    on="FP8 grouped GEMM loaded",
    off="FP8 grouped GEMM not loaded",
    default=1,
    why="the FP8 grouped GEMM and its BF16-to-FP8 kernel are not loaded",
)

PREFILL_GROUPED = Table(
    path="moe.prefill_grouped",
    summary="routed MoE prefill, rows sorted by expert: single-launch grouped NVFP4 GEMMs or the tile-bounded "
    "grouped GEMMs, down optionally in FP8",
    levers=(
        "moe_grouped_cutlass",
        "moe_grouped_down",
        "moe_prefill_fp8_down",
        "moe_prefill_exact_tiles",
        "moe_prefill_max_load_factor",
        "moe_prefill_zero",
    ),
    variants=("grouped", "grouped+fp8_down", "grouped+bounded_down", "bounded+fp8_down", "bounded"),
    engines=("metrale",),
    rules=(
        Rule("grouped", {"moe_grouped_cutlass": True, "moe_grouped_down": True}),
        Rule("grouped+fp8_down", {"moe_grouped_cutlass": True, "moe_prefill_fp8_down": True}, (_FP8_LOADED,)),
        Rule(
            "grouped+bounded_down",
            {"moe_grouped_cutlass": True, "moe_prefill_fp8_down": True},
            note="moe_prefill_fp8_down is on but {unmet}: down on the tile-bounded grouped GEMM",
        ),
        Rule("grouped+bounded_down", {"moe_grouped_cutlass": True}),
        Rule(
            "bounded+fp8_down",
            {"moe_grouped_down": True, "moe_prefill_fp8_down": True},
            (_FP8_LOADED,),
            note="moe_grouped_down needs moe_grouped_cutlass: down through the FP8 grouped GEMM",
        ),
        Rule("bounded+fp8_down", {"moe_prefill_fp8_down": True}, (_FP8_LOADED,)),
        Rule(
            "bounded",
            {"moe_grouped_down": True, "moe_prefill_fp8_down": True},
            note="moe_grouped_down needs moe_grouped_cutlass, and moe_prefill_fp8_down is on but {unmet}: "
            "both projections on the tile-bounded route",
        ),
        Rule(
            "bounded",
            {"moe_grouped_down": True},
            note="moe_grouped_down needs moe_grouped_cutlass: both projections on the tile-bounded route",
        ),
        Rule(
            "bounded",
            {"moe_prefill_fp8_down": True},
            note="moe_prefill_fp8_down is on but {unmet}: down on the tile-bounded grouped GEMM",
        ),
        Rule("bounded"),
    ),
    binds={
        "moe_prefill_exact_tiles": "sizes the tile-bounded GEMMs' grid from the routing's largest count, read "
        "back from the device (1), or not (0); unset: on for NVFP4 experts, off "
        "otherwise; graph capture forces it off",
        "moe_prefill_max_load_factor": "with exact tiles off, caps the tile bound at n times the average rows per "
        "expert (unset: every token on one expert); an expert routed more rows "
        "than the cap leaves the excess uncomputed",
        "moe_prefill_zero": "zeroes the gate/up and down scratch before the GEMMs; without it a row the tile "
        "bound skipped reaches the combine as whatever the scratch held",
    },
)

# Nemotron's sorted prefill: squared-ReLU experts, the up projection's
# activations in fp16, or quantised to NVFP4 (``moe_w4a4``) where the MoE
# input is a latent projection and the batch has 512 rows or more.
W4A4_MIN_ROWS = 512

_LATENT = flag(
    "latent",
    on="latent MoE input",
    off="no latent MoE input",
    default=0,
    why="the model's MoE input is not a latent projection",
)
_ROWS_512 = compare("t", ">=", W4A4_MIN_ROWS, symbol="n", why="n={t} < {bound} rows")

PREFILL_SORTED = Table(
    path="moe.prefill_sorted",
    summary="Nemotron sorted MoE prefill (squared-ReLU experts, NVFP4 weights): up projection on fp16 or "
    "NVFP4 activations, M-tile grid from the worst case or an estimate",
    levers=("moe_w4a4", "moe_max_m_tiles_estimate", "moe_zero_intermediates"),
    variants=("a16", "w4a4_up"),
    engines=("metrale",),
    rules=(
        Rule("w4a4_up", {"moe_w4a4": True}, (_LATENT, _ROWS_512)),
        Rule("a16", {"moe_w4a4": True}, note="moe_w4a4 is on but {unmet}: the up projection reads fp16"),
        Rule("a16"),
    ),
    binds={
        "moe_max_m_tiles_estimate": "sizes the grouped GEMMs' M-tile grid from twice the average rows per expert "
        "instead of every token on one expert; an expert routed more rows leaves "
        "the excess uncomputed",
        "moe_zero_intermediates": "zeroes the expert up and down outputs before the grouped GEMMs; without it a "
        "row the grid skipped reaches the combine as whatever they held",
    },
)

# The shared expert (Nemotron): up and down each on W4A4 (activations to
# NVFP4 per GEMM) from 512 rows up, independently; the up projection not
# where the model carries a native FP8 shared-up weight.
_NO_FP8_SHARED_UP = flag(
    "fp8_shared_up",
    on="a native FP8 shared-up weight",
    off="no native FP8 shared-up weight",
    want=False,
    default=0,
    why="the model uses a native FP8 shared-up weight",
)

SHARED_EXPERT = Table(
    path="moe.shared_expert",
    summary="Nemotron shared expert (squared ReLU, NVFP4 weights): up and down on fp16 or NVFP4 (W4A4) activations",
    levers=("shared_w4a4", "shared_w4a4_down"),
    variants=("a16", "w4a4_up", "w4a4_down", "w4a4"),
    engines=("metrale",),
    rules=(
        Rule("w4a4", {"shared_w4a4": True, "shared_w4a4_down": True}, (_ROWS_512, _NO_FP8_SHARED_UP)),
        Rule(
            "w4a4_down",
            {"shared_w4a4": True, "shared_w4a4_down": True},
            (_ROWS_512,),
            note="shared_w4a4 is on but {unmet}: only the down projection takes W4A4",
        ),
        Rule("w4a4_down", {"shared_w4a4_down": True}, (_ROWS_512,)),
        Rule("w4a4_up", {"shared_w4a4": True}, (_ROWS_512, _NO_FP8_SHARED_UP)),
        Rule("a16", {"shared_w4a4": True}, note="shared_w4a4 is on but {unmet}: both projections read fp16"),
        Rule("a16", {"shared_w4a4_down": True}, note="shared_w4a4_down is on but {unmet}: both projections read fp16"),
        Rule("a16"),
    ),
)

TABLES = (
    ROUTER,
    GATEUP_FP4,
    DOWN_FP4,
    DECODE_FP8_GROUPED,
    DECODE_MULTI_SEQ,
    DECODE_VIA_PREFILL,
    UNION_STATS,
    PREFILL_GROUPED,
    PREFILL_SORTED,
    SHARED_EXPERT,
)

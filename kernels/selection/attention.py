"""Decision tables of the attention family: paged decode, weight
pre-rotation, the decode step as a CUDA graph, the DFlash draft block, MLA
decode and the prefill projections (``kernels/attention/``)."""

from __future__ import annotations

from .rules import Rule, Table, compare, flag

# Shared with the per-sequence decode table (``selection.decode``).
HAS_HC = compare("hc_mult", ">", 0, least=0, default=0, why="the model has no hyper-connections (hc_mult = {hc_mult})")

PAGED_DECODE = Table(
    path="attention.paged_decode",
    summary="paged GQA decode attention, split-K online softmax and a merge kernel",
    levers=("hc_perseq_decode", "max_decode_seqs", "kv_poison"),
    # Atlas has no per-sequence decode lever: its batch always decodes in one launch.
    fixed={"hc_perseq_decode": False},
    variants=("split_pinned", "per_sequence", "split_live_batch"),
    engines=("atlas", "metrale"),
    rules=(
        Rule(
            "per_sequence",
            {"hc_perseq_decode": True},
            (HAS_HC,),
            note="hc_perseq_decode: one launch pair per sequence of the batch",
        ),
        Rule(
            "split_pinned",
            {"hc_perseq_decode": True},
            note="hc_perseq_decode is on but {unmet}: the batch decodes in one launch",
        ),
        Rule("split_pinned"),
    ),
    baselines=("split_live_batch",),
    binds={
        "max_decode_seqs": "pins the split-K count: each sequence's split count follows from its own "
        "length and this value, never from the live batch, so a sequence decoded alone "
        "gets the bits it gets co-batched",
        "kv_poison": "fills the unwritten slots of each sequence's fresh tail KV block with NaN (Atlas) "
        "or 0xFF bytes (Metrale) instead of zeros; a kernel reading them turns NaN",
    },
)

# ── weight pre-rotation (Metrale) ──────────────────────────────────────────

ROTATION_HEAD_DIM = 128  # the only head dim the engine's loader rotates at

_ROT_D128 = compare("d", "=", ROTATION_HEAD_DIM, why="the loader rotates weights only at head dim {bound} (d = {d})")

ROTATION = Table(
    path="attention.rotation",
    summary="rotated q, k, v and the FP8 KV-cache write: weights rotated at load vs a run-time Hadamard",
    levers=("weight_pre_rotated",),
    variants=("pre_rotated", "runtime_rotation"),
    engines=("metrale",),
    rules=(
        Rule("pre_rotated", {"weight_pre_rotated": True}, (_ROT_D128,)),
        Rule(
            "runtime_rotation",
            {"weight_pre_rotated": True},
            note="weight_pre_rotated is on but {unmet}: the KV-cache write rotates at run time",
        ),
        Rule("runtime_rotation"),
    ),
)

# ── the decode step as a CUDA graph (Metrale) ──────────────────────────────

_COMM = flag("communicator", on="communicator", off="no communicator", why="no expert-parallel communicator", default=0)
_LORA = flag("lora_pool", on="LoRA pool loaded", off="no LoRA pool", why="no LoRA pool is loaded", default=0)

DECODE_GRAPH = Table(
    path="attention.decode_graph",
    summary="one decode step (GDN decode + paged attention per layer): CUDA graph replay vs eager launches",
    levers=("ep_graphs", "gdn_decode_graph", "ms_profile", "lora_eager"),
    variants=("graph", "eager"),
    engines=("metrale",),
    rules=(
        Rule(
            "eager",
            {"ms_profile": True},
            note="ms_profile: its profiling syncs are illegal inside a capture, so the step runs eagerly",
        ),
        Rule("eager", {"lora_eager": True}, (_LORA,), note="lora_eager with a LoRA pool loaded: the step runs eagerly"),
        Rule(
            "eager",
            {"ep_graphs": False, "gdn_decode_graph": False},
            (_COMM,),
            note="an expert-parallel communicator is present and neither ep_graphs nor "
            "gdn_decode_graph permits capture: the step runs eagerly",
        ),
        Rule("graph"),
    ),
)

# The DFlash draft head's block-layer attention. Both engines' lever is a
# plain opt-in with nothing else to satisfy: on, the contiguous-KV forward;
# off, the paged one.
DFLASH_CONTIG = Table(
    path="attention.dflash_contig",
    summary="DFlash draft block attention: T causal draft queries over the target's GQA context",
    levers=("dflash_contig_attn",),
    variants=("paged", "contig"),
    engines=("atlas", "metrale"),
    rules=(
        Rule("contig", {"dflash_contig_attn": True}),
        Rule("paged"),
    ),
)

# MLA decode (latent KV): Metrale's fallback decodes the batch one sequence
# at a time. Every shape of this path is an MLA model, so the lever alone decides.
MLA_DECODE = Table(
    path="attention.mla_decode",
    summary="MLA decode attention in the latent space (absorbed query weights), latent + rotary KV cache",
    levers=("mla_perseq_fallback",),
    variants=("batched", "per_sequence"),
    engines=("metrale",),
    rules=(
        Rule(
            "per_sequence",
            {"mla_perseq_fallback": True},
            note="mla_perseq_fallback: one launch per sequence of the batch",
        ),
        Rule("batched"),
    ),
)

# ── prefill q/k/v projections; the FP8 projection GEMM ─────────────────────

PROJ_BF16_TC = Table(
    path="attention.proj_bf16_tc",
    summary="prefill q/k/v projection, NVFP4 weights: BF16 tensor cores vs activations crushed to FP8",
    levers=("bf16_tc_proj",),
    variants=("bf16_tc", "fp8_e4m3"),
    engines=("atlas",),
    rules=(
        Rule("bf16_tc", {"bf16_tc_proj": True}),
        Rule("fp8_e4m3", note="bf16_tc_proj off: activations crushed to FP8 E4M3 (one scale per token), FP8 MMA"),
    ),
)

PROJ_BF16_TC_W4A16 = Table(
    path="attention.proj_bf16_tc_w4a16",
    summary="prefill q/k/v projection, int4 weights: W4A16 BF16 GEMM with 128 x 128 tiles vs the default GEMM",
    levers=("bf16_tc_proj",),
    variants=("bf16_n128", "w4a16_f16"),
    engines=("metrale",),
    rules=(
        Rule("bf16_n128", {"bf16_tc_proj": True}),
        Rule("w4a16_f16", note="bf16_tc_proj off: the default projection GEMM (fp16 activations)"),
    ),
)

FP8_M32_ABOVE_ROWS = 16  # the 32-row twin takes batches of more than 16 rows

_ROWS_ABOVE_16 = compare("m", ">", FP8_M32_ABOVE_ROWS, symbol="rows", why="{m} rows, not more than {bound}")

PROJ_FP8 = Table(
    path="attention.proj_fp8",
    summary="FP8 E4M3 projection GEMM (per-channel weight scales): 32-row tensor-core twin vs 16-row kernel",
    levers=("fp8_attn_m32",),
    variants=("m16", "m32"),
    engines=("metrale",),
    rules=(
        Rule("m32", {"fp8_attn_m32": True}, (_ROWS_ABOVE_16,)),
        Rule("m16", {"fp8_attn_m32": True}, note="fp8_attn_m32 is on but {unmet}: the 16-row kernel"),
        Rule("m16"),
    ),
)

TABLES = (PAGED_DECODE, DFLASH_CONTIG, MLA_DECODE, ROTATION, DECODE_GRAPH, PROJ_BF16_TC, PROJ_BF16_TC_W4A16, PROJ_FP8)

"""An independent statement of both engines' lever rules, for property tests.

Written from the engines' own field documentation, one line per field, without
looking at (or importing) leverctl's kinds or catalogs: if leverctl's data or
code drift from what the engines do, the two disagree and a test fails.

An environment here is a dict of variable -> str, or -> bytes for a value that
is not valid UTF-8. ``text(env, var)`` is what Rust's ``std::env::var(var).ok()``
yields (None when unset *or* not UTF-8); ``has(env, var)`` is
``std::env::var_os(var).is_some()``.
"""

from __future__ import annotations

import re
from typing import Any, Callable

Env = dict


def text(env: Env, var: str) -> str | None:
    v = env.get(var)
    if v is None:
        return None
    if isinstance(v, bytes):
        try:
            return v.decode("utf-8")
        except UnicodeDecodeError:
            return None
    try:
        v.encode("utf-8")  # a str with lone surrogates came from undecodable bytes
    except UnicodeEncodeError:
        return None
    return v


def has(env: Env, var: str) -> bool:
    return var in env


def rust_usize(s: str | None) -> int | None:
    """``s.parse::<usize>().ok()`` on a 64-bit target."""
    if s is None or not re.fullmatch(r"\+?[0-9]+", s, flags=re.ASCII):
        return None
    n = int(s)
    return n if n < 2**64 else None


def _is1(env, var):
    return text(env, var) == "1"


def _not0(env, var):
    return text(env, var) != "0"


def _not1(env, var):
    return text(env, var) != "1"


def _one_or_true_any_case(env, var):
    v = text(env, var)
    return v is not None and (v == "1" or (len(v) == 4 and v.encode("ascii", "replace").lower() == b"true"))


def _one_or_true_exact(env, var):
    return text(env, var) in ("1", "true")


def _drafter(env, off_var, prefill_var):
    # The seeds name the two variables and say the halves are coupled (carry
    # implies prefill); they do not print the parser. This is the project's
    # reading: each switch fires on the exact string 1, and "off" wins.
    if text(env, off_var) == "1":
        return {"prefill": False, "carry": False}
    if text(env, prefill_var) == "1":
        return {"prefill": True, "carry": False}
    return {"prefill": True, "carry": True}


def _shadow(env, var):
    n = rust_usize(text(env, var))
    return 0 if n is None else min(n, 8)


Rule = Callable[[Env], Any]

# ── Atlas: spark_model/layers/ops/model_levers.rs, from_values() ────────────
ATLAS: dict[str, Rule] = {
    "max_decode_seqs": lambda e: 1,
    "shadow_topk": lambda e: _shadow(e, "ATLAS_MTP_SHADOW_TOPK"),
    "kv_poison": lambda e: _is1(e, "ATLAS_KV_POISON"),
    "drafter": lambda e: _drafter(e, "ATLAS_NO_DRAFTER_CONTEXT", "ATLAS_DRAFTER_PREFILL_ONLY"),
    "gdn_regresident": lambda e: _not1(e, "ATLAS_NO_GDN_REGRESIDENT"),
    "gdn_batched_fla": lambda e: _is1(e, "ATLAS_GDN_BATCHED_FLA"),
    "gdn_wy17": lambda e: _not0(e, "ATLAS_GDN_WY17"),
    "gdn_wyn": lambda e: _not0(e, "ATLAS_GDN_WYN"),
    "ffn_small_m": lambda e: _not0(e, "ATLAS_FFN_SMALLM"),
    "gemv_sw": lambda e: _not1(e, "ATLAS_NO_GEMV_SW"),
    "decode_ffn_via_gemm": lambda e: _is1(e, "ATLAS_DECODE_FFN_VIA_GEMM"),
    "holo_moe_down_fp4": lambda e: _one_or_true_any_case(e, "ATLAS_HOLO_MOE_DOWN_FP4"),
    "holo_moe_gateup_fp4": lambda e: _one_or_true_any_case(e, "ATLAS_HOLO_MOE_GATEUP_FP4"),
    "moe_union_stats": lambda e: _is1(e, "ATLAS_MOE_UNION_STATS"),
    "dflash_contig_attn": lambda e: _is1(e, "ATLAS_DFLASH_CONTIG_ATTN"),
    "lora_eager": lambda e: _one_or_true_any_case(e, "ATLAS_LORA_EAGER"),
    "lora_rotate": lambda e: _one_or_true_any_case(e, "ATLAS_LORA_ROTATE"),
    "k4_diag": lambda e: _is1(e, "ATLAS_K4_DIAG"),
    "gemma4_diag": lambda e: _one_or_true_any_case(e, "ATLAS_DIAG_GEMMA4"),
    "bf16_tc_proj": lambda e: has(e, "ATLAS_BF16_TC_PROJ"),
}

ATLAS_VARS = (
    "ATLAS_MTP_SHADOW_TOPK",
    "ATLAS_KV_POISON",
    "ATLAS_NO_DRAFTER_CONTEXT",
    "ATLAS_DRAFTER_PREFILL_ONLY",
    "ATLAS_NO_GDN_REGRESIDENT",
    "ATLAS_GDN_BATCHED_FLA",
    "ATLAS_GDN_WY17",
    "ATLAS_GDN_WYN",
    "ATLAS_FFN_SMALLM",
    "ATLAS_NO_GEMV_SW",
    "ATLAS_DECODE_FFN_VIA_GEMM",
    "ATLAS_HOLO_MOE_DOWN_FP4",
    "ATLAS_HOLO_MOE_GATEUP_FP4",
    "ATLAS_MOE_UNION_STATS",
    "ATLAS_DFLASH_CONTIG_ATTN",
    "ATLAS_LORA_EAGER",
    "ATLAS_LORA_ROTATE",
    "ATLAS_K4_DIAG",
    "ATLAS_DIAG_GEMMA4",
    "ATLAS_BF16_TC_PROJ",
)


def _load_factor(env):
    n = rust_usize(text(env, "METRALE_MOE_PREFILL_MAX_LOAD_FACTOR"))
    return None if n in (None, 0) else n


def _exact_tiles(env):
    v = text(env, "METRALE_MOE_PREFILL_EXACT_TILES")
    return True if v == "1" else False if v == "0" else None


def _split_silu(build_declares: bool | None):
    # On when the build's [defaults] says so (undeclared inherits on), unless
    # the kill variable is present with any value.
    base = True if build_declares is None else build_declares
    return lambda e: base and not has(e, "METRALE_NO_DECODE_SPLIT_SILU")


# ── Metrale: metrale_model_layers/layers/ops/model_levers.rs, field docs ────
METRALE: dict[str, Rule] = {
    "gdn_regresident": lambda e: _not1(e, "METRALE_NO_GDN_REGRESIDENT"),
    "gdn_batched_fla": lambda e: _is1(e, "METRALE_GDN_BATCHED_FLA"),
    "gdn_wy17": lambda e: _not0(e, "METRALE_GDN_WY17"),
    "gdn_wyn": lambda e: _not0(e, "METRALE_GDN_WYN"),
    "gemv_sw": lambda e: _not1(e, "METRALE_NO_GEMV_SW"),
    "decode_ffn_via_gemm": lambda e: _is1(e, "METRALE_DECODE_FFN_VIA_GEMM"),
    "ffn_small_m": lambda e: _not0(e, "METRALE_FFN_SMALLM"),
    "holo_moe_down_fp4": lambda e: _one_or_true_any_case(e, "METRALE_HOLO_MOE_DOWN_FP4"),
    "holo_moe_gateup_fp4": lambda e: _one_or_true_any_case(e, "METRALE_HOLO_MOE_GATEUP_FP4"),
    "moe_union_stats": lambda e: _is1(e, "METRALE_MOE_UNION_STATS"),
    "fp32_routing": lambda e: _is1(e, "METRALE_FP32_ROUTING"),
    "fp32_gate": lambda e: _is1(e, "METRALE_FP32_GATE"),
    "frankenstein_decode_via_prefill": lambda e: _is1(e, "METRALE_FRANKENSTEIN_DECODE_VIA_PREFILL"),
    "k2_diag": lambda e: _is1(e, "METRALE_K2_DIAG"),
    "decode_split_silu": _split_silu(None),
    "bf16_tc_prefill": lambda e: has(e, "METRALE_BF16_TC_PREFILL"),
    "fp8_m64_prefill": lambda e: has(e, "METRALE_FP8_M64_PREFILL"),
    "int8_prefill": lambda e: has(e, "METRALE_INT8_PREFILL"),
    "int8_faith5": lambda e: has(e, "METRALE_INT8_FAITH5"),
    "ffn_nvfp4_mmq": lambda e: not has(e, "METRALE_NO_FFN_NVFP4_MMQ"),
    "ffn_nvfp4_mmq_down": lambda e: not has(e, "METRALE_NO_FFN_NVFP4_MMQ_DOWN"),
    "ffn_mmq": lambda e: has(e, "METRALE_FFN_MMQ"),
    "ffn_mmq_down_q4k": lambda e: has(e, "METRALE_FFN_MMQ_DOWN_Q4K"),
    "fp4_prefill": lambda e: has(e, "METRALE_FP4_PREFILL"),
    "prefill_v2": lambda e: not has(e, "METRALE_DISABLE_PREFILL_V2"),
    "moe_grouped_cutlass": lambda e: _is1(e, "METRALE_HOLO_MOE_GROUPED_CUTLASS"),
    "moe_grouped_down": lambda e: _is1(e, "METRALE_HOLO_MOE_GROUPED_DOWN"),
    "moe_prefill_exact_tiles": _exact_tiles,
    "moe_prefill_max_load_factor": _load_factor,
    "moe_prefill_zero": lambda e: _is1(e, "METRALE_MOE_PREFILL_ZERO"),
    "moe_prefill_fp8_down": lambda e: _is1(e, "METRALE_MOE_PREFILL_FP8_DOWN"),
    "ssm_w4a4": lambda e: not has(e, "METRALE_NO_SSM_W4A4"),
    "ssd": lambda e: not has(e, "METRALE_NO_SSD"),
    "ssm_persistent": lambda e: not has(e, "METRALE_NO_SSM_PERSISTENT"),
    "moe_zero_intermediates": lambda e: not has(e, "METRALE_MOE_NO_ZERO_INTERMEDIATES"),
    "moe_max_m_tiles_estimate": lambda e: has(e, "METRALE_MOE_MAX_M_TILES_ESTIMATE"),
    "moe_w4a4": lambda e: has(e, "METRALE_MOE_W4A4"),
    "shared_w4a4": lambda e: not has(e, "METRALE_NO_SHARED_W4A4"),
    "shared_w4a4_down": lambda e: has(e, "METRALE_SHARED_W4A4_DOWN"),
    "dflash_contig_attn": lambda e: _is1(e, "METRALE_DFLASH_CONTIG_ATTN"),
    "lora_eager": lambda e: _one_or_true_any_case(e, "METRALE_LORA_EAGER"),
    "lora_rotate": lambda e: _one_or_true_any_case(e, "METRALE_LORA_ROTATE"),
    "k4_diag": lambda e: _is1(e, "METRALE_K4_DIAG"),
    "gemma4_diag": lambda e: _one_or_true_any_case(e, "METRALE_DIAG_GEMMA4"),
    "dflash_debug_dump_full": lambda e: _is1(e, "METRALE_DFLASH_DEBUG_DUMP_FULL"),
    "mtp_debug_norms": lambda e: _is1(e, "METRALE_MTP_DEBUG_NORMS"),
    "mtp_chain_postnorm": lambda e: _is1(e, "METRALE_MTP_CHAIN_POSTNORM"),
    "mtp_target_postnorm": lambda e: _is1(e, "METRALE_MTP_TARGET_POSTNORM"),
    "mtp_kv_exact": lambda e: _is1(e, "METRALE_MTP_KV_EXACT"),
    "moe_fp8_grouped_decode_target": lambda e: (
        _is1(e, "METRALE_FP8_MOE_GROUPED_DECODE") and not has(e, "METRALE_NO_FP8_MOE_GROUPED_DECODE")
    ),
    "fp8_attn_m32": lambda e: _is1(e, "METRALE_FP8_ATTN_M32"),
    "ssm_save_dump": lambda e: has(e, "METRALE_SSM_SAVE_DUMP"),
    "mla_perseq_fallback": lambda e: _one_or_true_exact(e, "METRALE_MLA_PERSEQ_FALLBACK"),
    "hc_perseq_decode": lambda e: _is1(e, "METRALE_HC_PERSEQ_DECODE"),
    "decode_batch_log": lambda e: _is1(e, "METRALE_DECODE_BATCH_LOG"),
    "ms_profile": lambda e: _is1(e, "METRALE_MS_PROFILE"),
    "conc_hsd": lambda e: _one_or_true_exact(e, "METRALE_CONC_HSD"),
    "ep_graphs": lambda e: _one_or_true_exact(e, "METRALE_EP_GRAPHS"),
    "gdn_decode_graph": lambda e: _one_or_true_exact(e, "METRALE_GDN_DECODE_GRAPH"),
    "bf16_tc_proj": lambda e: has(e, "METRALE_BF16_TC_PROJ"),
    "weight_pre_rotated": lambda e: _one_or_true_any_case(e, "TQ_PLUS_WEIGHT_ROTATION"),
    "ssm_ms_profile": lambda e: _is1(e, "METRALE_SSM_MS_PROFILE"),
    "ssm_detail_profile": lambda e: _is1(e, "METRALE_SSM_DETAIL_PROFILE"),
    "ssm_gemv_batch4": lambda e: _not0(e, "METRALE_SSM_GEMV_BATCH4"),
    "gdn_fused_conv": lambda e: _is1(e, "METRALE_GDN_FUSED_CONV"),
    "moe_legacy_pertoken_decode": lambda e: _is1(e, "METRALE_MOE_LEGACY_PERTOKEN_DECODE"),
    "max_decode_seqs": lambda e: 1,
    "shadow_topk": lambda e: _shadow(e, "METRALE_MTP_SHADOW_TOPK"),
    "kv_poison": lambda e: _is1(e, "METRALE_KV_POISON"),
    "drafter": lambda e: _drafter(
        e, "METRALE_NO_MTP_DRAFTER_CONTEXT", "METRALE_MTP_DRAFTER_CONTEXT_PREFILL_ONLY_UNSAFE"
    ),
}

METRALE_VARS = (
    "METRALE_NO_GDN_REGRESIDENT",
    "METRALE_GDN_BATCHED_FLA",
    "METRALE_GDN_WY17",
    "METRALE_GDN_WYN",
    "METRALE_NO_GEMV_SW",
    "METRALE_DECODE_FFN_VIA_GEMM",
    "METRALE_FFN_SMALLM",
    "METRALE_HOLO_MOE_DOWN_FP4",
    "METRALE_HOLO_MOE_GATEUP_FP4",
    "METRALE_MOE_UNION_STATS",
    "METRALE_FP32_ROUTING",
    "METRALE_FP32_GATE",
    "METRALE_FRANKENSTEIN_DECODE_VIA_PREFILL",
    "METRALE_K2_DIAG",
    "METRALE_NO_DECODE_SPLIT_SILU",
    "METRALE_BF16_TC_PREFILL",
    "METRALE_FP8_M64_PREFILL",
    "METRALE_INT8_PREFILL",
    "METRALE_INT8_FAITH5",
    "METRALE_NO_FFN_NVFP4_MMQ",
    "METRALE_NO_FFN_NVFP4_MMQ_DOWN",
    "METRALE_FFN_MMQ",
    "METRALE_FFN_MMQ_DOWN_Q4K",
    "METRALE_FP4_PREFILL",
    "METRALE_DISABLE_PREFILL_V2",
    "METRALE_HOLO_MOE_GROUPED_CUTLASS",
    "METRALE_HOLO_MOE_GROUPED_DOWN",
    "METRALE_MOE_PREFILL_EXACT_TILES",
    "METRALE_MOE_PREFILL_MAX_LOAD_FACTOR",
    "METRALE_MOE_PREFILL_ZERO",
    "METRALE_MOE_PREFILL_FP8_DOWN",
    "METRALE_NO_SSM_W4A4",
    "METRALE_NO_SSD",
    "METRALE_NO_SSM_PERSISTENT",
    "METRALE_MOE_NO_ZERO_INTERMEDIATES",
    "METRALE_MOE_MAX_M_TILES_ESTIMATE",
    "METRALE_MOE_W4A4",
    "METRALE_NO_SHARED_W4A4",
    "METRALE_SHARED_W4A4_DOWN",
    "METRALE_DFLASH_CONTIG_ATTN",
    "METRALE_LORA_EAGER",
    "METRALE_LORA_ROTATE",
    "METRALE_K4_DIAG",
    "METRALE_DIAG_GEMMA4",
    "METRALE_DFLASH_DEBUG_DUMP_FULL",
    "METRALE_MTP_DEBUG_NORMS",
    "METRALE_MTP_CHAIN_POSTNORM",
    "METRALE_MTP_TARGET_POSTNORM",
    "METRALE_MTP_KV_EXACT",
    "METRALE_FP8_MOE_GROUPED_DECODE",
    "METRALE_NO_FP8_MOE_GROUPED_DECODE",
    "METRALE_FP8_ATTN_M32",
    "METRALE_SSM_SAVE_DUMP",
    "METRALE_MLA_PERSEQ_FALLBACK",
    "METRALE_HC_PERSEQ_DECODE",
    "METRALE_DECODE_BATCH_LOG",
    "METRALE_MS_PROFILE",
    "METRALE_CONC_HSD",
    "METRALE_EP_GRAPHS",
    "METRALE_GDN_DECODE_GRAPH",
    "METRALE_BF16_TC_PROJ",
    "TQ_PLUS_WEIGHT_ROTATION",
    "METRALE_SSM_MS_PROFILE",
    "METRALE_SSM_DETAIL_PROFILE",
    "METRALE_SSM_GEMV_BATCH4",
    "METRALE_GDN_FUSED_CONV",
    "METRALE_MOE_LEGACY_PERTOKEN_DECODE",
    "METRALE_MTP_SHADOW_TOPK",
    "METRALE_KV_POISON",
    "METRALE_NO_MTP_DRAFTER_CONTEXT",
    "METRALE_MTP_DRAFTER_CONTEXT_PREFILL_ONLY_UNSAFE",
)

ENGINES = {"atlas": (ATLAS, ATLAS_VARS), "metrale": (METRALE, METRALE_VARS)}


def expected(engine: str, env: Env) -> dict[str, Any]:
    rules, _ = ENGINES[engine]
    return {field: rule(env) for field, rule in rules.items()}

"""Decision tables of the Gated DeltaNet family: prefill, Metrale's
multi-stream prefill, verify, decode, Metrale's conv-fused decode and its
decode projections (``kernels/gdn/``)."""

from __future__ import annotations

from .rules import Rule, Table, compare, flag, guard, relation

FUSED_HEAD_DIM = 128  # the head dim the engine's fused conv kernel is built for
BATCHED_FLA_HEAD_DIM = 128  # the K and V head dim Metrale's batched multi-stream prefill is built for

PREFILL = Table(
    path="gdn.prefill",
    summary="chunked GDN prefill (WY form), carried state in and out",
    levers=("gdn_regresident",),
    variants=("regresident", "global_state"),
    rules=(
        Rule("regresident", {"gdn_regresident": True}),
        Rule("global_state", note="gdn_regresident off: the state round-trips through global memory every chunk"),
    ),
)


def fla_head_dim(d) -> int:
    """The head dim the batched multi-stream prefill is taken at, at a shape
    (smoke shapes lower it to their own: d = 128 is too slow to simulate)."""
    return d.get("fla_head_dim", BATCHED_FLA_HEAD_DIM)


_FLA_D128 = relation(
    f"dk = dv = {BATCHED_FLA_HEAD_DIM}",
    lambda d: d["dk"] == d["dv"] == fla_head_dim(d),
    negation=f"dk or dv != {BATCHED_FLA_HEAD_DIM}",
    bound_at=fla_head_dim,
    why="the batched multi-stream kernels need dk == dv == {bound} (got dk={dk}, dv={dv})",
)

# Metrale's gdn_batched_fla: several prompts prefilled together, each with
# its own state, in one launch whose streams are given by token offsets (the
# chunks restart at each stream's start), where the K and V head dims are
# the ones the engine built that kernel for; else, or with the lever off,
# the single-stream prefill once per stream.
PREFILL_MULTI_STREAM = Table(
    path="gdn.prefill_multi_stream",
    summary="several prompts of different lengths prefilled together, a GDN state per stream",
    levers=("gdn_batched_fla",),
    variants=("batched", "per_stream"),
    engines=("metrale",),
    rules=(
        Rule("per_stream", {"gdn_batched_fla": False}, note="gdn_batched_fla off: one prefill launch per stream"),
        Rule("batched", {}, (_FLA_D128,)),
        Rule("per_stream", note="gdn_batched_fla on but not taken: {unmet}"),
    ),
)

_T17 = compare("t", "=", 17, symbol="T", why="T={t}, not {bound}")

VERIFY = Table(
    path="gdn.verify",
    summary="speculative verify: T tokens against one carried state",
    levers=("gdn_wy17", "gdn_wyn"),
    variants=("wy17", "wyn", "recurrent"),
    rules=(
        Rule("wy17", {"gdn_wy17": True}, (_T17,)),
        Rule(
            "wyn",
            {"gdn_wy17": False, "gdn_wyn": True},
            (_T17,),
            note="gdn_wy17 off: 17 tokens take the general WY-N kernel",
        ),
        Rule("wyn", {"gdn_wyn": True}),
        Rule("recurrent", {"gdn_wy17": False}, (_T17,), note="gdn_wy17 and gdn_wyn off: token-by-token recurrence"),
        Rule("recurrent", note="gdn_wyn off: {t} tokens take the token-by-token recurrence"),
    ),
)

_BATCH = compare("n", ">", 1, symbol="N", least=1, why="N={n}")

DECODE = Table(
    path="gdn.decode",
    summary="multi-sequence single-token decode over a state pool indexed by slot",
    levers=("gdn_batched_fla",),
    variants=("batched", "per_sequence"),
    # Atlas's gdn_batched_fla steers multi-sequence decode; Metrale's field of
    # the same name steers multi-stream *prefill* (its lever file), which is
    # gdn.prefill_multi_stream above, so this path is Atlas's alone.
    engines=("atlas",),
    rules=(
        Rule("batched", {"gdn_batched_fla": True}),
        Rule("per_sequence", {}, (_BATCH,), note="gdn_batched_fla off: one launch per sequence"),
        Rule("per_sequence"),
    ),
)


def fused_head_dim(d) -> int:
    """The head dim the fused conv kernel is built for at a shape (smoke
    shapes lower it to their own)."""
    return d.get("fused_head_dim", FUSED_HEAD_DIM)


_HV_2HK = relation(
    "Hv = 2 Hk", lambda d: d["hv"] == 2 * d["hk"], why="fused conv kernel needs Hv == 2*Hk (got Hv={hv}, Hk={hk})"
)
_D128 = relation(
    f"dk = dv = {FUSED_HEAD_DIM}",
    lambda d: d["dk"] == d["dv"] == fused_head_dim(d),
    negation=f"dk or dv != {FUSED_HEAD_DIM}",
    bound_at=fused_head_dim,
    why="fused conv kernel needs dk == dv == {bound} (got dk={dk}, dv={dv})",
)

# Where the engine's fused conv kernel applies at all (the kernel refuses
# other shapes: ``gdn/fused_conv/fused.py``).
FUSED_ELIGIBLE = (_HV_2HK, _D128)

FUSED_CONV = Table(
    path="gdn.fused_conv",
    summary="decode conv1d+SiLU, GDN step and gated RMSNorm: fused vs separate kernels",
    levers=("gdn_fused_conv",),
    variants=("fused", "separate"),
    engines=("metrale",),
    rules=(
        Rule("separate", {"gdn_fused_conv": False}),
        Rule("fused", {}, FUSED_ELIGIBLE),
        Rule("separate", note="gdn_fused_conv on but not taken: {unmet}"),
    ),
)

# Qwen3-Next's GDN-layer projections in a multi-sequence decode: up to 16
# rows take the contiguous-batch GEMV tier (batch4 up to 4 rows, batch16
# above) when ``ssm_gemv_batch4`` is on and the tier's kernel resolved
# (``gemv_tier_loaded``). The lever file does not name the path taken
# otherwise; leverctl's choice: one W4A16 GEMV launch per row.
GEMV_BATCH4_MAX_ROWS = 4
GEMV_BATCH16_MAX_ROWS = 16

_TIER_MISSING = guard(
    flag("gemv_tier_loaded", on="tier kernel resolved", off="tier kernel not resolved", why="", default=1)
)
# batch16 follows batch4 on the rows batch4 leaves: that 4 was exceeded is no reason of its own.
_ROWS_4 = compare("m", "<=", GEMV_BATCH4_MAX_ROWS, symbol="rows", quiet=True)
_ROWS_16 = compare("m", "<=", GEMV_BATCH16_MAX_ROWS, symbol="rows", why="{m} rows, more than {bound}")

PROJ_GEMV_BATCH = Table(
    path="gdn.proj_gemv_batch",
    summary="GDN-layer projections of a multi-sequence decode: contiguous-batch GEMV tier vs a GEMV per row",
    levers=("ssm_gemv_batch4",),
    variants=("batch4", "batch16", "per_row"),
    engines=("metrale",),
    rules=(
        Rule(
            "per_row",
            {},
            (_TIER_MISSING,),
            note="the tier's kernel did not resolve: one GEMV per row whatever ssm_gemv_batch4 says",
        ),
        Rule("batch4", {"ssm_gemv_batch4": True}, (_ROWS_4,)),
        Rule("batch16", {"ssm_gemv_batch4": True}, (_ROWS_16,)),
        Rule("per_row", {"ssm_gemv_batch4": True}, note="ssm_gemv_batch4 is on but {unmet}: one GEMV per row"),
        Rule("per_row"),
    ),
)

TABLES = (PREFILL, PREFILL_MULTI_STREAM, VERIFY, DECODE, FUSED_CONV, PROJ_GEMV_BATCH)

"""Gated DeltaNet (GDN) kernel paths: chunked prefill, speculative verify,
multi-sequence decode, Metrale's conv-fused decode, and the projection GEMV
tiers of its multi-sequence decode.

==================  =========================  ===================  ==========================
path                levers (default)           variants             chosen when
==================  =========================  ===================  ==========================
gdn.prefill         gdn_regresident (on)       regresident          lever on
                                               global_state         lever off
gdn.verify          gdn_wy17 (on),             wy17                 T == 17 and gdn_wy17
                    gdn_wyn (on)               wyn                  else gdn_wyn
                                               recurrent            otherwise
gdn.decode          gdn_batched_fla (off)      batched              lever on
(Atlas only)                                   per_sequence         lever off
gdn.fused_conv      gdn_fused_conv (off)       fused                lever on, Hv == 2 Hk,
(Metrale only)                                                      dk == dv == fused_head_dim
                                               separate             otherwise (note says why)
==================  =========================  ===================  ==========================

``gdn.proj_gemv_batch`` (Metrale only; ``ssm_gemv_batch4``, on): the GDN
layer's projections in a multi-sequence decode, through the contiguous-batch
GEMV tier (``batch4`` up to 4 rows, ``batch16`` up to 16) when the lever is
on and the tier resolved, else ``per_row``, one W4A16 GEMV launch per row
(leverctl's stand-in: the engine does not name that path).

The "chosen when" column is ``leverctl_kernels.selection``'s decision tables,
which each path's ``select`` runs and ``leverctl explain`` words. Atlas's
``gdn_batched_fla`` steers multi-sequence decode; Metrale's field of the
same name steers multi-stream GDN *prefill* through its batched FLA kernels,
a path with no kernel here yet, so ``gdn.decode`` is Atlas's alone.

The recurrence, layouts and references are in ``naive``; shapes, inputs and
traffic in ``spec``; the block/thread tiling every kernel shares in
``_layout``. Verify and decode are memory-bound on the state (64 KiB per
value head at d = 128, read and written once per call); prefill is
compute-bound at model shapes.

Verify, every variant: one call reads and writes each value head's
``dk x dv`` fp32 state once (2 MiB per sequence and layer at Qwen3-Next
shapes, read + written = 4 MiB, ~0.9 us at 4.8 TB/s) against ``T`` single
decode steps moving ``2 T`` times the state (17 tokens: 68 MiB). The
arithmetic, ~7 flops per state element per token, only catches up at
``T ~ 17`` (~60 MFLOP, ~1 us of fp32 on an H200).
"""
from __future__ import annotations

from ..common.path import KernelPath, Tolerance, Variant
from ..selection import check_declaration
from ._mma_qk import TC_DTYPE
from . import (conv_fused, conv_separate, decode_batched, decode_per_sequence, prefill_global_state,
               prefill_regresident, spec, verify_recurrent, verify_wy17, verify_wyn)
from . import proj_batch4, proj_batch16, proj_per_row, proj_spec
from ..selection import GDN_PROJ_GEMV_BATCH

# fp32 kernels against a float64 reference on the same fp16 inputs. Prefill
# accumulates over thousands of tokens and chunk-sized solves: more room.
# The absolute bounds follow each output's scale (``o`` is ~0.05-0.1 at
# model shapes, the state ~1): no element may be off by more than 1e-4
# (prefill 2e-4) of its output's largest magnitude. Correct fp32 arithmetic
# stays near 1e-6 of it (the simulator's kernels at smoke shapes, a float32
# recurrence at model shapes); one token skipped or one head's decay wrong
# is orders of magnitude over it, though the norm-wise bound, diluted over
# every head and token, misses the first.
TOKEN_TOL = Tolerance(rel=5e-4, abs_of_max=1e-4)
PREFILL_TOL = Tolerance(rel=1e-3, abs_of_max=2e-4)

_STATE_NOTE = ("Qwen3-Next (Hv = 32, dk = dv = 128): 2 MiB of fp32 state per sequence and layer; "
               "one verify call reads and writes it once (4 MiB), T single-token steps would move "
               "T times that (17 tokens: 68 MiB).")

def _variant(mod, traffic=None, launches=1) -> Variant:
    """The variant a variant module declares (``NAME``, ``SUMMARY``,
    ``build``, and ``TENSOR_CORES`` where it has tensor-core products), with
    its own traffic where it moves more than the path's and its kernel
    launches per call where there are several."""
    return Variant(mod.NAME, mod.SUMMARY, mod.build, traffic=traffic, launches=launches,
                   tensor_cores=getattr(mod, "TENSOR_CORES", None),
                   tc_dtype=TC_DTYPE if getattr(mod, "TENSOR_CORES", None) else None)


def _per_sequence_launches(shape) -> int:
    return shape["n"]  # one launch per sequence


def _path(name: str, summary: str, levers: dict, variants: list[Variant], **fields) -> KernelPath:
    """The path ``gdn.<name>``; ``levers`` maps each lever to its default,
    ``variants`` in the order the bench lists them. A model without a
    ``[model.gdn]`` table (a dense one) has none of these paths."""
    fields["extra"] = {"model_sections": ("gdn",), **fields.get("extra", {})}
    return KernelPath(name=f"gdn.{name}", family="gdn", summary=summary, levers=tuple(levers),
                      lever_defaults=levers, variants={v.name: v for v in variants}, **fields)


PREFILL = _path(
    "prefill",
    "chunked GDN prefill (WY form), carried state in and out",
    {"gdn_regresident": True},
    [_variant(prefill_regresident), _variant(prefill_global_state, spec.prefill_global_traffic)],
    select=spec.select_prefill,
    shapes=spec.prefill_shapes,
    make_inputs=spec.token_inputs,
    outputs=spec.token_outputs,
    reference=spec.token_reference,
    traffic=spec.prefill_traffic,
    tolerance=PREFILL_TOL,
    notes="Compute-bound at model shapes: the chunk's k.k and q.k products on mma.sync (fp16 q, k "
          "as stored, f32 accumulators), the fp32 products on CUDA cores. global_state adds one "
          "state read+write per extra chunk.",
)

VERIFY = _path(
    "verify",
    "speculative verify: T tokens against one carried state",
    {"gdn_wy17": True, "gdn_wyn": True},
    [_variant(verify_wy17, spec.verify_wy17_traffic), _variant(verify_wyn),
     _variant(verify_recurrent, spec.verify_recurrent_traffic)],
    select=spec.select_verify,
    shapes=spec.verify_shapes,
    make_inputs=spec.token_inputs,
    outputs=spec.token_outputs,
    reference=spec.token_reference,
    traffic=spec.verify_traffic,
    tolerance=TOKEN_TOL,
    notes="Bandwidth-bound on the state (the fp32 arithmetic catches up around T = 17); wy17 and wyn "
          "make their k.k and q.k products on mma.sync (fp16). " + _STATE_NOTE,
    extra={"state_traffic": spec.verify_state_traffic},
)

DECODE = _path(
    "decode",
    "multi-sequence single-token decode over a state pool indexed by slot",
    {"gdn_batched_fla": False},
    [_variant(decode_batched), _variant(decode_per_sequence, launches=_per_sequence_launches)],
    select=spec.select_decode,
    shapes=spec.decode_shapes,
    make_inputs=spec.decode_inputs,
    outputs=spec.decode_outputs,
    reference=spec.decode_reference,
    traffic=spec.decode_traffic,
    tolerance=TOKEN_TOL,
    engines=("atlas",),
    notes="Memory-bound: each sequence's state (64 KiB per head at d = 128) read and written once. "
          "Atlas only: Metrale's gdn_batched_fla steers multi-stream prefill, not this decode.",
)

FUSED_CONV = _path(
    "fused_conv",
    "decode conv1d+SiLU, GDN step and gated RMSNorm: fused vs separate kernels",
    {"gdn_fused_conv": False},
    [_variant(conv_fused), _variant(conv_separate, spec.fused_conv_separate_traffic, launches=3)],
    select=spec.select_fused_conv,
    shapes=spec.fused_conv_shapes,
    make_inputs=spec.fused_conv_inputs,
    outputs=spec.fused_conv_outputs,
    reference=spec.fused_conv_reference,
    traffic=spec.fused_conv_traffic,
    tolerance=TOKEN_TOL,
    engines=("metrale",),
    notes="Memory-bound on the state. The fused kernel needs Hv == 2*Hk and dk == dv == "
          "fused_head_dim (128 at model shapes; smoke shapes lower it to their own head dim).",
    extra={"fused_head_dim": conv_fused.DEFAULT_FUSED_HEAD_DIM},
)

# The projections around the recurrence in a multi-sequence decode: W4A16
# GEMVs, held to the W4A16 family's bound (fp16 outputs of fp32 sums).
PROJ_GEMV_BATCH = _path(
    "proj_gemv_batch",
    GDN_PROJ_GEMV_BATCH.summary,
    {"ssm_gemv_batch4": True},
    [_variant(proj_batch4), _variant(proj_batch16),
     _variant(proj_per_row, proj_spec.per_row_traffic, launches=proj_per_row.launches)],
    select=GDN_PROJ_GEMV_BATCH.select,
    shapes=proj_spec.shapes,
    make_inputs=proj_spec.make_inputs,
    outputs=proj_spec.outputs,
    reference=proj_spec.reference,
    traffic=proj_spec.traffic,
    tolerance=Tolerance(rel=2e-3, abs_of_max=2e-3),
    engines=("metrale",),
    notes="Memory-bound on the int4 weights: the batch tiers read them once for all rows, per_row once per row.",
)

PATHS = (PREFILL, VERIFY, DECODE, FUSED_CONV, PROJ_GEMV_BATCH)

# Each declaration says what its decision table says (select is the table's).
for _declared in PATHS:
    check_declaration(_declared)

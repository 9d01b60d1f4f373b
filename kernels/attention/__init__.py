"""Attention kernel paths: paged decode attention.

======================  ==================================  ================  ===========================
path                    levers (default)                    variants          chosen when
======================  ==================================  ================  ===========================
attention.paged_decode  hc_perseq_decode (off, Metrale),    per_sequence      hc_perseq_decode on and
                        max_decode_seqs (1, binds),                           hc_mult > 0
                        kv_poison (off, binds)              split_pinned      otherwise (note says why)
                                                            split_live_batch  never: a baseline bench and
                                                                              sweep run beside it
======================  ==================================  ================  ===========================

The "chosen when" column is ``leverctl_kernels.selection``'s decision
table, which ``select`` runs and ``leverctl explain`` words. Two levers do
not choose a variant but reach the run (``KernelPath.bind``):
``max_decode_seqs`` is the count the split policy is given (``_paged``),
and ``kv_poison`` decides what fills the unwritten slots of each sequence's
fresh tail block (``spec.make_inputs``). Every record of the path carries
``batch_invariance``: each sequence decoded alone against its row of the
batch, bit for bit (``spec.batch_invariance``); the pinned variants must
pass it, the baseline is expected not to.

The attention projections (``attention.proj_bf16_tc``,
``attention.proj_bf16_tc_w4a16``, ``attention.proj_fp8``) are declared in
``proj_paths`` and joined to ``PATHS`` below.

Memory-bound: at Qwen3-Next shapes (16 query heads, 2 KV heads, d = 256) a
sequence of L tokens moves 2 KiB of K and V per token, read once by the
block running its 8-head group; the partials add ``splits x 16 x 258 x 4``
bytes each way.
"""
from __future__ import annotations

from ..common.path import KernelPath, Tolerance, Variant
from ..selection import ATTENTION_PAGED_DECODE as TABLE, check_declaration
from . import per_sequence, spec, split_live_batch, split_pinned

# fp32 accumulation against a float64 reference on the same bf16 inputs.
# At Qwen3-Next's shape and 32K tokens correct float32 arithmetic stays near
# 3e-7 of the output's largest magnitude, one token dropped moves an output
# by almost 1e-2 of it (tests/kernels/test_attention_model_shapes.py), a
# NaN from a poisoned slot fails outright.
TOL = Tolerance(rel=2e-4, abs_of_max=1e-4)


def _variant(mod, traffic, launches=2) -> Variant:
    return Variant(mod.NAME, mod.SUMMARY, mod.build, traffic=traffic, launches=launches)


PAGED_DECODE = KernelPath(
    name=TABLE.path,
    family="attention",
    summary=TABLE.summary,
    levers=TABLE.levers,
    lever_defaults={"hc_perseq_decode": False, "max_decode_seqs": 1, "kv_poison": False},
    variants={v.name: v for v in (
        _variant(split_pinned, spec.pinned_traffic),
        _variant(per_sequence, spec.pinned_traffic, spec.per_sequence_launches),
        _variant(split_live_batch, spec.live_batch_traffic),
    )},
    select=spec.select,
    shapes=spec.shapes,
    make_inputs=spec.make_inputs,
    outputs=spec.outputs,
    reference=spec.reference,
    traffic=spec.pinned_traffic,
    tolerance=TOL,
    engines=TABLE.engines,
    notes="Memory-bound on the KV cache. split_live_batch is a baseline no lever selects.",
    extra={"model_sections": ("attention",), "batch_invariance": spec.batch_invariance},
    baselines=TABLE.baselines,
    bind=spec.bind,
)

PATHS = (PAGED_DECODE,)

from .proj_paths import PATHS as _PROJ_PATHS  # noqa: E402 - the projection paths (proj_paths.py)

PATHS = PATHS + _PROJ_PATHS

for _declared in PATHS:
    check_declaration(_declared)

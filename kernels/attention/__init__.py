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

Two Metrale paths are declared in modules of their own:
``attention.rotation`` (``rotation_path``: ``weight_pre_rotated``, Q/K/V
weights rotated at load against a run-time Hadamard in the FP8 KV-cache
write) and ``attention.decode_graph`` (``decode_graph_path``: a decode step
of GDN and attention layers replayed as a CUDA graph against eager
launches, as ``ep_graphs``, ``gdn_decode_graph``, ``ms_profile`` and
``lora_eager`` decide).

Two more paths, each chosen by one lever:
``attention.dflash_contig`` (``dflash_contig_attn``, both engines; off:
``paged``, on: ``contig``), the DFlash draft block's causal attention over
the target's context, one kernel pair (``_dflash``) whose KV layout is a
compile-time constant; and ``attention.mla_decode``
(``mla_perseq_fallback``, Metrale; off: ``batched``, on:
``per_sequence``), MLA decode in the latent space (``_mla``).

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

from .rotation_path import ROTATION  # noqa: E402  (attention.rotation, Metrale)
from .decode_graph_path import DECODE_GRAPH  # noqa: E402  (attention.decode_graph, Metrale)


# The DFlash draft block (attention.dflash_contig) and MLA decode
# (attention.mla_decode): same fp32 online softmax, same tolerance reasons.
from ..selection import ATTENTION_DFLASH_CONTIG as _DFLASH_TABLE, ATTENTION_MLA_DECODE as _MLA_TABLE  # noqa: E402
from . import dflash_contig, dflash_paged, dflash_spec, mla_batched, mla_per_sequence, mla_spec  # noqa: E402

DFLASH_CONTIG = KernelPath(
    name=_DFLASH_TABLE.path,
    family="attention",
    summary=_DFLASH_TABLE.summary,
    levers=_DFLASH_TABLE.levers,
    lever_defaults={"dflash_contig_attn": False},
    variants={v.name: v for v in (
        _variant(dflash_paged, dflash_spec.paged_traffic),
        _variant(dflash_contig, dflash_spec.contig_traffic),
    )},
    select=_DFLASH_TABLE.select,
    shapes=dflash_spec.shapes,
    make_inputs=dflash_spec.make_inputs,
    outputs=dflash_spec.outputs,
    reference=dflash_spec.reference,
    traffic=dflash_spec.paged_traffic,
    tolerance=TOL,
    engines=_DFLASH_TABLE.engines,
    notes="Memory-bound on the KV; contig reads no block table. Same kernel code, so the same bits.",
    extra={"model_sections": ("attention",)},
)

MLA_DECODE = KernelPath(
    name=_MLA_TABLE.path,
    family="attention",
    summary=_MLA_TABLE.summary,
    levers=_MLA_TABLE.levers,
    lever_defaults={"mla_perseq_fallback": False},
    variants={v.name: v for v in (
        _variant(mla_batched, mla_spec.traffic, 1),
        _variant(mla_per_sequence, mla_spec.traffic, mla_spec.per_sequence_launches),
    )},
    select=_MLA_TABLE.select,
    shapes=mla_spec.shapes,
    make_inputs=mla_spec.make_inputs,
    outputs=mla_spec.outputs,
    reference=mla_spec.reference,
    traffic=mla_spec.traffic,
    tolerance=TOL,
    engines=_MLA_TABLE.engines,
    notes="Memory-bound on the latent cache. per_sequence launches the batched kernel once per sequence.",
    extra={"model_sections": ("mla",), "batch_invariance": mla_spec.batch_invariance},
)


PATHS = (PAGED_DECODE, DFLASH_CONTIG, MLA_DECODE, ROTATION, DECODE_GRAPH)

from .proj_paths import PATHS as _PROJ_PATHS  # noqa: E402 - the projection paths (proj_paths.py)

PATHS = PATHS + _PROJ_PATHS

for _declared in PATHS:
    check_declaration(_declared)

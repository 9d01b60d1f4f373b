"""Gated DeltaNet (GDN) kernel paths: chunked prefill, Metrale's multi-stream
prefill, speculative verify, multi-sequence decode, Metrale's conv-fused
decode, and the projection GEMV tiers of its multi-sequence decode.

==================  =========================  ===================  ==========================
path                levers (default)           variants             chosen when
==================  =========================  ===================  ==========================
gdn.prefill         gdn_regresident (on)       regresident          lever on
                                               global_state         lever off
gdn.prefill_        gdn_batched_fla (off)      batched              lever on,
multi_stream                                                        dk == dv == fla_head_dim
(Metrale only)                                 per_stream           otherwise (note says why)
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
same name steers multi-stream GDN *prefill* (``gdn.prefill_multi_stream``:
several prompts in one launch, each stream's tokens given by offsets), so
``gdn.decode`` is Atlas's alone.

Each path is a folder (``prefill/``, ``prefill_multi_stream/``,
``verify/``, ``decode/``, ``fused_conv/``, ``proj_gemv_batch/``) with its
declaration in ``spec.py``
and one module per variant. The recurrence and its float64 forms, every
path's reference, are in ``naive``; the model's sizes, inputs and counts
the paths share in ``family``; the kernels' shared pieces in ``_layout``
(the block/thread tiling), ``_chunk``, ``_mma_qk``, ``_step``, ``_conv``
and ``_prefill``. Verify and decode are memory-bound on the state (64 KiB per
value head at d = 128, read and written once per call); prefill is
compute-bound at model shapes.

Verify, every variant: one call reads and writes each value head's
``dk x dv`` fp32 state once (2 MiB per sequence and layer at Qwen3-Next
shapes, read + written = 4 MiB, ~0.9 us at 4.8 TB/s) against ``T`` single
decode steps moving ``2 T`` times the state (17 tokens: 68 MiB). The
arithmetic, ~7 flops per state element per token, only catches up at
``T ~ 17`` (~60 MFLOP, ~1 us of fp32 on an H200).
"""

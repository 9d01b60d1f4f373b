"""Decode-step kernel paths: a whole decode step of a batch, built from the
attention and GDN families' decode kernels, where a lever changes how the
step is launched rather than which kernel computes it.

====================  ==========================  ============  ===============================
path                  levers (default)            variant       chosen when
====================  ==========================  ============  ===============================
decode.per_sequence   hc_perseq_decode (off),     per_sequence  hc_perseq_decode on and
(Metrale only)        mla_perseq_fallback (off)                 hc_mult > 0; or
                                                                mla_perseq_fallback on and
                                                                the model is MLA
                                                  batched       otherwise (a note says which
                                                                model fact was missing)
====================  ==========================  ============  ===============================

The "chosen when" column is ``selection.decode``'s decision table. The
step reuses the other families' public builders (``attention.decode_graph``'s
eager step, ``attention.mla_decode``'s batched launch) and composes their
references; nothing here is a kernel of its own.
"""

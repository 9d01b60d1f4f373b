"""Mamba2 (Nemotron-H's SSM layers) kernel paths, Metrale.

===================  =========================  ===========  ============================================
path                 levers (default)           variants     chosen when
===================  =========================  ===========  ============================================
mamba2.prefill_scan  ssd (on),                  ssd          ssd on and the state size fits the SSD
                     ssm_persistent (on)                     kernels' shared memory (N <= 167)
                                                persistent   else ssm_persistent on
                                                sequential   otherwise
mamba2.prefill_proj  ssm_w4a4 (on)              w4a4         lever on, >= 512 rows, the W4A4 kernels
                                                             loaded, the fp8_act buffer large enough
                                                w4a16        otherwise (the default projection GEMM)
===================  =========================  ===========  ============================================

The "chosen when" column is ``leverctl_kernels.selection``'s decision
tables (``selection.mamba2``). Each path is a folder: ``prefill_scan/``
(the recurrence and its three float64 forms in ``naive``) and
``prefill_proj/``; what they share (the model's sizes) is ``family``.

The scan is the layer's selective-state recurrence alone (after the
in-projection and the causal conv, before the gated RMSNorm and the
out-projection). The projections reuse the dense-FFN prefill arms' GEMMs:
``ffn.prefill``'s ``w4a4`` (NVFP4 weights, activations quantised to NVFP4 per
GEMM) and, for the engine's default projection GEMM, which its lever file
does not name, the W4A16 GEMM (``w4a16.gemm``'s default tiles): leverctl's
choice.
"""

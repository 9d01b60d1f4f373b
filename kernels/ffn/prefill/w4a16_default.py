"""The default arm: Metrale's W4A16 GEMM, the ``w4a16.gemm`` path's
default tiles (``leverctl_kernels.w4a16.gemm.gemm_tiled``), reading the int4
weights as stored and the fp16 activations."""

from __future__ import annotations

from ...w4a16.gemm import gemm_tiled


def build(shape):
    inner = gemm_tiled.build_default(shape)

    def launch(bufs):
        inner({"c": bufs["c"], "a": bufs["a"], "qweight": bufs["qweight"], "scales": bufs["scales"]})

    launch.tensor_cores = None
    return launch

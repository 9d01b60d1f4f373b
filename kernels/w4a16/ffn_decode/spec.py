"""``w4a16.ffn_decode``: the dense SiLU FFN for one token,
``y = W_down (silu(W_gate x) * (W_up x))``, as fixed sequences of the
family's kernels (``sequences``)."""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

import numpy as np

from ...common import weight_fit as fit
from ...common.int4 import packed_bytes
from ...common.model_weights import WeightUse
from ...common.path import KernelPath, Shape, Traffic, Variant, check_preset
from ...selection.w4a16 import FFN_DECODE as TABLE
from .. import naive
from ..family import args, declare, ffn_sizes, fp16_normal, mk, w4
from . import silu_mul
from .sequences import build_ffn_variant, ffn_variant_traffic

_FFN_ARGS = ("x", "qw_gate", "s_gate", "qw_up", "s_up", "qw_down", "s_down")


def ffn_shapes(preset: str, model: Mapping[str, Any] | None) -> list[Shape]:
    check_preset(preset)
    if preset == "smoke":
        # Each projection's only scale group is partial (72 and 40 inputs);
        # the GEMV and GEMM paths cover several groups. Kept small: the
        # down GEMV has a warp per hidden row.
        return [mk("h72-i40", m=1, hidden=72, inter=40)]
    hidden, ffns, _ = ffn_sizes(model)
    return [mk(f"{tag}-ffn h{hidden} i{inter}", m=1, hidden=hidden, inter=inter) for tag, inter in ffns]


PROFILE_BLOCKS = 4  # blocks a launch the memory trace runs


def ffn_profile_shape(shape: Shape) -> Shape:
    """The memory trace's shape: the model's, one token. The down
    projection's rows are ``inter`` long and there are ``hidden`` of them,
    the gate and up projections' the other way round, so no shape keeps
    both row lengths with few rows; the trace keeps both and runs
    :data:`PROFILE_BLOCKS` blocks of each launch instead (every block of
    these kernels does the same work on other rows), scaling their counts
    to the whole grid."""
    h, i = shape["hidden"], shape["inter"]
    return mk(f"profile h{h} i{i}", m=1, hidden=h, inter=i)


def ffn_inputs(shape: Shape, rng: np.random.Generator) -> dict:
    h, i = shape["hidden"], shape["inter"]
    w = {
        **w4(rng, i, h, "qw_gate", "s_gate"),
        **w4(rng, i, h, "qw_up", "s_up"),
        **w4(rng, h, i, "qw_down", "s_down"),
    }
    return {"x": fp16_normal(rng, h), **w}


def ffn_on_weights(path: KernelPath, tensors) -> KernelPath:
    """The FFN decode on a dense FFN's three matrices from a model file:
    gate and up ``[i, h]``, down ``[h, i]``, each made int4 from its decoded
    values; one token at either preset."""
    gate, up, down = (fit.role(tensors, r, path.name) for r in ("ffn_gate", "ffn_up", "ffn_down"))
    i, h, enc_gate = fit.int4_matrix(gate, path.name)
    iu, hu, enc_up = fit.int4_matrix(up, path.name)
    hd, idn, enc_down = fit.int4_matrix(down, path.name)
    fit.agree(gate, "n", i, up, "n", iu, "gate and up are multiplied element by element")
    fit.agree(gate, "k", h, up, "k", hu, "gate and up read the same x")
    fit.agree(gate, "n (intermediate)", i, down, "k", idn, "down reads silu(gate) * up")
    fit.agree(gate, "k (hidden)", h, down, "n", hd, "down writes the hidden state")
    tag = fit.read_as([gate, up, down], "int4", stored=False)

    def shapes(preset: str, model: Mapping[str, Any] | None) -> list[Shape]:
        check_preset(preset)
        return [mk(f"{tag} h{h} i{i}", m=1, hidden=h, inter=i)]

    def inputs(shape: Shape, rng: np.random.Generator) -> dict:
        (qg, sg), (qu, su), (qd, sd) = enc_gate(), enc_up(), enc_down()
        return {
            "x": fp16_normal(rng, h),
            "qw_gate": qg,
            "s_gate": sg,
            "qw_up": qu,
            "s_up": su,
            "qw_down": qd,
            "s_down": sd,
        }

    return dataclasses.replace(path, shapes=shapes, make_inputs=inputs)


def ffn_traffic(shape: Shape) -> Traffic:
    """The least any variant must move: the three weight matrices, ``x`` in,
    ``y`` out (no intermediate round trips)."""
    h, i = shape["hidden"], shape["inter"]
    return Traffic(
        bytes_read=2 * packed_bytes(i, h) + packed_bytes(h, i) + 2 * h,
        bytes_written=2 * h,
        flops=6 * h * i + silu_mul.FLOPS_PER_ELEMENT * i,
    )


_FFN_SUMMARIES = {
    "gemv_sw+fused": "dual GEMV (warp per row), then fused SiLU-multiply + down GEMV",
    "gemv_64t+fused": "dual GEMV (64 threads per 4 rows), then fused SiLU-multiply + down GEMV",
    "gemv_sw+split": "dual GEMV, SiLU-multiply, down GEMV (all warp per row)",
    "gemv_64t+split": "dual GEMV, SiLU-multiply, down GEMV (64 threads per 4 rows)",
    "gemm_m1": "gate, up, down through the tiled GEMM at M = 1, SiLU-multiply between",
}


# Kernel launches per call (ffn_decode's sequences): the levers choose
# between two, three and four, so the bench also times these with the host's
# launch cost, and the roofline floor pays a launch latency for each.
_FFN_LAUNCHES = {"gemv_sw+fused": 2, "gemv_64t+fused": 2, "gemv_sw+split": 3, "gemv_64t+split": 3, "gemm_m1": 4}


def _ffn_variant(name: str) -> Variant:
    return Variant(
        name,
        _FFN_SUMMARIES[name],
        lambda shape, _n=name: build_ffn_variant(_n, shape),
        traffic=lambda shape, _n=name: ffn_variant_traffic(_n, shape),
        launches=_FFN_LAUNCHES[name],
    )


PATH = declare(
    TABLE,
    [_ffn_variant(name) for name in _FFN_SUMMARIES],
    shapes=ffn_shapes,
    make_inputs=ffn_inputs,
    outputs=lambda shape: {"y": ((shape["hidden"],), "float16")},
    reference=lambda shape, inputs: {"y": naive.naive_ffn_decode(*args(inputs, *_FFN_ARGS))},
    traffic=ffn_traffic,
    notes=(
        "memory-bound: the three weight matrices dominate; decode_ffn_via_gemm "
        "takes precedence over decode_split_silu and gemv_sw"
    ),
    extra={
        "profile_shape": ffn_profile_shape,
        "profile_blocks": PROFILE_BLOCKS,
        "weights": WeightUse((("ffn_gate", "ffn_up", "ffn_down"),), ffn_on_weights),
    },
)

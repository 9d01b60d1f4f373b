"""``mamba2.prefill_scan``: the Mamba2 selective-state prefill scan over a
prompt, carried state in and out; its shapes, seeded inputs, traffic and
declaration.

Inputs (fresh draws per call), as a trained Mamba2 layer sees them after
its in-projection and causal conv:

* ``x [T, H, P]`` and ``B``, ``C [T, G, N]``: N(0, 1) in **fp16** (the
  engine's activations; the reference reads the same fp16 values);
* ``dt_raw [T, H]`` fp32 ~ 0.5 N(0, 1), ``dt_bias [H]`` the inverse
  softplus of steps log-uniform in [0.001, 0.1] (Mamba2's initialisation);
* ``A [H]`` = -U(1, 16) (its ``-exp(A_log)`` range), ``D [H]`` ~ U(0.5, 1.5);
* ``state [H, P, N]`` fp32 ~ 0.1 N(0, 1): a state carried in from a
  previous call, updated in place (the final state is an output);
* ``y [T, H, P]`` fp32, so the check sees the scan's error, not the
  output's rounding.

Shapes: ``model`` from a recipe's ``[model.mamba2]`` and
``[model.bench].prefill_tokens`` (Nemotron-H-8B's when absent); ``smoke``
tiny and odd: 2 groups, head dim 8, state 16, prompts of 37 and 13 tokens
in chunks of 16 and 8.
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from ...common.path import Shape, Tolerance, Traffic, Variant, check_preset, declared_path
from ...selection.mamba2 import PREFILL_SCAN as TABLE
from ..family import F16, F32, MODEL_SECTIONS, model_sizes
from . import naive, persistent, sequential, ssd


def scan_label(preset: str, d: Mapping[str, int]) -> str:
    return f"{preset} t{d['t']} h{d['h']} p{d['p']} n{d['n']} g{d['g']} c{d['chunk']}"


def scan_shapes(preset: str, model: Mapping[str, Any] | None) -> list[Shape]:
    check_preset(preset)
    if preset == "smoke":
        dims = [dict(t=37, h=4, p=8, n=16, g=2, chunk=16), dict(t=13, h=2, p=8, n=16, g=2, chunk=8)]
    else:
        m2, tokens, _ = model_sizes(model)
        dims = [
            dict(
                t=t,
                h=int(m2["heads"]),
                p=int(m2["head_dim"]),
                n=int(m2["state"]),
                g=int(m2["groups"]),
                chunk=int(m2["chunk"]),
            )
            for t in tokens
        ]
    return [Shape(scan_label(preset, d), d) for d in dims]


def profile_shape(shape: Shape) -> Shape:
    """The memory trace's shape: the model's rows (head dim ``p``, state
    size ``n``: the strides the staged tiles' banks and the sectors come
    from), one chunk of one 32-token tile (``chunk`` sets how many tiles a
    block walks, not their layout), two heads sharing one group."""
    d = {**shape.dims, "t": 32, "h": 2, "g": 1, "chunk": 32}
    return Shape(scan_label("profile", d), d)


def _dt_bias(rng: np.random.Generator, h: int) -> np.ndarray:
    dt = np.exp(rng.uniform(np.log(1e-3), np.log(1e-1), h))
    return (dt + np.log(-np.expm1(-dt))).astype(np.float32)  # softplus^-1(dt)


def scan_inputs(shape: Shape, rng: np.random.Generator) -> dict:
    t, h, p, n, g = (shape[k] for k in ("t", "h", "p", "n", "g"))
    f16 = lambda *s: rng.standard_normal(s, dtype=np.float32).astype(np.float16)  # noqa: E731
    return {
        "x": f16(t, h, p),
        "B": f16(t, g, n),
        "C": f16(t, g, n),
        "dt_raw": (0.5 * rng.standard_normal((t, h))).astype(np.float32),
        "dt_bias": _dt_bias(rng, h),
        "A": (-rng.uniform(1.0, 16.0, h)).astype(np.float32),
        "D": rng.uniform(0.5, 1.5, h).astype(np.float32),
        "state": (0.1 * rng.standard_normal((h, p, n))).astype(np.float32),
    }


def scan_outputs(shape: Shape) -> dict:
    t, h, p, n = (shape[k] for k in ("t", "h", "p", "n"))
    return {"y": ((t, h, p), "float32"), "state": ((h, p, n), "float32")}


def _scan_bytes(shape: Shape) -> tuple[int, int]:
    t, h, p, n, g = (shape[k] for k in ("t", "h", "p", "n", "g"))
    read = F16 * (t * h * p + 2 * t * g * n) + F32 * (2 * t * h + 3 * h) + F32 * h * p * n
    written = F32 * t * h * p + F32 * h * p * n
    return read, written


def scan_flops(shape: Shape) -> int:
    """The recurrence's: per token and state element a decay, an input and
    an output term (6 flops)."""
    t, h, p, n = (shape[k] for k in ("t", "h", "p", "n"))
    return 6 * t * h * p * n


def scan_traffic(shape: Shape) -> Traffic:
    """Inputs and outputs once, the state read and written once."""
    read, written = _scan_bytes(shape)
    return Traffic(bytes_read=read, bytes_written=written, flops=scan_flops(shape))


def sequential_traffic(shape: Shape) -> Traffic:
    """The state row read and written at every token, from global memory."""
    t, h, p, n = (shape[k] for k in ("t", "h", "p", "n"))
    read, written = _scan_bytes(shape)
    round_trip = F32 * h * p * n * (t - 1)
    return Traffic(bytes_read=read + round_trip, bytes_written=written + round_trip, flops=scan_flops(shape))


def ssd_traffic(shape: Shape) -> Traffic:
    """The chunked form's work and scratch: per chunk of ``Q`` the ``C.B``
    block (``Q^2 N / 2`` per head, 2 flops each) and its product with
    ``x`` (``Q^2 P / 2``), the chunk state (``Q P N``) and its read-out
    (``Q P N``); the chunk states written, passed (read and written) and
    read back, and ``cum``/``dt`` written and read."""
    t, h, p, n, q = (shape[k] for k in ("t", "h", "p", "n", "chunk"))
    nc = -(-t // q)
    read, written = _scan_bytes(shape)
    states = F32 * nc * h * p * n
    flops = h * (nc * q * q * (n + p) + 4 * t * p * n) + 3 * t * h * p
    return Traffic(
        bytes_read=read + 2 * states + F32 * 2 * h * t,
        bytes_written=written + 2 * states + F32 * 2 * h * t,
        flops=flops,
        tc_flops=h * ssd.cb_tc_flops(t, q, n),
    )


# fp32 scans against a float64 reference on the same fp16 inputs. Correct
# fp32 arithmetic stays near 1e-6 of each output's largest magnitude (the
# chunked form reassociates the sums, which costs nothing measurable);
# the bound is 1e-4 of it per element. A decay off by a factor in its
# exponent, or a chunk's state not carried into the next, is orders of
# magnitude over it.
TOLERANCE = Tolerance(rel=1e-3, abs_of_max=1e-4)


def _variant(mod, traffic=None) -> Variant:
    tc = getattr(mod, "TENSOR_CORES", None)
    return Variant(
        mod.NAME,
        mod.SUMMARY,
        mod.build,
        traffic=traffic,
        launches=getattr(mod, "LAUNCHES", 1),
        tensor_cores=tc,
        tc_dtype=ssd.WR.DTYPE if tc else None,
    )


PATH = declared_path(
    TABLE,
    {v.name: v for v in (_variant(ssd, ssd_traffic), _variant(persistent), _variant(sequential, sequential_traffic))},
    shapes=scan_shapes,
    make_inputs=scan_inputs,
    outputs=scan_outputs,
    reference=naive.reference,
    traffic=scan_traffic,
    tolerance=TOLERANCE,
    notes="persistent moves the state once and is bound by its sequential token walk; ssd spreads the "
    "prompt over chunks x heads blocks at the cost of the chunk states' round trips; sequential "
    "round-trips each state row through global memory every token. The SSD's C.B blocks run on "
    "mma.sync (fp16 C and B as stored, f32 sums); everything else on FP32 CUDA cores.",
    extra={"model_sections": MODEL_SECTIONS, "profile_shape": profile_shape},
)

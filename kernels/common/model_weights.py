"""Model weights from a file, as the bench hands them to a kernel path.

``leverctl bench --weights FILE`` reads tensors from a GGUF or safetensors
file (``leverctl/bench/checkpoint.py``) and gives each path that declares a
:class:`WeightUse` (``extra["weights"]`` of its :class:`KernelPath`) the
tensors of one of its role groups; the path returns itself on those weights
(its shapes the tensors' own, its inputs built from them).

Roles are the model-independent names of what a tensor is in a layer,
spelled as GGUF spells them (``blk.N.<role>.weight``); the readers map other
naming schemes (Hugging Face's ``model.layers.N.self_attn.q_proj.weight``,
``mlp.experts.E.gate_proj``) onto them.

This module imports no numpy at import time (the CLI lists roles cheaply).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping

# role -> what it is. Expert roles are 3-D: ``[experts, n, k]``.
ROLES: Mapping[str, str] = {
    "attn_q": "attention query projection",
    "attn_k": "attention key projection",
    "attn_v": "attention value projection",
    "attn_qkv": "fused query/key/value projection",
    "attn_output": "attention output projection",
    "ffn_gate": "dense FFN gate projection",
    "ffn_up": "dense FFN up projection",
    "ffn_down": "dense FFN down projection",
    "ffn_gate_inp": "MoE router's gate (one row of logit weights an expert)",
    "ffn_gate_exps": "routed experts' gate projections",
    "ffn_up_exps": "routed experts' up projections",
    "ffn_down_exps": "routed experts' down projections",
    "ffn_gate_shexp": "shared expert's gate projection",
    "ffn_up_shexp": "shared expert's up projection",
    "ffn_down_shexp": "shared expert's down projection",
    "ssm_in": "Mamba2 / linear-attention input projection",
    "ssm_out": "Mamba2 / linear-attention output projection",
}
EXPERT_ROLES = frozenset({"ffn_gate_exps", "ffn_up_exps", "ffn_down_exps"})


class WeightMismatch(ValueError):
    """The tensors do not fit the path (shape, format, a role missing): the
    message says which and why, in one line; the bench makes it bad input."""


@dataclass(frozen=True)
class ModelTensor:
    """One weight tensor read from a model file.

    ``values`` is float32, decoded: ``[n, k]`` (rows of ``k`` inputs, one
    per output), or ``[experts, n, k]`` for an expert role. Where the file
    stores a format an arm reads as stored, that form rides along so the arm
    reads the file's bytes rather than a re-encoding:

    * ``q4k``: Q4_K blocks, uint8 ``[..., n, k / 256 * 144]``;
    * ``fp8`` with ``fp8_scale``: E4M3 bytes, uint8 ``[..., n, k]``, and the
      scale tensor as float32 — ``[..., ceil(n/128), ceil(k/128)]`` block
      scales, ``[..., n]`` per channel or ``[]`` per tensor
      (``fp8_scale_kind``: ``"block128"``, ``"channel"``, ``"tensor"``);
      ``values`` is ``e4m3 * scale``;
    * ``nvfp4`` with ``nvfp4_scale`` and ``nvfp4_global``: packed E2M1
      (two a byte, low nibble first), uint8 ``[..., n, k / 2]``, E4M3 block
      scales of 16 inputs, uint8 ``[..., n, k / 16]``, and the float32
      global scale (for an expert role, float32 ``[experts]``: one per
      expert, as ModelOpt stores each expert's); ``values`` is ``e2m1 *
      scale * global``.
    """

    file: str
    name: str
    role: str
    layer: int | None
    stored: str  # Q4_K, F16, BF16, F32, F8_E4M3, NVFP4
    values: Any
    q4k: Any = None
    fp8: Any = None
    fp8_scale: Any = None
    fp8_scale_kind: str | None = None
    nvfp4: Any = None
    nvfp4_scale: Any = None
    nvfp4_global: Any = None  # float, or float32 [experts]

    @property
    def experts(self) -> int | None:
        return int(self.values.shape[0]) if self.values.ndim == 3 else None

    @property
    def n(self) -> int:
        return int(self.values.shape[-2])

    @property
    def k(self) -> int:
        return int(self.values.shape[-1])

    def label(self) -> str:
        """Short id for shape labels: the tensor's name."""
        return self.name


Apply = Callable[[Any, Mapping[str, ModelTensor]], Any]


@dataclass(frozen=True)
class WeightUse:
    """What a path reads from a model file.

    ``groups``: the role sets the path can run on, each read together (the
    FFN arms run on any one of gate, up or down; MoE gate/up needs both
    expert tensors of a layer). ``apply(path, tensors)`` takes one group's
    tensors by role and returns the path on them, or raises
    :class:`WeightMismatch`.
    """

    groups: tuple[tuple[str, ...], ...]
    apply: Apply

    def __post_init__(self) -> None:
        for group in self.groups:
            unknown = [r for r in group if r not in ROLES]
            if unknown:
                raise ValueError(f"unknown weight roles {unknown}")

    def roles(self) -> frozenset[str]:
        return frozenset(r for g in self.groups for r in g)

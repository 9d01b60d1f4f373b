"""What the two ``mamba2.*`` paths share: the model's Mamba2 sizes, from a
recipe's ``[model.mamba2]`` and ``[model.bench].prefill_tokens``
(Nemotron-H-8B's when absent)."""

from __future__ import annotations

from typing import Any, Mapping

F16, F32 = 2, 4

# Nemotron-H-8B, the fallback when a recipe has no [model.mamba2].
NEMOTRON_H_8B = {"hidden": 4096, "heads": 128, "head_dim": 64, "state": 128, "groups": 8, "conv_width": 4, "chunk": 128}
NEMOTRON_H_TOKENS = (512, 4096)

# Every path of the family needs a model with Mamba2 layers.
MODEL_SECTIONS = ("mamba2",)


def model_sizes(model: Mapping[str, Any] | None) -> tuple[dict, list[int], int]:
    """(the Mamba2 sizes, prompt lengths, hidden size) of a recipe's model
    with a ``[model.mamba2]`` table, else Nemotron-H-8B's."""
    model = model or {}
    if not model.get("mamba2"):
        return dict(NEMOTRON_H_8B), list(NEMOTRON_H_TOKENS), NEMOTRON_H_8B["hidden"]
    m2 = {**NEMOTRON_H_8B, **dict(model["mamba2"])}
    tokens = (model.get("bench") or {}).get("prefill_tokens") or NEMOTRON_H_TOKENS
    return m2, [int(t) for t in tokens], int(model.get("hidden") or NEMOTRON_H_8B["hidden"])

"""Decision tables of the LoRA projection (``kernels/lora/``).

A projection with a rank-r adapter, y = x W^T + s (x A^T) B^T. Atlas's
lora_eager folds the adapter into the weights once at load; off, the
adapter is applied at every forward. Metrale's field of the same name is
another matter (decode and verify run without CUDA graphs while a LoRA pool
is loaded: attention.decode_graph lists it); Metrale applies its adapters
at every forward (an installed adapter forces the split SiLU decode and
keeps the NVFP4 MMQ prefill arm out, which a merged adapter would not need),
so its path has the per-forward variant only. In both engines lora_rotate
permits swapping the adapter at run time: it chooses no kernel, it binds
whether a swap between calls is made (and must take effect) or refused.
"""

from __future__ import annotations

from .rules import Rule, Table

_LORA_ROTATE = (
    "permits swapping the adapter between calls: the next call must use the new adapter "
    "(per_forward: a pointer swap; merged: W' re-merged from the kept base weights); "
    "off, a swap is refused and the loaded adapter stays"
)

PROJ = Table(
    path="lora.proj",
    summary="LoRA projection y = x W^T + s (x A^T) B^T: adapter applied per forward vs merged into W at load",
    levers=("lora_eager", "lora_rotate"),
    variants=("per_forward", "merged"),
    engines=("atlas",),
    rules=(
        Rule(
            "merged",
            {"lora_eager": True},
            note="lora_eager: W' = W + s B A merged once at load; a call is the base projection alone",
        ),
        Rule("per_forward"),
    ),
    binds={"lora_rotate": _LORA_ROTATE},
)

PROJ_POOL = Table(
    path="lora.proj_pool",
    summary="LoRA projection y = x W^T + s (x A^T) B^T with a LoRA pool: the adapter applied per forward",
    levers=("lora_rotate",),
    variants=("per_forward",),
    engines=("metrale",),
    rules=(Rule("per_forward"),),
    binds={"lora_rotate": _LORA_ROTATE},
)

TABLES = (PROJ, PROJ_POOL)

"""``lora.proj_pool`` (Metrale): the adapter of a LoRA pool, applied per
forward (``lora.proj``'s ``per_forward`` variant)."""

from __future__ import annotations

from ...selection.lora import PROJ_POOL as TABLE
from .. import family
from ..proj.spec import PER_FORWARD

PATH = family.declare(TABLE, {"per_forward": PER_FORWARD})

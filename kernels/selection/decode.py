"""Decision tables of the decode family: the whole decode step of a batch,
at once or one sequence at a time (``kernels/decode/``).

Metrale has two levers that send a batch's decode one sequence at a time,
each on models of one kind: ``mla_perseq_fallback`` on a model whose
attention is MLA, ``hc_perseq_decode`` on a model with hyper-connections
(``hc_mult > 0``). The engine decides the latter before its expert-parallel
branch, so a batch with a communicator goes per sequence too: no serving
fact of this table can stop it. What kind of model it is belongs to the
model, not to a lever: every shape of the path states ``mla`` and
``hc_mult``. (Metrale also decodes per sequence, whatever the levers, while
a QSA indexer is active; no model here has one, so the table leaves it out.)
"""

from __future__ import annotations

from .attention import HAS_HC
from .rules import Rule, Table, flag

IS_MLA = flag("mla", on="the model is MLA", off="the model is not MLA", why="the model's attention is not MLA")

PER_SEQUENCE = Table(
    path="decode.per_sequence",
    summary="a decode step (GDN + paged attention, or MLA, per layer) for the whole batch vs one sequence at a time",
    levers=("hc_perseq_decode", "mla_perseq_fallback"),
    variants=("batched", "per_sequence"),
    engines=("metrale",),
    rules=(
        Rule(
            "per_sequence",
            {"hc_perseq_decode": True},
            (HAS_HC,),
            note="hc_perseq_decode on a model with hyper-connections: the step runs once per sequence "
            "(decided before the expert-parallel branch)",
        ),
        Rule(
            "per_sequence",
            {"mla_perseq_fallback": True},
            (IS_MLA,),
            note="mla_perseq_fallback on an MLA model: the step runs once per sequence",
        ),
        Rule(
            "batched",
            {"hc_perseq_decode": True, "mla_perseq_fallback": True},
            # Both rules above failed: neither condition holds (not "either fails", as {unmet} words it).
            note="hc_perseq_decode and mla_perseq_fallback are on but the model has neither hyper-connections "
            "nor MLA attention: the batch decodes at once",
        ),
        Rule(
            "batched",
            {"hc_perseq_decode": True},
            note="hc_perseq_decode is on but {unmet}: the batch decodes at once",
        ),
        Rule(
            "batched",
            {"mla_perseq_fallback": True},
            note="mla_perseq_fallback is on but {unmet}: the batch decodes at once",
        ),
        Rule("batched"),
    ),
)

TABLES = (PER_SEQUENCE,)

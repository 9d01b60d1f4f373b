"""Which variant each kernel path takes: the decision tables ``select()`` runs.

One table per declared kernel path. The family declarations build their
``select`` from these tables (``KernelPath.select = TABLE.select``), and
``leverctl explain`` words what each lever value selects from the same rows,
so what the tool says a lever does is what the kernels do: there is no
second, hand-written description to drift.

A table is a decision list: the first :class:`Rule` whose lever values all
match and whose shape conditions all hold gives the variant. A rule's note
says why the levers did not get what they asked for at that shape (recorded
with the result); ``{unmet}`` in a note stands for the reasons the earlier
rules' shape conditions gave.

This module is plain data and imports neither numba nor numpy, so the
lever commands (``explain``) can read it cheaply.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Callable, Mapping


@dataclass(frozen=True)
class Choice:
    """What ``select`` decided: the variant, and a note when the levers asked
    for something the shape does not allow (recorded with the result).
    Declared here, not with the kernel-path contract, so that ``explain``
    reads the tables without loading that contract."""

    variant: str
    note: str = ""


Dims = Mapping[str, Any]  # a Shape, or any mapping of its named sizes


@dataclass(frozen=True)
class Cond:
    """A condition on the shape. ``text`` says when it holds and
    ``negation`` when it does not, in symbols (``T = 17``, ``T != 17``);
    ``why`` says why it failed at one shape, with the shape's numbers.

    A *guard* (``negation`` and ``why`` empty, made by :func:`_guard`) sends
    the shapes it holds at to a fallback before the levers are asked; that
    it failed is nobody's reason, so notes (``{unmet}``) and explain's
    wording of later rules leave it out."""

    text: str
    negation: str
    test: Callable[[Dims], bool]
    why: Callable[[Dims], str]


@dataclass(frozen=True)
class Rule:
    """``variant`` when every lever in ``levers`` has the given value and
    every condition in ``shape`` holds. ``note`` may name shape sizes
    (``{t}``) and ``{unmet}``."""

    variant: str
    levers: Mapping[str, bool] = field(default_factory=dict)
    shape: tuple[Cond, ...] = ()
    note: str = ""


class _Symbols(dict):
    """Fills a note's placeholders with symbols when no shape is at hand."""

    def __init__(self, symbols: Mapping[str, str], unmet: str):
        super().__init__(symbols, unmet=unmet)

    def __missing__(self, key: str) -> str:
        return key


@dataclass(frozen=True)
class Table:
    path: str  # "gdn.verify"
    summary: str  # the path in one line
    levers: tuple[str, ...]  # the lever fields that choose, in sweep order
    # The value a lever takes when the caller's mapping leaves it out (or
    # holds None, a tri-state left to the call site): the catalogs' default,
    # or `fixed` where the path pins it.
    assumed: Mapping[str, bool]
    variants: tuple[str, ...]  # in the order the bench lists them
    rules: tuple[Rule, ...]
    # The value a lever takes in an engine whose catalog lacks it (Atlas has
    # no decode_split_silu: its FFN decode is always the fused kernel).
    fixed: Mapping[str, Any] = field(default_factory=dict)
    engines: tuple[str, ...] = ()  # empty: every engine whose catalog has one of `levers`
    symbols: Mapping[str, str] = field(default_factory=dict)  # shape key -> symbol in words ("t" -> "T")
    # Variants no rule selects, which bench and sweep run beside the selected
    # one for contrast (``KernelPath.baselines``).
    baselines: tuple[str, ...] = ()
    # Levers whose value reaches the run itself rather than choosing the
    # variant (``KernelPath.bind``): lever -> what its value does there.
    binds: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name in ("assumed", "fixed", "symbols", "binds"):
            object.__setattr__(self, name, MappingProxyType(dict(getattr(self, name))))
        if self.rules and (self.rules[-1].levers or self.rules[-1].shape):
            raise ValueError(f"{self.path}: the last rule must match anything")
        for r in self.rules:
            if r.variant not in self.variants:
                raise ValueError(f"{self.path}: rule names unknown variant {r.variant!r}")
            for f in r.levers:
                if f not in self.levers:
                    raise ValueError(f"{self.path}: rule names lever {f!r}, not one of {self.levers}")
        for b in self.baselines:
            if b not in self.variants or any(r.variant == b for r in self.rules):
                raise ValueError(f"{self.path}: baseline {b!r} must be a variant that no rule selects")
        for f in self.binds:
            if f not in self.levers:
                raise ValueError(f"{self.path}: binds lever {f!r}, not one of {self.levers}")

    def value(self, levers: Mapping[str, Any], name: str) -> bool:
        v = levers.get(name)
        return bool(self.assumed[name]) if v is None else bool(v)

    def select(self, levers: Mapping[str, Any], shape: Dims) -> Choice:
        """The variant these lever values take at ``shape``."""
        unmet: list[str] = []
        for rule in self.rules:
            if any(self.value(levers, f) != want for f, want in rule.levers.items()):
                continue
            failed = [c for c in rule.shape if not c.test(shape)]
            if failed:
                unmet.extend(w for w in (c.why(shape) for c in failed) if w)
                continue
            dims = dict(getattr(shape, "dims", shape))
            # a condition failed by two rules is one reason, said once
            return Choice(rule.variant, rule.note.format(**dims, unmet=" and ".join(dict.fromkeys(unmet))))
        raise AssertionError(f"{self.path}: no rule matched")  # __post_init__ forbids it

    def cases(self, levers: Mapping[str, Any]) -> tuple[Case, ...]:
        """What these lever values select, shape by shape, in words: the
        rules they reach, in order; the last one holds at every other shape."""
        out: list[Case] = []
        skipped: list[str] = []
        for rule in self.rules:
            if any(self.value(levers, f) != want for f, want in rule.levers.items()):
                continue
            when = {c.text for c in rule.shape}
            if any(set(c.when) <= when for c in out):
                continue  # an earlier case holds wherever this rule would: never reached
            note = rule.note.format_map(_Symbols(self.symbols, " or ".join(skipped))) if rule.note else ""
            out.append(Case(tuple(c.text for c in rule.shape), rule.variant, note))
            if not rule.shape:
                break
            skipped.extend(c.negation for c in rule.shape if c.negation)
        return tuple(out)

    def cond(self, text: str) -> Cond:
        for rule in self.rules:
            for c in rule.shape:
                if c.text == text:
                    return c
        raise KeyError(text)


@dataclass(frozen=True)
class Case:
    """One row of what a setting selects: ``variant`` where every condition
    in ``when`` holds (and no earlier case's did); ``when`` empty: every
    other shape."""

    when: tuple[str, ...]
    variant: str
    note: str = ""

    def holds(self, table: Table, shape: Dims) -> bool:
        return all(table.cond(t).test(shape) for t in self.when)


def _cond(text: str, negation: str, test: Callable[[Dims], bool], why: Callable[[Dims], str]) -> Cond:
    return Cond(text, negation, test, why)


def _guard(text: str, test: Callable[[Dims], bool]) -> Cond:
    """A guard (see :class:`Cond`): holds where ``text`` says."""
    return Cond(text, "", test, lambda d: "")


# ── w4a16 ───────────────────────────────────────────────────────────────────

SMALL_M_MAX_ROWS = 64
TC_K_MULTIPLE = 16  # the tensor-core GEMMs' K step (one m16n8k16 MMA, one wgmma k16)

W4A16_GEMV = Table(
    path="w4a16.gemv",
    summary="Decode GEMV y = W x (int4 weights, fp16 activations, m = 1)",
    levers=("gemv_sw",),
    assumed={"gemv_sw": True},
    variants=("gemv_sw", "gemv_64t"),
    rules=(Rule("gemv_sw", {"gemv_sw": True}), Rule("gemv_64t")),
)

W4A16_GEMV_DUAL = Table(
    path="w4a16.gemv_dual",
    summary="Decode dual GEMV: gate = W_gate x and up = W_up x in one pass",
    levers=("gemv_sw",),
    assumed={"gemv_sw": True},
    variants=("gemv_dual_sw", "gemv_dual_64t"),
    rules=(Rule("gemv_dual_sw", {"gemv_sw": True}), Rule("gemv_dual_64t")),
)

W4A16_FFN_DECODE = Table(
    path="w4a16.ffn_decode",
    summary="Dense SiLU FFN for one token: y = W_down (silu(W_gate x) * (W_up x))",
    levers=("decode_ffn_via_gemm", "decode_split_silu", "gemv_sw"),
    assumed={"decode_ffn_via_gemm": False, "decode_split_silu": False, "gemv_sw": True},
    fixed={"decode_split_silu": False},  # Atlas: always the fused kernel
    variants=("gemv_sw+fused", "gemv_64t+fused", "gemv_sw+split", "gemv_64t+split", "gemm_m1"),
    rules=(
        Rule("gemm_m1", {"decode_ffn_via_gemm": True}),
        Rule("gemv_sw+split", {"decode_split_silu": True, "gemv_sw": True}),
        Rule("gemv_64t+split", {"decode_split_silu": True}),
        Rule("gemv_sw+fused", {"gemv_sw": True}),
        Rule("gemv_64t+fused"),
    ),
)

_SMALL_M_ROWS = _cond(f"m <= {SMALL_M_MAX_ROWS}", f"m > {SMALL_M_MAX_ROWS}",
                      lambda d: d["m"] <= SMALL_M_MAX_ROWS, lambda d: f"m={d['m']} > {SMALL_M_MAX_ROWS}")
_NO_TC_K = _guard(f"k % {TC_K_MULTIPLE} != 0", lambda d: d["k"] % TC_K_MULTIPLE != 0)

# small_m and default_tiles run on tensor cores (mma.sync or wgmma, the one
# `common/tc.py` picks), which step K by 16 and have no K edge; fma_tiles is
# the FP32-FMA GEMM they replaced, kept for the shapes they cannot run.
W4A16_GEMM = Table(
    path="w4a16.gemm",
    summary="W4A16 GEMM c = a W^T (FFN projections of a batch) on tensor cores",
    levers=("ffn_small_m",),
    assumed={"ffn_small_m": True},
    variants=("small_m", "default_tiles", "fma_tiles"),
    rules=(
        Rule("fma_tiles", {}, (_NO_TC_K,),
             note=f"the tensor-core GEMMs step K by {TC_K_MULTIPLE}: FP32-FMA tiles whatever ffn_small_m says"),
        Rule("default_tiles", {"ffn_small_m": False}),
        Rule("small_m", {}, (_SMALL_M_ROWS,)),
        Rule("default_tiles", note="ffn_small_m is on but {unmet}: default tiles"),
    ),
)

# ── gdn ─────────────────────────────────────────────────────────────────────

FUSED_HEAD_DIM = 128  # the head dim the engine's fused conv kernel is built for

GDN_PREFILL = Table(
    path="gdn.prefill",
    summary="chunked GDN prefill (WY form), carried state in and out",
    levers=("gdn_regresident",),
    assumed={"gdn_regresident": True},
    variants=("regresident", "global_state"),
    rules=(
        Rule("regresident", {"gdn_regresident": True}),
        Rule("global_state", note="gdn_regresident off: the state round-trips through global memory every chunk"),
    ),
)

_T17 = _cond("T = 17", "T != 17", lambda d: d["t"] == 17, lambda d: f"T={d['t']}, not 17")

GDN_VERIFY = Table(
    path="gdn.verify",
    summary="speculative verify: T tokens against one carried state",
    levers=("gdn_wy17", "gdn_wyn"),
    assumed={"gdn_wy17": True, "gdn_wyn": True},
    variants=("wy17", "wyn", "recurrent"),
    symbols={"t": "T"},
    rules=(
        Rule("wy17", {"gdn_wy17": True}, (_T17,)),
        Rule("wyn", {"gdn_wy17": False, "gdn_wyn": True}, (_T17,),
             note="gdn_wy17 off: 17 tokens take the general WY-N kernel"),
        Rule("wyn", {"gdn_wyn": True}),
        Rule("recurrent", {"gdn_wy17": False}, (_T17,),
             note="gdn_wy17 and gdn_wyn off: token-by-token recurrence"),
        Rule("recurrent", note="gdn_wyn off: {t} tokens take the token-by-token recurrence"),
    ),
)

_BATCH = _cond("N > 1", "N = 1", lambda d: d["n"] > 1, lambda d: f"N={d['n']}")

GDN_DECODE = Table(
    path="gdn.decode",
    summary="multi-sequence single-token decode over a state pool indexed by slot",
    levers=("gdn_batched_fla",),
    assumed={"gdn_batched_fla": False},
    variants=("batched", "per_sequence"),
    # Atlas's gdn_batched_fla steers multi-sequence decode; Metrale's field of
    # the same name steers multi-stream *prefill* (its lever file), a path
    # with no kernel here, so this path is Atlas's alone.
    engines=("atlas",),
    symbols={"n": "N"},
    rules=(
        Rule("batched", {"gdn_batched_fla": True}),
        Rule("per_sequence", {}, (_BATCH,), note="gdn_batched_fla off: one launch per sequence"),
        Rule("per_sequence"),
    ),
)


def _fused_dim(d: Dims) -> int:
    return d.get("fused_head_dim", FUSED_HEAD_DIM)


_HV_2HK = _cond("Hv = 2 Hk", "Hv != 2 Hk", lambda d: d["hv"] == 2 * d["hk"],
                lambda d: f"fused conv kernel needs Hv == 2*Hk (got Hv={d['hv']}, Hk={d['hk']})")
_D128 = _cond(f"dk = dv = {FUSED_HEAD_DIM}", f"dk or dv != {FUSED_HEAD_DIM}",
              lambda d: d["dk"] == d["dv"] == _fused_dim(d),
              lambda d: f"fused conv kernel needs dk == dv == {_fused_dim(d)} (got dk={d['dk']}, dv={d['dv']})")

GDN_FUSED_CONV = Table(
    path="gdn.fused_conv",
    summary="decode conv1d+SiLU, GDN step and gated RMSNorm: fused vs separate kernels",
    levers=("gdn_fused_conv",),
    assumed={"gdn_fused_conv": False},
    variants=("fused", "separate"),
    engines=("metrale",),
    rules=(
        Rule("separate", {"gdn_fused_conv": False}),
        Rule("fused", {}, (_HV_2HK, _D128)),
        Rule("separate", note="gdn_fused_conv on but not taken: {unmet}"),
    ),
)

# ── attention ───────────────────────────────────────────────────────────────

_HC = _cond("hc_mult > 0", "hc_mult = 0", lambda d: d.get("hc_mult", 0) > 0,
            lambda d: f"the model has no hyper-connections (hc_mult = {d.get('hc_mult', 0)})")

ATTENTION_PAGED_DECODE = Table(
    path="attention.paged_decode",
    summary="paged GQA decode attention, split-K online softmax and a merge kernel",
    levers=("hc_perseq_decode", "max_decode_seqs", "kv_poison"),
    assumed={"hc_perseq_decode": False, "max_decode_seqs": True, "kv_poison": False},
    # Atlas has no per-sequence decode lever: its batch always decodes in one launch.
    fixed={"hc_perseq_decode": False},
    variants=("split_pinned", "per_sequence", "split_live_batch"),
    engines=("atlas", "metrale"),
    rules=(
        Rule("per_sequence", {"hc_perseq_decode": True}, (_HC,),
             note="hc_perseq_decode: one launch pair per sequence of the batch"),
        Rule("split_pinned", {"hc_perseq_decode": True},
             note="hc_perseq_decode is on but {unmet}: the batch decodes in one launch"),
        Rule("split_pinned"),
    ),
    baselines=("split_live_batch",),
    binds={
        "max_decode_seqs": "pins the split-K count: each sequence's split count follows from its own "
                           "length and this value, never from the live batch, so a sequence decoded alone "
                           "gets the bits it gets co-batched",
        "kv_poison": "fills the unwritten slots of each sequence's fresh tail KV block with NaN (Atlas) "
                     "or 0xFF bytes (Metrale) instead of zeros; a kernel reading them turns NaN",
    },
)

# ── attention: weight pre-rotation (Metrale) ───────────────────────────────

ROTATION_HEAD_DIM = 128  # the only head dim the engine's loader rotates at

_ROT_D128 = _cond(f"d = {ROTATION_HEAD_DIM}", f"d != {ROTATION_HEAD_DIM}",
                  lambda d: d["d"] == ROTATION_HEAD_DIM,
                  lambda d: f"the loader rotates weights only at head dim {ROTATION_HEAD_DIM} (d = {d['d']})")

ATTENTION_ROTATION = Table(
    path="attention.rotation",
    summary="rotated q, k, v and the FP8 KV-cache write: weights rotated at load vs a run-time Hadamard",
    levers=("weight_pre_rotated",),
    assumed={"weight_pre_rotated": False},
    variants=("pre_rotated", "runtime_rotation"),
    engines=("metrale",),
    symbols={"d": "d"},
    rules=(
        Rule("pre_rotated", {"weight_pre_rotated": True}, (_ROT_D128,)),
        Rule("runtime_rotation", {"weight_pre_rotated": True},
             note="weight_pre_rotated is on but {unmet}: the KV-cache write rotates at run time"),
        Rule("runtime_rotation"),
    ),
)

# ── attention: decode step as a CUDA graph (Metrale) ───────────────────────

_COMM = _cond("communicator", "no communicator", lambda d: bool(d.get("communicator", 0)),
              lambda d: "no expert-parallel communicator")
_LORA = _cond("LoRA pool loaded", "no LoRA pool", lambda d: bool(d.get("lora_pool", 0)),
              lambda d: "no LoRA pool is loaded")

ATTENTION_DECODE_GRAPH = Table(
    path="attention.decode_graph",
    summary="one decode step (GDN decode + paged attention per layer): CUDA graph replay vs eager launches",
    levers=("ep_graphs", "gdn_decode_graph", "ms_profile", "lora_eager"),
    assumed={"ep_graphs": False, "gdn_decode_graph": False, "ms_profile": False, "lora_eager": False},
    variants=("graph", "eager"),
    engines=("metrale",),
    rules=(
        Rule("eager", {"ms_profile": True},
             note="ms_profile: its profiling syncs are illegal inside a capture, so the step runs eagerly"),
        Rule("eager", {"lora_eager": True}, (_LORA,),
             note="lora_eager with a LoRA pool loaded: the step runs eagerly"),
        Rule("eager", {"ep_graphs": False, "gdn_decode_graph": False}, (_COMM,),
             note="an expert-parallel communicator is present and neither ep_graphs nor "
                  "gdn_decode_graph permits capture: the step runs eagerly"),
        Rule("graph"),
    ),
)

# The DFlash draft head's block-layer attention. Both engines' lever is a
# plain opt-in with nothing else to satisfy: on, the contiguous-KV forward;
# off, the paged one.
ATTENTION_DFLASH_CONTIG = Table(
    path="attention.dflash_contig",
    summary="DFlash draft block attention: T causal draft queries over the target's GQA context",
    levers=("dflash_contig_attn",),
    assumed={"dflash_contig_attn": False},
    variants=("paged", "contig"),
    engines=("atlas", "metrale"),
    rules=(
        Rule("contig", {"dflash_contig_attn": True}),
        Rule("paged"),
    ),
)

# MLA decode (latent KV): Metrale's fallback decodes the batch one sequence
# at a time. Every shape of this path is an MLA model, so the lever alone decides.
ATTENTION_MLA_DECODE = Table(
    path="attention.mla_decode",
    summary="MLA decode attention in the latent space (absorbed query weights), latent + rotary KV cache",
    levers=("mla_perseq_fallback",),
    assumed={"mla_perseq_fallback": False},
    variants=("batched", "per_sequence"),
    engines=("metrale",),
    rules=(
        Rule("per_sequence", {"mla_perseq_fallback": True},
             note="mla_perseq_fallback: one launch per sequence of the batch"),
        Rule("batched"),
    ),
)


# ── ffn (dense-FFN prefill) ─────────────────────────────────────────────────
#
# Metrale's dense SiLU FFN at prefill runs two GEMMs per layer, gate+up
# (K = hidden) and down (K = intermediate), through its default W4A16 GEMM or
# one of eight arms. The seed fixes two orders: the NVFP4 MMQ arm comes before
# the Q4_K MMQ arm (Q4_K applies only while NVFP4 MMQ is not active), and the
# down projection follows the gate/up arm (``ffn_nvfp4_mmq_down`` acts only
# under ``ffn_nvfp4_mmq``; ``ffn_mmq_down_q4k`` only under ``ffn_mmq``, and
# without it down goes through int8 faith2). It does not order the remaining
# opt-in arms. leverctl's decision: after the two MMQ arms (whose weights are
# stored in their own formats), the arms that quantise activations come from
# the narrowest format to the widest (W4A4 / NVFP4, int8, FP8, BF16), so a
# lever that quantises more is never hidden behind one that quantises less;
# the default W4A16 GEMM comes last. With the NVFP4 MMQ arm active and its
# down lever off, down takes the default W4A16 GEMM.
#
# Every arm is honoured by the engine only "when its kernels are loaded". The
# engine's table (FFN_PREFILL_ENGINE) has every arm loaded; the declared path
# runs FFN_PREFILL, the same rules less the arms with no kernel here
# (FFN_PREFILL_BUILT), which is what the engine does when an arm's kernels
# are not loaded: the levers fall through to the next arm. A built arm also
# counts as not loaded for a projection whose weights its format cannot
# hold, read off the shape:
#
# * NVFP4 (the NVFP4 MMQ arm, W4A4): weights come in blocks of 16 along K,
#   so a projection with k % 16 != 0 has none. leverctl's reading of the
#   seed's "when its kernels are loaded" for the NVFP4 MMQ arm is exactly
#   this: the kernels load with the model's NVFP4 weights, per projection.
#   The seed also requires that no LoRA adapter be installed (the shape's
#   ``lora``, 0 in every shape this path benches). The down projection
#   cannot see the gate/up projection's K; leverctl takes the gate/up arm as
#   active at a down shape when its lever is on and no adapter is installed.
# * Q4_K (the Q4_K MMQ arm): super-blocks of 256. Where k % 256 != 0 a guard
#   sends ffn_mmq to the arms after it, as though it were off, so explain
#   says so.

_GATE_UP = _cond("gate+up", "down", lambda d: not d["down"], lambda d: "the down projection")
_DOWN = _cond("down", "gate+up", lambda d: bool(d["down"]), lambda d: "the gate+up projection")
_NO_LORA = _cond("no LoRA adapter", "a LoRA adapter", lambda d: not d.get("lora", 0),
                 lambda d: "a LoRA adapter is installed")

NVFP4_BLOCK = 16
_K_NVFP4 = _cond(f"k % {NVFP4_BLOCK} = 0", f"k % {NVFP4_BLOCK} != 0", lambda d: d["k"] % NVFP4_BLOCK == 0,
                 lambda d: f"k={d['k']} is not a multiple of the NVFP4 block ({NVFP4_BLOCK})")

# Q4_K super-blocks hold 256 values: a projection whose K is not a multiple
# has no Q4_K weights, and the arm is not loaded for it.
Q4K_BLOCK = 256
_NO_Q4K = _guard(f"k % {Q4K_BLOCK} != 0", lambda d: d["k"] % Q4K_BLOCK != 0)
_NO_Q4K_NOTE = (f"Q4_K weights come in super-blocks of {Q4K_BLOCK}: the Q4_K arm is not loaded at this k "
                "and ffn_mmq falls through to the arms after it")

FFN_PREFILL_VARIANTS = ("w4a16", "bf16_v1", "bf16_v2", "fp8_m64", "int8_faith2", "int8_faith5",
                        "nvfp4_mmq", "q4k_mmq", "w4a4")

_Q4K = frozenset({"q4k_mmq", "int8_faith2"})

# (the variants an arm needs built, its rules), in precedence order. The
# Q4_K arm's rules follow its guard (``ffn_prefill_table``), so they need no
# condition on k.
FFN_PREFILL_ARMS: tuple[tuple[frozenset, tuple[Rule, ...]], ...] = (
    (frozenset({"nvfp4_mmq"}), (
        Rule("nvfp4_mmq", {"ffn_nvfp4_mmq": True}, (_GATE_UP, _NO_LORA, _K_NVFP4)),
        Rule("nvfp4_mmq", {"ffn_nvfp4_mmq": True, "ffn_nvfp4_mmq_down": True}, (_DOWN, _NO_LORA, _K_NVFP4)),
        Rule("w4a16", {"ffn_nvfp4_mmq": True, "ffn_nvfp4_mmq_down": False}, (_DOWN, _NO_LORA),
             note="ffn_nvfp4_mmq_down off: down takes the default W4A16 GEMM while gate+up run NVFP4 MMQ"),
        Rule("w4a16", {"ffn_nvfp4_mmq": True}, (_DOWN, _NO_LORA),
             note=f"down has no NVFP4 weights at k % {NVFP4_BLOCK} != 0: the default W4A16 GEMM, "
                  "while gate+up run NVFP4 MMQ"),
    )),
    (_Q4K, (
        Rule("q4k_mmq", {"ffn_mmq": True}, (_GATE_UP,)),
        Rule("q4k_mmq", {"ffn_mmq": True, "ffn_mmq_down_q4k": True}),
        Rule("int8_faith2", {"ffn_mmq": True},
             note="ffn_mmq without ffn_mmq_down_q4k: down goes through the int8 faith2 GEMM"),
    )),
    (frozenset({"w4a4"}), (Rule("w4a4", {"fp4_prefill": True}, (_K_NVFP4,)),)),
    (frozenset({"int8_faith5"}), (Rule("int8_faith5", {"int8_prefill": True, "int8_faith5": True}),)),
    (frozenset({"int8_faith2"}), (Rule("int8_faith2", {"int8_prefill": True}),)),
    (frozenset({"fp8_m64"}), (Rule("fp8_m64", {"fp8_m64_prefill": True}),)),
    (frozenset({"bf16_v2"}), (Rule("bf16_v2", {"bf16_tc_prefill": True, "prefill_v2": True}),)),
    (frozenset({"bf16_v1"}), (Rule("bf16_v1", {"bf16_tc_prefill": True}),)),
    (frozenset({"w4a16"}), (Rule("w4a16"),)),
)

# The arms with a kernel in leverctl_kernels.ffn_prefill.
FFN_PREFILL_BUILT = frozenset(FFN_PREFILL_VARIANTS)


def _q4k_guard(later: tuple[Rule, ...]) -> tuple[Rule, ...]:
    """The Q4_K arm's guard: each rule after the arm, also requiring
    ffn_mmq and holding only at k % 256 != 0 (ffn_mmq then selects what it
    would select were it off)."""
    return tuple(Rule(r.variant, {"ffn_mmq": True, **r.levers}, (_NO_Q4K, *r.shape),
                      note=_NO_Q4K_NOTE + (f"; {r.note}" if r.note else ""))
                 for r in later if "ffn_mmq" not in r.levers)


def ffn_prefill_table(built: frozenset = frozenset(FFN_PREFILL_VARIANTS)) -> Table:
    """The dense-FFN prefill decision table with only the arms whose
    variants are all in ``built`` (the others fall through, as in the engine
    when their kernels are not loaded)."""
    arms = [(needs, arm) for needs, arm in FFN_PREFILL_ARMS if needs <= built]
    rules: list[Rule] = []
    for i, (needs, arm) in enumerate(arms):
        if needs == _Q4K:
            rules.extend(_q4k_guard(tuple(r for _, later in arms[i + 1:] for r in later)))
        rules.extend(arm)
    return Table(
        path="ffn.prefill",
        summary="Dense SiLU-FFN prefill GEMM c = a W^T (gate+up, then down) through the arm the levers pick",
        levers=("ffn_nvfp4_mmq", "ffn_nvfp4_mmq_down", "ffn_mmq", "ffn_mmq_down_q4k", "fp4_prefill",
                "int8_prefill", "int8_faith5", "fp8_m64_prefill", "bf16_tc_prefill", "prefill_v2"),
        assumed={"ffn_nvfp4_mmq": True, "ffn_nvfp4_mmq_down": True, "ffn_mmq": False, "ffn_mmq_down_q4k": False,
                 "fp4_prefill": False, "int8_prefill": False, "int8_faith5": False, "fp8_m64_prefill": False,
                 "bf16_tc_prefill": False, "prefill_v2": True},
        variants=tuple(v for v in FFN_PREFILL_VARIANTS if v in built),
        rules=tuple(rules),
        engines=("metrale",),
    )


FFN_PREFILL_ENGINE = ffn_prefill_table()
FFN_PREFILL = ffn_prefill_table(FFN_PREFILL_BUILT)

# ── attention projections (prefill q/k/v; FP8 projection GEMM) ──────────────

ATTENTION_PROJ_BF16_TC = Table(
    path="attention.proj_bf16_tc",
    summary="prefill q/k/v projection, NVFP4 weights: BF16 tensor cores vs activations crushed to FP8",
    levers=("bf16_tc_proj",),
    assumed={"bf16_tc_proj": False},
    variants=("bf16_tc", "fp8_e4m3"),
    engines=("atlas",),
    rules=(
        Rule("bf16_tc", {"bf16_tc_proj": True}),
        Rule("fp8_e4m3", note="bf16_tc_proj off: activations crushed to FP8 E4M3 (one scale per token), FP8 MMA"),
    ),
)

ATTENTION_PROJ_BF16_TC_W4A16 = Table(
    path="attention.proj_bf16_tc_w4a16",
    summary="prefill q/k/v projection, int4 weights: W4A16 BF16 GEMM with 128 x 128 tiles vs the default GEMM",
    levers=("bf16_tc_proj",),
    assumed={"bf16_tc_proj": False},
    variants=("bf16_n128", "w4a16_f16"),
    engines=("metrale",),
    rules=(
        Rule("bf16_n128", {"bf16_tc_proj": True}),
        Rule("w4a16_f16", note="bf16_tc_proj off: the default projection GEMM (fp16 activations)"),
    ),
)

FP8_M32_MIN_ROWS = 17  # the 32-row twin takes batches of more than 16 rows

_ROWS_ABOVE_16 = _cond("rows > 16", "rows <= 16", lambda d: d["m"] >= FP8_M32_MIN_ROWS,
                       lambda d: f"{d['m']} rows, not more than 16")

ATTENTION_PROJ_FP8 = Table(
    path="attention.proj_fp8",
    summary="FP8 E4M3 projection GEMM (per-channel weight scales): 32-row tensor-core twin vs 16-row kernel",
    levers=("fp8_attn_m32",),
    assumed={"fp8_attn_m32": False},
    variants=("m16", "m32"),
    engines=("metrale",),
    symbols={"m": "rows"},
    rules=(
        Rule("m32", {"fp8_attn_m32": True}, (_ROWS_ABOVE_16,)),
        Rule("m16", {"fp8_attn_m32": True}, note="fp8_attn_m32 is on but {unmet}: the 16-row kernel"),
        Rule("m16"),
    ),
)

# ── lora ────────────────────────────────────────────────────────────────────
#
# A projection with a rank-r adapter, y = x W^T + s (x A^T) B^T. Atlas's
# lora_eager folds the adapter into the weights once at load; off, the
# adapter is applied at every forward. Metrale's field of the same name is
# another matter (decode and verify run without CUDA graphs while a LoRA pool
# is loaded: attention.decode_graph lists it); Metrale applies its adapters
# at every forward (an installed adapter forces the split SiLU decode and
# keeps the NVFP4 MMQ prefill arm out, which a merged adapter would not need),
# so its path has the per-forward variant only. In both engines lora_rotate
# permits swapping the adapter at run time: it chooses no kernel, it binds
# whether a swap between calls is made (and must take effect) or refused.

_LORA_ROTATE = ("permits swapping the adapter between calls: the next call must use the new adapter "
                "(per_forward: a pointer swap; merged: W' re-merged from the kept base weights); "
                "off, a swap is refused and the loaded adapter stays")

LORA_PROJ = Table(
    path="lora.proj",
    summary="LoRA projection y = x W^T + s (x A^T) B^T: adapter applied per forward vs merged into W at load",
    levers=("lora_eager", "lora_rotate"),
    assumed={"lora_eager": False, "lora_rotate": False},
    variants=("per_forward", "merged"),
    engines=("atlas",),
    rules=(
        Rule("merged", {"lora_eager": True},
             note="lora_eager: W' = W + s B A merged once at load; a call is the base projection alone"),
        Rule("per_forward"),
    ),
    binds={"lora_rotate": _LORA_ROTATE},
)

LORA_PROJ_POOL = Table(
    path="lora.proj_pool",
    summary="LoRA projection y = x W^T + s (x A^T) B^T with a LoRA pool: the adapter applied per forward",
    levers=("lora_rotate",),
    assumed={"lora_rotate": False},
    variants=("per_forward",),
    engines=("metrale",),
    rules=(Rule("per_forward"),),
    binds={"lora_rotate": _LORA_ROTATE},
)

# ── mamba2 (Nemotron-H SSM layers, Metrale) ────────────────────────────────
#
# The prefill scan: the chunked SSD scan when ``ssd`` is on and the state
# size fits it (the engine's ``ssd_scan_fits(state_size)``), else the
# persistent kernel when ``ssm_persistent`` is on, else the sequential scan.
# The fit is this project's SSD kernels' shared-memory budget: their chunk
# blocks stage a 32-token tile of C and one of B as fp32 rows of the state
# size (rows padded by one word against bank conflicts: ``2 * 32 * 4 * (n + 1)``
# bytes), the tile's 32 x 32 decay-masked C.B block
# and the chunk's cumulative decay and dt (up to 256 tokens each), all within
# the 48 KiB any block may declare statically (``kernels/mamba2/ssd.py``).

SSD_TILE = 32  # tokens per staged C/B tile of the SSD kernels
SSD_MAX_CHUNK = 256  # longest chunk the SSD kernels hold the cumulative decay of
SSD_SMEM_LIMIT = 48 * 1024


def ssd_shared_bytes(n: int) -> int:
    """Shared memory of the SSD chunk kernels at state size ``n``."""
    return 4 * (2 * SSD_TILE * (n + 1) + SSD_TILE * SSD_TILE + 2 * SSD_MAX_CHUNK)


SSD_MAX_STATE = (SSD_SMEM_LIMIT // 4 - SSD_TILE * SSD_TILE - 2 * SSD_MAX_CHUNK) // (2 * SSD_TILE) - 1


def ssd_scan_fits(n: int) -> bool:
    return ssd_shared_bytes(n) <= SSD_SMEM_LIMIT


_SSD_FITS = _cond(f"state <= {SSD_MAX_STATE}", f"state > {SSD_MAX_STATE}", lambda d: ssd_scan_fits(d["n"]),
                  lambda d: f"state size {d['n']} does not fit the SSD scan's shared memory (at most {SSD_MAX_STATE})")

MAMBA2_PREFILL_SCAN = Table(
    path="mamba2.prefill_scan",
    summary="Mamba2 selective-state prefill scan over a prompt, carried state in and out",
    levers=("ssd", "ssm_persistent"),
    assumed={"ssd": True, "ssm_persistent": True},
    variants=("ssd", "persistent", "sequential"),
    engines=("metrale",),
    symbols={"n": "state"},
    rules=(
        Rule("ssd", {"ssd": True}, (_SSD_FITS,)),
        Rule("persistent", {"ssd": True, "ssm_persistent": True},
             note="ssd is on but {unmet}: the persistent kernel"),
        Rule("persistent", {"ssm_persistent": True}),
        Rule("sequential", {"ssd": True}, note="ssd is on but {unmet}, and ssm_persistent is off: sequential scan"),
        Rule("sequential"),
    ),
)

# The prefill projections: the W4A4 GEMM from 512 rows up when its kernels
# are loaded and the FP8 activation buffer holds the activations; otherwise
# the engine's default projection GEMM, which its lever file does not name:
# leverctl takes the W4A16 GEMM (as for the dense FFN's default arm). Both
# conditions are the shape's (``w4a4_loaded``, ``fp8_act``: the buffer's
# bytes), so a record states them; ``w4a4_min_rows`` is 512 but at smoke
# shapes, which lower it so that the simulator runs the W4A4 arm.
SSM_W4A4_MIN_ROWS = 512


def _w4a4_min_rows(d: Dims) -> int:
    return d.get("w4a4_min_rows", SSM_W4A4_MIN_ROWS)


_W4A4_ROWS = _cond(f"rows >= {SSM_W4A4_MIN_ROWS}", f"rows < {SSM_W4A4_MIN_ROWS}",
                   lambda d: d["m"] >= _w4a4_min_rows(d),
                   lambda d: f"{d['m']} rows, fewer than {_w4a4_min_rows(d)}")
_W4A4_LOADED = _cond("W4A4 kernels loaded", "W4A4 kernels not loaded", lambda d: bool(d.get("w4a4_loaded", 1)),
                     lambda d: "the W4A4 kernels are not loaded")
_FP8_ACT_FITS = _cond("fp8_act buffer >= rows x k", "fp8_act buffer < rows x k",
                      lambda d: d.get("fp8_act", d["m"] * d["k"]) >= d["m"] * d["k"],
                      lambda d: f"the fp8_act buffer ({d.get('fp8_act')} bytes) is smaller than "
                                f"{d['m']} x {d['k']} activations")

MAMBA2_PREFILL_PROJ = Table(
    path="mamba2.prefill_proj",
    summary="Mamba2 SSM prefill in/out projection GEMM c = a W^T: W4A4 (NVFP4 activations) vs the default W4A16",
    levers=("ssm_w4a4",),
    assumed={"ssm_w4a4": True},
    variants=("w4a4", "w4a16"),
    engines=("metrale",),
    symbols={"m": "rows"},
    rules=(
        Rule("w4a4", {"ssm_w4a4": True}, (_W4A4_ROWS, _W4A4_LOADED, _FP8_ACT_FITS)),
        Rule("w4a16", {"ssm_w4a4": True}, note="ssm_w4a4 is on but {unmet}: the default W4A16 GEMM"),
        Rule("w4a16"),
    ),
)

# ── gdn: multi-sequence decode projections (Metrale) ───────────────────────
#
# Qwen3-Next's GDN-layer projections in a multi-sequence decode: up to 16
# rows take the contiguous-batch GEMV tier (batch4 up to 4 rows, batch16
# above) when ``ssm_gemv_batch4`` is on and the tier's kernel resolved
# (``gemv_tier_loaded``). The lever file does not name the path taken
# otherwise; leverctl's choice: one W4A16 GEMV launch per row.
GEMV_BATCH4_MAX_ROWS = 4
GEMV_BATCH16_MAX_ROWS = 16

_TIER_MISSING = _guard("tier kernel not resolved", lambda d: not d.get("gemv_tier_loaded", 1))
# batch16 follows batch4 on the rows batch4 leaves: that 4 was exceeded is no reason of its own.
_ROWS_4 = Cond(f"rows <= {GEMV_BATCH4_MAX_ROWS}", "", lambda d: d["m"] <= GEMV_BATCH4_MAX_ROWS, lambda d: "")
_ROWS_16 = _cond(f"rows <= {GEMV_BATCH16_MAX_ROWS}", f"rows > {GEMV_BATCH16_MAX_ROWS}",
                 lambda d: d["m"] <= GEMV_BATCH16_MAX_ROWS,
                 lambda d: f"{d['m']} rows, more than {GEMV_BATCH16_MAX_ROWS}")

GDN_PROJ_GEMV_BATCH = Table(
    path="gdn.proj_gemv_batch",
    summary="GDN-layer projections of a multi-sequence decode: contiguous-batch GEMV tier vs a GEMV per row",
    levers=("ssm_gemv_batch4",),
    assumed={"ssm_gemv_batch4": True},
    variants=("batch4", "batch16", "per_row"),
    engines=("metrale",),
    symbols={"m": "rows"},
    rules=(
        Rule("per_row", {}, (_TIER_MISSING,),
             note="the tier's kernel did not resolve: one GEMV per row whatever ssm_gemv_batch4 says"),
        Rule("batch4", {"ssm_gemv_batch4": True}, (_ROWS_4,)),
        Rule("batch16", {"ssm_gemv_batch4": True}, (_ROWS_16,)),
        Rule("per_row", {"ssm_gemv_batch4": True}, note="ssm_gemv_batch4 is on but {unmet}: one GEMV per row"),
        Rule("per_row"),
    ),
)

# ── moe (decode side) ───────────────────────────────────────────────────────
#
# The routed-expert MoE of Qwen3-Next (512 experts, top-10). The router's
# two Metrale levers are ordered as the engine's gate reads them: an active
# fp32_routing hands the gate an FP32 input and implies FP32 logits, so it
# wins over fp32_gate; fp32_routing is the last of five conditions, the
# other four being properties of the layer's weights and kernels, which this
# project takes as met. The holo levers choose the weight format of each
# stage on its own, so each stage is a path of its own.

MOE_ROUTER = Table(
    path="moe.router",
    summary="MoE router: gate GEMM x Wg^T, softmax over the experts, top-k with renormalised weights",
    levers=("fp32_routing", "fp32_gate"),
    assumed={"fp32_routing": False, "fp32_gate": False},
    variants=("bf16", "fp32_gate", "fp32_routing"),
    engines=("metrale",),
    rules=(
        Rule("fp32_routing", {"fp32_routing": True},
             note="fp32_routing: an FP32 router input and FP32 logits (the layer's four other conditions "
                  "taken as met)"),
        Rule("fp32_gate", {"fp32_gate": True}),
        Rule("bf16"),
    ),
)

MOE_GATEUP_FP4 = Table(
    path="moe.gateup_fp4",
    summary="routed experts' gate and up projections and their SiLU product: int4 (W4A16) or NVFP4 weights",
    levers=("holo_moe_gateup_fp4",),
    assumed={"holo_moe_gateup_fp4": False},
    variants=("int4", "nvfp4"),
    engines=("atlas", "metrale"),
    rules=(Rule("nvfp4", {"holo_moe_gateup_fp4": True}), Rule("int4")),
)

MOE_DOWN_FP4 = Table(
    path="moe.down_fp4",
    summary="routed experts' down projection, weighted sum over each row's experts: int4 (W4A16) or NVFP4 weights",
    levers=("holo_moe_down_fp4",),
    assumed={"holo_moe_down_fp4": False},
    variants=("int4", "nvfp4"),
    engines=("atlas", "metrale"),
    rules=(Rule("nvfp4", {"holo_moe_down_fp4": True}), Rule("int4")),
)

_MULTI_ROW = _cond("rows > 1", "rows = 1", lambda d: d["rows"] > 1,
                   lambda d: f"{d['rows']} row: nothing to group across rows")

MOE_DECODE_FP8_GROUPED = Table(
    path="moe.decode_fp8_grouped",
    summary="multi-row FP8 MoE decode (target model): cross-row grouped kernels vs per-row kernels",
    levers=("moe_fp8_grouped_decode_target",),
    assumed={"moe_fp8_grouped_decode_target": False},
    variants=("grouped", "per_row"),
    engines=("metrale",),
    rules=(
        Rule("grouped", {"moe_fp8_grouped_decode_target": True}, (_MULTI_ROW,)),
        Rule("per_row", {"moe_fp8_grouped_decode_target": True},
             note="moe_fp8_grouped_decode_target is on but {unmet}: the per-row kernels"),
        Rule("per_row"),
    ),
)

MOE_DECODE_MULTI_SEQ = Table(
    path="moe.decode_multi_seq",
    summary="multi-sequence MoE decode: token-major launches over the batch vs the legacy per-token path",
    levers=("moe_legacy_pertoken_decode",),
    assumed={"moe_legacy_pertoken_decode": False},
    variants=("token_major", "per_token"),
    engines=("metrale",),
    rules=(
        Rule("per_token", {"moe_legacy_pertoken_decode": True},
             note="moe_legacy_pertoken_decode: the MoE kernels launched once per token of the batch"),
        Rule("token_major"),
    ),
)

_CAPTURE_LAYER = _cond("DFlash capture layer", "not a capture layer", lambda d: bool(d.get("capture_layer", 0)),
                       lambda d: "the layer is not a DFlash capture layer")

MOE_DECODE_VIA_PREFILL = Table(
    path="moe.decode_via_prefill",
    summary="one row's MoE decode: the decode kernels vs the prefill path (expert-sorted rows) on capture layers",
    levers=("frankenstein_decode_via_prefill",),
    assumed={"frankenstein_decode_via_prefill": False},
    variants=("decode", "prefill"),
    engines=("metrale",),
    rules=(
        Rule("prefill", {"frankenstein_decode_via_prefill": True}, (_CAPTURE_LAYER,),
             note="frankenstein_decode_via_prefill on a DFlash capture layer: the prefill path with one row"),
        Rule("decode", {"frankenstein_decode_via_prefill": True},
             note="frankenstein_decode_via_prefill is on but {unmet}: the decode kernels"),
        Rule("decode"),
    ),
)

MOE_UNION_STATS = Table(
    path="moe.union_stats",
    summary="top-k routing of a batch, with or without counting the distinct experts it touches",
    levers=("moe_union_stats",),
    assumed={"moe_union_stats": False},
    variants=("off", "on"),
    engines=("atlas", "metrale"),
    rules=(
        Rule("on", {"moe_union_stats": True},
             note="moe_union_stats: a counting kernel follows the top-k (a diagnostic's cost)"),
        Rule("off"),
    ),
    binds={"moe_union_stats": "adds the union counts to the outputs (the record's shape says stats = 1), "
                              "checked exactly against the reference's"},
)


# ── moe prefill (Metrale: routed grouped prefill, Nemotron sorted prefill and shared expert) ──
#
# The routed prefill sorts its rows by expert and runs gate/up, then down,
# as grouped GEMMs. ``moe_grouped_cutlass`` puts gate/up on the
# single-launch grouped NVFP4 GEMM (exact per-expert sizes on the device,
# so every row is computed); ``moe_grouped_down`` puts down there too and
# needs it; ``moe_prefill_fp8_down`` puts down on the FP8 grouped GEMM when
# that kernel and its BF16-to-FP8 conversion are loaded (a shape input
# here, ``fp8_loaded``). The seed does not order the two down levers;
# leverctl's decision: the grouped NVFP4 down (which asks for gate/up's route
# as well) comes first, then FP8. Every GEMM not on the single-launch route
# runs on a grid sized by the per-expert tile bound, which the other three
# levers set (``binds``: the same kernels, a different grid or scratch).

_FP8_LOADED = _cond("FP8 grouped GEMM loaded", "FP8 grouped GEMM not loaded",
                    lambda d: bool(d.get("fp8_loaded", 1)),
                    lambda d: "the FP8 grouped GEMM and its BF16-to-FP8 kernel are not loaded")

MOE_PREFILL_GROUPED = Table(
    path="moe.prefill_grouped",
    summary="routed MoE prefill, rows sorted by expert: single-launch grouped NVFP4 GEMMs or the tile-bounded "
            "grouped GEMMs, down optionally in FP8",
    levers=("moe_grouped_cutlass", "moe_grouped_down", "moe_prefill_fp8_down", "moe_prefill_exact_tiles",
            "moe_prefill_max_load_factor", "moe_prefill_zero"),
    assumed={"moe_grouped_cutlass": False, "moe_grouped_down": False, "moe_prefill_fp8_down": False,
             "moe_prefill_exact_tiles": False, "moe_prefill_max_load_factor": False, "moe_prefill_zero": False},
    variants=("grouped", "grouped+fp8_down", "grouped+bounded_down", "bounded+fp8_down", "bounded"),
    engines=("metrale",),
    rules=(
        Rule("grouped", {"moe_grouped_cutlass": True, "moe_grouped_down": True}),
        Rule("grouped+fp8_down", {"moe_grouped_cutlass": True, "moe_prefill_fp8_down": True}, (_FP8_LOADED,)),
        Rule("grouped+bounded_down", {"moe_grouped_cutlass": True, "moe_prefill_fp8_down": True},
             note="moe_prefill_fp8_down is on but {unmet}: down on the tile-bounded grouped GEMM"),
        Rule("grouped+bounded_down", {"moe_grouped_cutlass": True}),
        Rule("bounded+fp8_down", {"moe_grouped_down": True, "moe_prefill_fp8_down": True}, (_FP8_LOADED,),
             note="moe_grouped_down needs moe_grouped_cutlass: down through the FP8 grouped GEMM"),
        Rule("bounded+fp8_down", {"moe_prefill_fp8_down": True}, (_FP8_LOADED,)),
        Rule("bounded", {"moe_grouped_down": True, "moe_prefill_fp8_down": True},
             note="moe_grouped_down needs moe_grouped_cutlass, and moe_prefill_fp8_down is on but {unmet}: "
                  "both projections on the tile-bounded route"),
        Rule("bounded", {"moe_grouped_down": True},
             note="moe_grouped_down needs moe_grouped_cutlass: both projections on the tile-bounded route"),
        Rule("bounded", {"moe_prefill_fp8_down": True},
             note="moe_prefill_fp8_down is on but {unmet}: down on the tile-bounded grouped GEMM"),
        Rule("bounded"),
    ),
    binds={
        "moe_prefill_exact_tiles": "sizes the tile-bounded GEMMs' grid from the routing's largest count, read "
                                   "back from the device (1), or not (0); unset: on for NVFP4 experts, off "
                                   "otherwise; graph capture forces it off",
        "moe_prefill_max_load_factor": "with exact tiles off, caps the tile bound at n times the average rows per "
                                       "expert (unset: every token on one expert); an expert routed more rows "
                                       "than the cap leaves the excess uncomputed",
        "moe_prefill_zero": "zeroes the gate/up and down scratch before the GEMMs; without it a row the tile "
                            "bound skipped reaches the combine as whatever the scratch held",
    },
)

# Nemotron's sorted prefill: squared-ReLU experts, the up projection's
# activations in fp16, or quantised to NVFP4 (``moe_w4a4``) where the MoE
# input is a latent projection and the batch has 512 rows or more.
W4A4_MIN_ROWS = 512

_LATENT = _cond("latent MoE input", "no latent MoE input", lambda d: bool(d.get("latent", 0)),
                lambda d: "the model's MoE input is not a latent projection")
_ROWS_512 = _cond(f"n >= {W4A4_MIN_ROWS}", f"n < {W4A4_MIN_ROWS}", lambda d: d["t"] >= W4A4_MIN_ROWS,
                  lambda d: f"n={d['t']} < {W4A4_MIN_ROWS} rows")

MOE_PREFILL_SORTED = Table(
    path="moe.prefill_sorted",
    summary="Nemotron sorted MoE prefill (squared-ReLU experts, NVFP4 weights): up projection on fp16 or "
            "NVFP4 activations, M-tile grid from the worst case or an estimate",
    levers=("moe_w4a4", "moe_max_m_tiles_estimate", "moe_zero_intermediates"),
    assumed={"moe_w4a4": False, "moe_max_m_tiles_estimate": False, "moe_zero_intermediates": True},
    variants=("a16", "w4a4_up"),
    engines=("metrale",),
    symbols={"t": "n"},
    rules=(
        Rule("w4a4_up", {"moe_w4a4": True}, (_LATENT, _ROWS_512)),
        Rule("a16", {"moe_w4a4": True}, note="moe_w4a4 is on but {unmet}: the up projection reads fp16"),
        Rule("a16"),
    ),
    binds={
        "moe_max_m_tiles_estimate": "sizes the grouped GEMMs' M-tile grid from twice the average rows per expert "
                                    "instead of every token on one expert; an expert routed more rows leaves "
                                    "the excess uncomputed",
        "moe_zero_intermediates": "zeroes the expert up and down outputs before the grouped GEMMs; without it a "
                                  "row the grid skipped reaches the combine as whatever they held",
    },
)

# The shared expert (Nemotron): up and down each on W4A4 (activations to
# NVFP4 per GEMM) from 512 rows up, independently; the up projection not
# where the model carries a native FP8 shared-up weight.
_NO_FP8_SHARED_UP = _cond("no native FP8 shared-up weight", "a native FP8 shared-up weight",
                          lambda d: not d.get("fp8_shared_up", 0),
                          lambda d: "the model uses a native FP8 shared-up weight")

MOE_SHARED_EXPERT = Table(
    path="moe.shared_expert",
    summary="Nemotron shared expert (squared ReLU, NVFP4 weights): up and down on fp16 or NVFP4 (W4A4) activations",
    levers=("shared_w4a4", "shared_w4a4_down"),
    assumed={"shared_w4a4": True, "shared_w4a4_down": False},
    variants=("a16", "w4a4_up", "w4a4_down", "w4a4"),
    engines=("metrale",),
    symbols={"t": "n"},
    rules=(
        Rule("w4a4", {"shared_w4a4": True, "shared_w4a4_down": True}, (_ROWS_512, _NO_FP8_SHARED_UP)),
        Rule("w4a4_down", {"shared_w4a4": True, "shared_w4a4_down": True}, (_ROWS_512,),
             note="shared_w4a4 is on but {unmet}: only the down projection takes W4A4"),
        Rule("w4a4_down", {"shared_w4a4_down": True}, (_ROWS_512,)),
        Rule("w4a4_up", {"shared_w4a4": True}, (_ROWS_512, _NO_FP8_SHARED_UP)),
        Rule("a16", {"shared_w4a4": True}, note="shared_w4a4 is on but {unmet}: both projections read fp16"),
        Rule("a16", {"shared_w4a4_down": True}, note="shared_w4a4_down is on but {unmet}: both projections read fp16"),
        Rule("a16"),
    ),
)

TABLES: Mapping[str, Table] = MappingProxyType({t.path: t for t in (
    W4A16_GEMV, W4A16_GEMV_DUAL, W4A16_FFN_DECODE, W4A16_GEMM,
    GDN_PREFILL, GDN_VERIFY, GDN_DECODE, GDN_FUSED_CONV,
    ATTENTION_PAGED_DECODE,
    ATTENTION_ROTATION, ATTENTION_DECODE_GRAPH, ATTENTION_DFLASH_CONTIG, ATTENTION_MLA_DECODE,
    FFN_PREFILL,
    ATTENTION_PROJ_BF16_TC, ATTENTION_PROJ_BF16_TC_W4A16, ATTENTION_PROJ_FP8,
    LORA_PROJ, LORA_PROJ_POOL,
    MAMBA2_PREFILL_SCAN, MAMBA2_PREFILL_PROJ, GDN_PROJ_GEMV_BATCH,
    MOE_ROUTER, MOE_GATEUP_FP4, MOE_DOWN_FP4, MOE_DECODE_FP8_GROUPED, MOE_DECODE_MULTI_SEQ,
    MOE_DECODE_VIA_PREFILL, MOE_UNION_STATS,
    MOE_PREFILL_GROUPED, MOE_PREFILL_SORTED, MOE_SHARED_EXPERT,
)})


def check_declaration(path) -> None:
    """Raise unless the kernel path ``path`` declares what its table says:
    summary, levers, variants (in order), engines, and the table's own
    ``select``. A family calls it for each path it declares."""
    table = TABLES.get(path.name)
    if table is None:
        raise ValueError(f"{path.name}: no decision table in leverctl_kernels.selection")
    said = (path.summary, tuple(path.levers), tuple(path.variants), tuple(path.engines), path.select,
            tuple(getattr(path, "baselines", ())), path.bind is not None)
    wants = (table.summary, table.levers, table.variants, table.engines, table.select,
             table.baselines, bool(table.binds))
    if said != wants:
        raise ValueError(f"{path.name}: the declaration and its selection table disagree: {said} != {wants}")

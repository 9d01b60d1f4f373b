"""Decision table of the dense-FFN prefill (Metrale; ``kernels/ffn/prefill/``).

Metrale's dense SiLU FFN at prefill runs two GEMMs per layer, gate+up
(K = hidden) and down (K = intermediate), through its default W4A16 GEMM or
one of eight arms. The seed fixes two orders: the NVFP4 MMQ arm before the
Q4_K MMQ arm, and the down projection following the gate/up arm
(``ffn_nvfp4_mmq_down`` acts only under ``ffn_nvfp4_mmq``,
``ffn_mmq_down_q4k`` only under ``ffn_mmq``, and without it down goes
through int8 faith2). It does not order the other opt-in arms; leverctl's
order quantises activations from the narrowest format to the widest (W4A4,
int8, FP8, BF16), so a lever that quantises more is never hidden behind one
that quantises less, and the default W4A16 GEMM comes last.

The engine honours an arm only where its kernels are loaded; an arm counts
as not loaded for a projection whose weights its format cannot hold: NVFP4
(the NVFP4 MMQ arm, W4A4) comes in blocks of 16 along K, Q4_K in
super-blocks of 256; the NVFP4 MMQ arm also needs no LoRA adapter (the
shape's ``lora``). The down projection cannot see gate/up's K, so the
gate/up arm counts as active at a down shape when its lever is on and no
adapter is installed. Where k % 256 != 0 a guard sends ``ffn_mmq`` to the
arms after it, as though it were off, with a note that says so: those arms
appear twice below, once under the guard.
"""

from __future__ import annotations

from .rules import Rule, Table, divisible, flag, guard

NVFP4_BLOCK = 16
Q4K_BLOCK = 256  # values in a Q4_K super-block

_GATE_UP = flag("down", on="down", off="gate+up", want=False, why="the down projection")
_DOWN = flag("down", on="down", off="gate+up", why="the gate+up projection")
_NO_LORA = flag(
    "lora", on="a LoRA adapter", off="no LoRA adapter", want=False, default=0, why="a LoRA adapter is installed"
)
_K_NVFP4 = divisible("k", NVFP4_BLOCK, why="k={k} is not a multiple of the NVFP4 block ({bound})")
_NO_Q4K = guard(divisible("k", Q4K_BLOCK))
_Q4K_FALLS = (
    f"Q4_K weights come in super-blocks of {Q4K_BLOCK}: the Q4_K arm is not loaded at this k "
    "and ffn_mmq falls through to the arms after it"
)

PREFILL = Table(
    path="ffn.prefill",
    summary="Dense SiLU-FFN prefill GEMM c = a W^T (gate+up, then down) through the arm the levers pick",
    levers=(
        "ffn_nvfp4_mmq",
        "ffn_nvfp4_mmq_down",
        "ffn_mmq",
        "ffn_mmq_down_q4k",
        "fp4_prefill",
        "int8_prefill",
        "int8_faith5",
        "fp8_m64_prefill",
        "bf16_tc_prefill",
        "prefill_v2",
    ),
    variants=("w4a16", "bf16_v1", "bf16_v2", "fp8_m64", "int8_faith2", "int8_faith5", "nvfp4_mmq", "q4k_mmq", "w4a4"),
    engines=("metrale",),
    rules=(
        # NVFP4 MMQ, and down following it
        Rule("nvfp4_mmq", {"ffn_nvfp4_mmq": True}, (_GATE_UP, _NO_LORA, _K_NVFP4)),
        Rule("nvfp4_mmq", {"ffn_nvfp4_mmq": True, "ffn_nvfp4_mmq_down": True}, (_DOWN, _NO_LORA, _K_NVFP4)),
        Rule(
            "w4a16",
            {"ffn_nvfp4_mmq": True, "ffn_nvfp4_mmq_down": False},
            (_DOWN, _NO_LORA),
            note="ffn_nvfp4_mmq_down off: down takes the default W4A16 GEMM while gate+up run NVFP4 MMQ",
        ),
        Rule(
            "w4a16",
            {"ffn_nvfp4_mmq": True},
            (_DOWN, _NO_LORA),
            note=f"down has no NVFP4 weights at k % {NVFP4_BLOCK} != 0: the default W4A16 GEMM, "
            "while gate+up run NVFP4 MMQ",
        ),
        # Q4_K MMQ not loaded at this k: ffn_mmq takes what the arms after it select
        Rule("w4a4", {"ffn_mmq": True, "fp4_prefill": True}, (_NO_Q4K, _K_NVFP4), note=_Q4K_FALLS),
        Rule("int8_faith5", {"ffn_mmq": True, "int8_prefill": True, "int8_faith5": True}, (_NO_Q4K,), note=_Q4K_FALLS),
        Rule("int8_faith2", {"ffn_mmq": True, "int8_prefill": True}, (_NO_Q4K,), note=_Q4K_FALLS),
        Rule("fp8_m64", {"ffn_mmq": True, "fp8_m64_prefill": True}, (_NO_Q4K,), note=_Q4K_FALLS),
        Rule("bf16_v2", {"ffn_mmq": True, "bf16_tc_prefill": True, "prefill_v2": True}, (_NO_Q4K,), note=_Q4K_FALLS),
        Rule("bf16_v1", {"ffn_mmq": True, "bf16_tc_prefill": True}, (_NO_Q4K,), note=_Q4K_FALLS),
        Rule("w4a16", {"ffn_mmq": True}, (_NO_Q4K,), note=_Q4K_FALLS),
        # Q4_K MMQ, and down following it
        Rule("q4k_mmq", {"ffn_mmq": True}, (_GATE_UP,)),
        Rule("q4k_mmq", {"ffn_mmq": True, "ffn_mmq_down_q4k": True}),
        Rule(
            "int8_faith2",
            {"ffn_mmq": True},
            note="ffn_mmq without ffn_mmq_down_q4k: down goes through the int8 faith2 GEMM",
        ),
        # the arms that quantise activations, narrowest first; then the default
        Rule("w4a4", {"fp4_prefill": True}, (_K_NVFP4,)),
        Rule("int8_faith5", {"int8_prefill": True, "int8_faith5": True}),
        Rule("int8_faith2", {"int8_prefill": True}),
        Rule("fp8_m64", {"fp8_m64_prefill": True}),
        Rule("bf16_v2", {"bf16_tc_prefill": True, "prefill_v2": True}),
        Rule("bf16_v1", {"bf16_tc_prefill": True}),
        Rule("w4a16"),
    ),
)

TABLES = (PREFILL,)

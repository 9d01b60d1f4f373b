"""The claim rule of ``tc_claims.py`` on SASS lines of the forms ptxas
writes (the real kernels' SASS is read in the family tests and
``test_tc_claims.py``): each claim passes on its own opcode and fails on
the others, and an FP8 claim over HMMA-only SASS fails unless it says
"through FP16"."""

from __future__ import annotations

import pytest
from tc_claims import claim_problems

SASS = {
    "hgmma_f16": "/*1aa0*/ HGMMA.64x128x16.F32 R24, gdesc[UR12], R24 ;",
    "hgmma_bf16": "/*1aa0*/ HGMMA.64x256x16.F32.BF16 R24, gdesc[UR4], R24, gsb0 ;",
    "qgmma": "/*0f10*/ QGMMA.64x256x32.F32.E4M3.E4M3 R24, gdesc[UR4], R24, gsb0 ;",
    "hmma_f16": "/*0200*/ HMMA.16816.F32 R8, R4, R2, R8 ;",
    "hmma_bf16": "/*0200*/ HMMA.16816.F32.BF16 R8, R4, R2, R8 ;",
    "imma": "/*0200*/ IMMA.16832.S8.S8 R8, R4.ROW, R2.COL, R8 ;",
    "none": "/*0100*/ FFMA R1, R2, R3, R1 ;",
}
PASSES = {
    ("wgmma", "f16"): "hgmma_f16",
    ("wgmma", "bf16"): "hgmma_bf16",
    ("wgmma", "e4m3"): "qgmma",
    ("mma.sync", "f16"): "hmma_f16",
    ("mma.sync", "bf16"): "hmma_bf16",
    ("mma.sync", "s8"): "imma",
    ("mma.sync", "e4m3-via-f16"): "hmma_f16",
    (None, None): "none",
}


@pytest.mark.parametrize("claim", sorted(PASSES, key=str), ids=str)
def test_each_claim_passes_on_its_opcode_and_fails_on_every_other(claim):
    for name, sass in SASS.items():
        problems = claim_problems(sass, *claim)
        if name == PASSES[claim] or (claim == ("mma.sync", "e4m3-via-f16") and name == "hmma_f16"):
            assert problems == [], (claim, name, problems)
        elif claim != (None, None) or name != "none":
            assert problems, (claim, name)


def test_fp8_over_hmma_only_fails_and_names_the_fp16_path():
    why, *_also = claim_problems(SASS["hmma_f16"] + "\n" + SASS["hmma_f16"], "wgmma", "e4m3")
    assert "shows only HMMA" in why and "e4m3-via-f16" in why
    (why,) = claim_problems(SASS["hmma_f16"], "mma.sync", "e4m3")
    assert "through FP16" in why
    assert claim_problems(SASS["hmma_f16"], "mma.sync", "e4m3-via-f16") == []


def test_a_warpgroup_claim_with_warp_mma_beside_it_fails():
    (why,) = claim_problems(SASS["hgmma_f16"] + "\n" + SASS["hmma_f16"], "wgmma", "f16")
    assert "also has" in why and "HMMA.16816.F32" in why

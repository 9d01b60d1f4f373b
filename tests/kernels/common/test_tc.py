"""The tensor-core factory: one form per compute capability."""

import pytest

from leverctl_kernels.common import tc


@pytest.mark.parametrize(
    "cc, form",
    [
        ((9, 0), "wgmma"),
        ((9, 0, "a"), "wgmma"),
        ((8, 0), "mma.sync"),
        ((8, 9), "mma.sync"),
        ((10, 0), "mma.sync"),
        ((12, 0), "mma.sync"),
    ],
)
def test_instruction_for(cc, form):
    assert tc.instruction_for(cc) == form


def test_below_sm80_has_no_form():
    with pytest.raises(ValueError, match="7.5 has no mma.sync"):
        tc.instruction_for((7, 5))


def test_check_form():
    assert tc.check_form("wgmma") == "wgmma"
    with pytest.raises(ValueError, match="one of wgmma, mma.sync"):
        tc.check_form("hmma")

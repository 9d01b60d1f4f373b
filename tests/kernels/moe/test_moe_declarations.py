"""What the MoE variants declare about their launches beyond what
``test_path_declarations`` checks of every family's variants (the launches
one call makes and the device scratch ``build`` allocates, at every smoke
shape)."""

from __future__ import annotations


def test_the_per_token_path_pays_a_launch_pair_per_token():
    from leverctl_kernels.moe.decode_multi_seq.spec import PATH as MULTI_SEQ

    shape = MULTI_SEQ.shapes("smoke", None)[0]
    assert MULTI_SEQ.variant_launches("per_token", shape) == 2 * shape["rows"]
    assert MULTI_SEQ.launches_vary(shape)

"""Shell completion that knows the domain, through Click's own completion
protocol (the ``_LEVERCTL_COMPLETE`` variable a shell's completion script
sets, with the words typed so far): kernel paths for ``-k``, lever variables
for ``--set`` (``VAR=``, then the values its rule gives a meaning),
``--unset`` and ``explain``, engines, recipe names, ``compare --by``. Each
answers without importing numba."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest


def complete(*words: str) -> list[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ATLAS_", "METRALE_"))}
    env.update(
        _LEVERCTL_COMPLETE="complete_bash", COMP_WORDS=" ".join(["leverctl", *words]), COMP_CWORD=str(len(words))
    )
    p = subprocess.run(
        [sys.executable, "-c", "from leverctl.cli.entry import main; main()"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert p.returncode == 0, p.stderr
    return p.stdout.split()


CASES = [
    (("bench", "-k", "gdn.v"), ["gdn.verify"]),
    (("sweep", "--kernel", "w4a16.gemv"), ["w4a16.gemv", "w4a16.gemv_dual"]),
    (("show", "--set", "ATLAS_GDN_WY"), ["ATLAS_GDN_WY17=", "ATLAS_GDN_WYN="]),
    (("show", "--set", "ATLAS_GDN_WY17="), ["ATLAS_GDN_WY17=0"]),  # an opt-out: only 0 means anything
    (("show", "--set", "ATLAS_BF16_TC_PROJ="), ["ATLAS_BF16_TC_PROJ=1"]),  # presence
    (("show", "-e", "metrale", "--unset", "METRALE_GDN_W"), ["METRALE_GDN_WY17", "METRALE_GDN_WYN"]),
    (("explain", "gdn_w"), ["gdn_wy17", "gdn_wyn"]),
    (("lint", "-e", "m"), ["metrale"]),
    (("show", "--recipe", "qwen3-next"), ["qwen3-next-80b-a3b", "qwen3-next-80b-a3b-metrale"]),
    (("compare", "a.json", "b.json", "--by", "p"), ["path"]),
]


@pytest.mark.parametrize("words, want", CASES, ids=[" ".join(w) for w, _ in CASES])
def test_completion_offers_the_domains_names(words, want):
    assert sorted(complete(*words)) == sorted(want)


def test_an_engine_narrows_the_variables_and_a_recipe_names_its_engine():
    assert complete("show", "-e", "metrale", "--set", "ATLAS_") == []
    assert "METRALE_GDN_WY17=" in complete("show", "-r", "qwen3-next-80b-a3b-metrale", "--set", "METRALE_GDN_")


def test_completion_imports_no_numba():
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ATLAS_", "METRALE_"))}
    env.update(_LEVERCTL_COMPLETE="complete_bash", COMP_WORDS="leverctl bench -k gdn.", COMP_CWORD="3")
    code = (
        "import sys\nfrom leverctl.cli.entry import main\n"
        "try:\n    main()\nfinally:\n    print('NUMBA' if 'numba' in sys.modules else 'clean', file=sys.stderr)"
    )
    p = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert "gdn.verify" in p.stdout.split() and p.stderr.strip().endswith("clean"), p.stderr


def test_axis_names_are_the_named_paths_dimensions():
    got = complete("bench", "-k", "w4a16.gemv", "--axis", "")
    assert sorted(got) == ["k=", "m=", "n="]
    assert complete("sweep", "-k", "gdn.verify", "--axis", "d") == ["dk=", "dv="]

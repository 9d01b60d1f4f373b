"""Every variant that claims tensor cores has its claim proven on machine
code, for every form its build can take: ``tc_claims.CLAIM_JOBS`` names the
compiled kernels, and the family's SASS test checks them with
``tc_claims.check_claims``. This module checks the table itself against the
registry, so a new tensor-core variant without a SASS proof fails here."""

from __future__ import annotations

from tc_claims import CLAIM_JOBS, DTYPES, claim_module, forms_of

from leverctl_kernels.registry import all_paths


def _claimed():
    for path in all_paths():
        for v in path.variants.values():
            if v.tensor_cores is not None:
                for form in forms_of(v):
                    yield path.name, v.name, form, v


def test_every_tensor_core_variant_and_form_has_its_sass_proof_listed():
    missing = [(p, v, f) for p, v, f, _ in _claimed() if (p, v, f) not in CLAIM_JOBS]
    assert not missing, f"tensor-core variants without SASS proof in tc_claims.CLAIM_JOBS: {missing}"
    assert any(True for _ in _claimed())


def test_every_listed_proof_is_a_real_variant_with_a_declared_input_type():
    claimed = {(p, v, f): var for p, v, f, var in _claimed()}
    for key in CLAIM_JOBS:
        assert key in claimed, f"{key} is listed but no such tensor-core variant and form exists"
        assert claimed[key].tc_dtype in DTYPES, (key, claimed[key].tc_dtype)


def test_every_listed_job_is_one_its_module_compiles_and_checks():
    for (path, variant, form), (module, jobs) in CLAIM_JOBS.items():
        mod = claim_module(module)
        names = {j[0] for j in mod.jobs()}
        assert set(jobs) <= names, f"{module}.jobs() has no {sorted(set(jobs) - names)}"
        assert "test_the_sass_holds_what_each_variants_records_claim" in vars(mod), (
            f"{module} does not check its claims (tc_claims.sass_claims_test)"
        )

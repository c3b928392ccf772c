"""What the Robustness view showed before the project closed, it shows after: fuzzer tests that
joined the pool join it again when the set-up is read back."""

from __future__ import annotations

import numpy as np

from workbench.core.execution.jobs import JobContext
from workbench.core.project.folder import Project
from workbench.core.project.staging import run_staged
from workbench.core.robustness import study


def test_fuzzer_tests_that_joined_the_pool_are_in_it_after_reopening(tmp_path, digits, digits_model):
    folder = tmp_path / "p"
    Project.create(folder, "digits")
    ctx = JobContext("cpu")
    base = run_staged(ctx, study.prepare_robustness, Project.open(folder), digits_model, digits, 0.1, 300, 0,
                      report_subset=100)
    attacks = len(base.setup.pool)
    run = run_staged(ctx, study.run_fuzzer, Project.open(folder), base, digits_model, digits, 20, 10.0, True, True, 0,
                     "fuzzed once")
    assert len(run.tests) > 0 and len(run.joined.setup.pool) == attacks + len(run.tests)

    again = run_staged(ctx, study.prepare_robustness, Project.open(folder), digits_model, digits, 0.1, 300, 0,
                       report_subset=100)  # the project opened again: pools read back
    assert again.reused and len(again.setup.pool) == attacks + len(run.tests)
    assert int(np.sum(again.setup.pool.attack == "fuzz")) == len(run.tests)
    np.testing.assert_allclose(again.setup.pool.scores["fol_linf"], run.joined.setup.pool.scores["fol_linf"],
                               rtol=1e-5)
    assert again.fuzz_tests is not None and len(again.fuzz_tests) == len(run.tests)
    other = run_staged(ctx, study.prepare_robustness, Project.open(folder), digits_model, digits, 0.2, 300, 0,
                       report_subset=100)  # another ε: another pool, which the tests never joined
    assert int(np.sum(other.setup.pool.attack == "fuzz")) == 0 and other.fuzz_tests is None

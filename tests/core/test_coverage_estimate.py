"""What measuring coverage still takes (`core.coverage.estimate`): the criteria without a stored result,
read without measuring anything, and the parts of the time a trial on a sample adds up to. How close
the estimate comes to the real run is measured in benchmarks/bench_coverage_estimate.py, not here."""

from __future__ import annotations

import numpy as np
import pytest

from workbench.core.coverage import passes
from workbench.core.coverage.estimate import PassClock, coverage_work
from workbench.core.coverage.measure import measure_coverage, measure_groups
from workbench.core.data.dataset import Dataset
from workbench.core.execution.jobs import JobContext
from workbench.core.project.folder import Project

GROUPS = [("idc",), ("nc", "kmnc")]
LAYER = "fc1"


def test_a_pass_clock_times_a_warm_pass_per_input(monkeypatch):
    """Per input from the end of the first batch on (it warms up); the whole pass from its first report."""
    ticks = iter([0.0, 10.0, 11.0, 13.0, 15.0, 16.0, 16.5, 20.0, 21.0])
    monkeypatch.setattr("workbench.core.coverage.estimate.time.perf_counter", lambda: next(ticks))
    clock = PassClock()  # started at 0
    for done in (0, 100, 200, 300):  # at 10, 11, 13, 15: the first batch took 1, the next two 2 each
        clock.tick(done, 300, "coverage: training activations")
    clock.tick(0, 2, "coverage: fitting idc")  # 16
    clock.tick(2, 2, "coverage: fitted")  # 16.5
    clock.tick(0, 50, "coverage: test inputs")  # 20
    assert clock.pass_seconds("coverage: training activations") == (pytest.approx(4 / 200), pytest.approx(5.0))
    assert clock.span_seconds("coverage: fitting", "coverage: fitted") == pytest.approx(0.5)
    assert clock.pass_seconds("coverage: test inputs") == (0.0, 0.0)  # one report: the pass did not run
    assert clock.total() == pytest.approx(21.0)


@pytest.fixture
def project(tmp_path):
    return Project.create(tmp_path / "p", "digits")


def test_stored_results_leave_nothing_to_measure(digits_model, digits, project):
    ctx = JobContext("cpu")
    sets = [("test", None), ("train", np.arange(0, 300))]
    work = coverage_work(ctx, digits_model, digits, sets, LAYER, GROUPS, 2, project=project)
    assert work.missing == [("idc", "nc", "kmnc")] * 2 and not work.complete
    # IDC has no importance yet: the relevance pass is part of the work, beside the passes and the fits
    assert {"relevance", "training pass", "fitting", "test pass"} <= set(work.parts)
    assert work.seconds == pytest.approx(sum(work.parts.values())) and work.seconds > 0
    assert project.artifacts() == {}  # timing stores nothing

    measure_groups(ctx, digits_model, digits, "test", None, LAYER, GROUPS, 2, None, project=project)
    work = coverage_work(ctx, digits_model, digits, sets, LAYER, GROUPS, 2, project=project)
    assert work.missing == [(), ("idc", "nc", "kmnc")]  # the stored importance and fits count for the train set
    assert "relevance" not in work.parts
    measure_groups(ctx, digits_model, digits, "train", np.arange(0, 300), LAYER, GROUPS, 2, None, project=project)
    work = coverage_work(ctx, digits_model, digits, sets, LAYER, GROUPS, 2, project=project)
    assert work.complete and work.seconds == 0.0 and work.parts == {}


def test_stored_only_reads_what_was_stored_and_measures_nothing(digits_model, digits, project, monkeypatch):
    ctx = JobContext("cpu")
    measured = measure_coverage(ctx, digits_model, digits, LAYER, ("idc", "kmnc"), m=2, project=project)

    def no_pass(*args, **kwargs):
        raise AssertionError("a stored-only read streamed activations")

    monkeypatch.setattr(passes, "stream_activations", no_pass)
    read = measure_coverage(ctx, digits_model, digits, LAYER, ("idc", "kmnc", "nc"), m=2, project=project,
                            stored_only=True)
    assert sorted(read) == ["idc", "kmnc"]  # NC was never measured: left out, not measured now
    for name in read:
        assert read[name].reused and read[name].value == measured[name].value
    assert measure_coverage(ctx, digits_model, digits, LAYER, ("idc",), m=2, stored_only=True) == {}  # no project
    other = Project.create(project.folder.parent / "other", "digits")
    assert measure_coverage(ctx, digits_model, digits, LAYER, ("idc",), m=2, project=other, stored_only=True) == {}


def test_the_trial_scales_a_larger_training_split_and_adds_each_set(digits_model, digits):
    """A training split larger than the trial's sample is timed on a sample and a one-batch fit; every part
    of the work is there, and a set that cannot be measured at all (m larger than the layer) adds nothing."""
    train = digits.split("train")
    rows = np.tile(np.arange(len(train)), 3)  # 4,314 inputs: more than the trial reads
    larger = Dataset("digits", list(digits.class_names), {"train": train.subset(rows), "test": digits.split("test")},
                     digits.card)
    ctx = JobContext("cpu")
    work = coverage_work(ctx, digits_model, larger, [("test", None)], LAYER, [("nc", "kmnc")], 2)
    assert work.missing == [("nc", "kmnc")] and set(work.parts) == {"training pass", "fitting", "test pass", "set-up"}
    assert all(seconds >= 0 for seconds in work.parts.values()) and work.parts["training pass"] > 0
    impossible = coverage_work(ctx, digits_model, larger, [("test", None)], LAYER, [("idc",)], 10_000)
    assert impossible.missing == [("idc",)] and "training pass" not in impossible.parts

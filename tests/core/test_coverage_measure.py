"""The coverage job end to end on the bundled LeNet-5 and the 2,000/1,000 Fashion-MNIST slice: it agrees
with the criteria driven by hand, streams with progress and cancellation, stores and reuses artifacts,
refuses bad input clearly, and shows the expected behaviour of docs/methods/idc.md#expected-behaviour."""

from __future__ import annotations

import copy

import numpy as np
import pytest

from workbench.core.coverage import IDC, KMNC, Criterion, CoverageValue, create_criterion, measure_coverage
from workbench.core.coverage import artifacts
from workbench.core.coverage.measure import default_layer, preset_layers
from workbench.core.coverage.passes import CoverageProgress
from workbench.core.data.dataset import Dataset, Split
from workbench.core.errors import Cancelled, WorkbenchError
from workbench.core.execution.jobs import JobContext
from workbench.core.importance.neuron_importance import compute_importance
from workbench.core.models.activations import NeuronDefinition, collect_activations
from workbench.core.models.architectures import lenet1, lenet4, lenet5
from workbench.core.models.layers import layer_catalogue
from workbench.core.models.model_io import load_model
from workbench.core.project.folder import Project

SOME = np.arange(0, 1000, 4)  # 250 test inputs keep each run well under a second


@pytest.fixture(scope="module")
def model():
    return load_model("lenet5-fashion")


@pytest.fixture(scope="module")
def small(fashion_slice):
    """The slice with a 600-image training split, so fitting is quick."""
    train = fashion_slice.split("train").subset(np.arange(600))
    return Dataset("fashion-slice-600", fashion_slice.class_names,
                   {"train": train, "test": fashion_slice.split("test")}, fashion_slice.card)


def ctx():
    return JobContext("cpu")


def test_default_layers_follow_the_spec():
    shapes = (1, 28, 28)
    assert default_layer(layer_catalogue(lenet1(), shapes)) == "conv2"
    assert default_layer(layer_catalogue(lenet4(), shapes)) == "fc1"
    assert default_layer(layer_catalogue(lenet5(), shapes)) == "fc2"
    names, point, conv = preset_layers(layer_catalogue(lenet5(), shapes), "deepimportance")
    assert names == ["conv1", "pool1", "conv2", "pool2", "fc1", "fc2", "fc3"]
    assert (point, conv) == ("post", "channel-mean")
    nlc = preset_layers(layer_catalogue(lenet5(), shapes), "nlc")
    assert nlc[:2] == (["conv1", "conv2", "fc1", "fc2", "fc3"], "pre")


def test_idc_job_equals_the_criterion_driven_by_hand(model, small):
    progress, partials = [], []
    job = JobContext("cpu", on_progress=lambda d, t, m: progress.append(m), on_partial=partials.append)
    result = measure_coverage(job, model, small, "fc2", ["idc"], test_indices=SOME, curve_every=50)["idc"]
    # by hand: importance, the correctly classified training values, the test values
    importance = compute_importance(ctx(), model, small, "fc2")
    train = small.split("train")
    values = collect_activations(ctx(), model.module, train, NeuronDefinition("fc2"), (1, 28, 28))
    preds = np.concatenate([model.module(x).argmax(1).detach().numpy() for _, x, _ in train.batches(600)])
    manual = IDC(neurons=importance.top(6)).fit(values, train.labels, preds)
    test = small.split("test").subset(SOME)
    manual.update(collect_activations(ctx(), model.module, test, NeuronDefinition("fc2"), (1, 28, 28)))
    idc = result.criterion
    assert idc.neurons.tolist() == importance.top(6).tolist()
    np.testing.assert_array_equal(idc.relevance, importance.totals[importance.top(6)])
    assert [c.centroids.tolist() for c in idc.clusters] == [c.centroids.tolist() for c in manual.clusters]
    assert result.value == manual.coverage() and idc.input_codes.tolist() == manual.input_codes.tolist()
    # growth curve: one point per 50 inputs, monotone, ending at the result
    assert result.curve[:, 0].tolist() == [50, 100, 150, 200, 250]
    assert (np.diff(result.curve[:, 1]) >= 0).all() and result.curve[-1, 1] == result.value.covered
    assert "coverage: training activations" in progress and "coverage: test inputs" in progress
    assert isinstance(partials[-1], CoverageProgress) and partials[-1].values["idc"] == result.value
    how = result.provenance
    assert how["identity"]["params"]["m"] == 6 and how["identity"]["params"]["seed"] == 0
    assert how["identity"]["context"]["model"] == model.fingerprint() and "scikit-learn" in how["versions"]


def test_fidelity_idc_falls_with_m_is_deterministic_and_k2_dominates(model, small):
    entries = [(f"m{m}", IDC(m=m)) for m in (6, 8, 10, 12)]
    first = measure_coverage(ctx(), model, small, "fc2", entries, test_indices=SOME)
    fractions = [first[f"m{m}"].value.fraction for m in (6, 8, 10, 12)]
    assert fractions == sorted(fractions, reverse=True) and fractions[0] > fractions[-1]
    ks = first["m12"].criterion.k_histogram()
    assert ks.get(2, 0) >= 0.75 * 12  # silhouette picks k = 2 for most neurons
    again = measure_coverage(ctx(), model, small, "fc2", [("m8", IDC(m=8))], test_indices=SOME)["m8"]
    assert again.criterion.input_codes.tolist() == first["m8"].criterion.input_codes.tolist()
    assert [c.centroids.tolist() for c in again.criterion.clusters] == \
        [c.centroids.tolist() for c in first["m8"].criterion.clusters]


def test_classic_criteria_through_the_job_use_the_preset(model, small):
    results = measure_coverage(ctx(), model, small, None, ["nc", "kmnc", "nbc", "snac", "tknc", "tknp", "dsa"],
                               test_indices=SOME[:100])
    assert results["nc"].value.total == 6 + 6 + 16 + 16 + 120 + 84 + 10
    assert results["kmnc"].value.total == 258 * 1000
    assert results["tknp"].value.total is None and results["tknp"].value.covered > 1
    assert results["dsa"].criterion.layers == ["fc2"] and results["dsa"].value.total == 1000
    for r in results.values():
        covered = r.curve[:, 1]
        assert (np.diff(covered) >= 0).all(), r.name  # monotone in the test set
    nlc = measure_coverage(ctx(), model, small, None, ["nc"], preset="nlc", test_indices=SOME[:100])["nc"]
    assert nlc.value.total == 6 + 16 + 120 + 84 + 10 and nlc.provenance["activation_point"] == "pre"
    tip = measure_coverage(ctx(), model, small, None, ["kmnc"], preset="dnn-tip", layers=["conv2", "fc1"],
                           options={"kmnc": {"k": 10}}, test_indices=SOME[:100])["kmnc"]
    assert tip.value.total == (16 * 8 * 8 + 120) * 10 and tip.criterion.semantics == "dnn-tip"


def test_per_class_mode(model, small):
    result = measure_coverage(ctx(), model, small, "fc2", ["idc", "nc"], per_class=True, m=4, test_indices=SOME)
    idc = result["idc"]
    assert sorted(idc.per_class) == list(range(10))
    fractions = [v.fraction for v in idc.per_class.values() if v.fraction is not None]
    assert idc.value.fraction == pytest.approx(np.mean(fractions))
    cls = 1
    member = idc.criterion.model(cls)
    assert member.inputs_seen == int((small.split("test").labels[SOME] == cls).sum())
    code = int(member.covered()[0][0])
    routed = idc.criterion.inputs_in(code, cls)
    assert (small.split("test").labels[SOME][routed] == cls).all() and len(routed) == member.covered()[1][0]
    assert result["nc"].per_class is not None


def test_results_are_stored_and_reused(model, small, tmp_path):
    project = Project.create(tmp_path / "p", "fashion-mnist", ["lenet5-fashion"])
    messages = []
    job = JobContext("cpu", on_progress=lambda d, t, m: messages.append(m))
    first = measure_coverage(job, model, small, "fc2", ["idc", "kmnc"], project=project, test_indices=SOME)
    assert first["idc"].artifact and first["idc"].fit_artifact and not first["idc"].reused
    messages.clear()
    again = measure_coverage(job, model, small, "fc2", ["idc", "kmnc"], project=project, test_indices=SOME)
    assert again["idc"].reused and again["kmnc"].reused and not any("coverage:" in m for m in messages)
    assert again["idc"].value == first["idc"].value
    assert again["idc"].criterion.input_codes.tolist() == first["idc"].criterion.input_codes.tolist()
    np.testing.assert_array_equal(again["kmnc"].criterion.matrix(), first["kmnc"].criterion.matrix())
    np.testing.assert_array_equal(again["idc"].curve, first["idc"].curve)
    # another test subset reuses the fitted criteria: no training pass
    messages.clear()
    other = measure_coverage(job, model, small, "fc2", ["idc"], project=project, test_indices=SOME[:50])
    assert other["idc"].fit_artifact == first["idc"].fit_artifact and not other["idc"].reused
    assert "coverage: training activations" not in messages and "coverage: test inputs" in messages
    # other options are another fit
    m8 = measure_coverage(job, model, small, "fc2", ["idc"], m=8, project=project, test_indices=SOME)
    assert m8["idc"].fit_artifact != first["idc"].fit_artifact


def test_a_saved_state_from_another_model_or_layer_is_refused(model, small, tmp_path):
    result = measure_coverage(ctx(), model, small, "fc2", ["kmnc"], test_indices=SOME[:50])["kmnc"]
    path = tmp_path / "kmnc.h5"
    artifacts.save_state_file(path, result.criterion.state_dict())
    state = artifacts.load_state_file(path)
    same = KMNC(layers=result.criterion.layers).bind(**result.criterion.context)
    assert same.load_state_dict(state).coverage() == result.value
    other_model = copy.deepcopy(model)
    other_model.module.fc1.bias.data += 1
    retrained = KMNC(layers=result.criterion.layers).bind(**{**result.criterion.context,
                                                             "model": other_model.fingerprint()})
    with pytest.raises(WorkbenchError, match="different setup.*model") as info:
        retrained.load_state_dict(state)
    assert "measure coverage again" in info.value.hint
    with pytest.raises(WorkbenchError, match="layers"):
        KMNC(layers=["fc1"]).bind(**result.criterion.context).load_state_dict(state)
    with pytest.raises(WorkbenchError, match="not 'nc'"):
        create_criterion("nc").load_state_dict(state)


def test_cancelling_stops_within_a_batch_and_stores_nothing(model, small, tmp_path):
    project = Project.create(tmp_path / "p", "fashion-mnist")
    job = JobContext("cpu")
    seen = []

    def progress(done, total, message):
        seen.append(message)
        if message == "coverage: test inputs" and done > 0:
            job.cancel()

    job._on_progress = progress
    with pytest.raises(Cancelled):
        measure_coverage(job, model, small, "fc2", ["nc", "kmnc"], project=project, batch_size=100,
                         test_indices=SOME)
    assert project.artifacts("coverage") == {} and project.artifacts("coverage-fit") == {}


def test_bad_input_is_refused_clearly(model, small):
    with pytest.raises(WorkbenchError, match="m = 12 is larger than the 10 neurons of layer 'fc3'"):
        measure_coverage(ctx(), model, small, "fc3", ["idc"], m=12, test_indices=SOME)
    colour = Split(np.zeros((4, 3, 28, 28), np.uint8), np.zeros(4, np.int64))
    with pytest.raises(WorkbenchError, match="shape"):
        measure_coverage(ctx(), model, small, "fc2", ["nc"], test_split=colour)
    wrong_labels = Split(np.zeros((4, 1, 28, 28), np.uint8), np.array([0, 1, 12, 3]))
    with pytest.raises(WorkbenchError, match="class 12"):
        measure_coverage(ctx(), model, small, "fc2", ["nc"], test_split=wrong_labels)
    train, test = small.split("train"), small.split("test")
    three = Dataset("three", ["a", "b", "c"], {"train": train.subset(np.flatnonzero(train.labels < 3)),
                                               "test": test.subset(np.flatnonzero(test.labels < 3))}, small.card)
    with pytest.raises(WorkbenchError, match="10 outputs but dataset 'three' has 3 classes"):
        measure_coverage(ctx(), model, three, "fc2", ["nc"])
    with pytest.raises(WorkbenchError, match="no layer 'fc9'"):
        measure_coverage(ctx(), model, small, "fc9", ["idc"])
    with pytest.raises(WorkbenchError, match="Unknown coverage criterion 'foo'"):
        measure_coverage(ctx(), model, small, "fc2", ["foo"])
    with pytest.raises(WorkbenchError, match="no option"):
        measure_coverage(ctx(), model, small, "fc2", ["kmnc"], options={"kmnc": {"sections": 3}})


def test_a_layer_with_constant_activations_is_reported_not_dropped(model, small):
    dead = copy.deepcopy(model)
    dead.module.fc2.weight.data.zero_()
    dead.module.fc2.bias.data.fill_(-1.0)  # fc2 after its ReLU is 0 for every input
    results = measure_coverage(ctx(), dead, small, "fc2", ["kmnc"], layers=None, test_indices=SOME[:50])
    kmnc = results["kmnc"]
    fc2 = [i for i, label in enumerate(kmnc.criterion.neuron_labels()) if label.startswith("fc2[")]
    assert set(fc2) <= set(kmnc.criterion.never_coverable.tolist())
    assert kmnc.value.total == 258 * 1000  # still in the denominator
    assert any(w.startswith("layer 'fc2': 84 of 84 neurons") and "can never be covered" in w for w in kmnc.warnings)
    idc = IDC(neurons=[0, 1, 2])
    result = measure_coverage(ctx(), dead, small, "fc2", [idc], test_indices=SOME[:50])["idc"]
    assert [c.reason for c in result.criterion.clusters] == ["few-values"] * 3
    assert result.value == CoverageValue.of(1, 1) and len(result.warnings) == 3


class HalfRange(Criterion):
    """A plugin-style criterion: a neuron is covered when some input exceeds half its training maximum."""

    name, title = "half-range", "Half range"

    def __init__(self, layers=None):
        super().__init__()
        self.layers = layers
        self.reset()

    def _start_fit(self):
        self.top = None

    def _partial_fit(self, layers, labels, predictions):
        v = np.concatenate([a.reshape(len(a), -1) for a in layers.values()], axis=1).max(0)
        self.top = v if self.top is None else np.maximum(self.top, v)

    def _update(self, layers, labels, predictions):
        v = np.concatenate([a.reshape(len(a), -1) for a in layers.values()], axis=1)
        self.hit |= (v > self.top / 2).any(0)

    def _reset_cover(self):
        self.hit = np.zeros(0 if getattr(self, "top", None) is None else len(self.top), dtype=bool)

    def coverage(self):
        return CoverageValue.of(int(self.hit.sum()), len(self.hit))


def test_a_plugin_criterion_is_created_by_name_and_measured(isolated_plugins, model, small):
    isolated_plugins.REGISTRY.add_criterion("half-range", HalfRange)
    assert isinstance(create_criterion("half-range", layers=["fc1"]), HalfRange)
    result = measure_coverage(ctx(), model, small, None, ["half-range"], layers=["fc1"],
                              test_indices=SOME[:40])["half-range"]
    assert result.value.total == 120 and 0 < result.value.covered <= 120
    assert isolated_plugins.REGISTRY.extensions["criterion"]["half-range"] is HalfRange


def test_a_minimal_plugin_criterion_says_what_it_cannot_do(model, small):
    """Coverage, update and reset are required (abstract); matrix, profile and saved state are optional."""
    from workbench.core.coverage.protocol import Criterion
    from workbench.core.errors import WorkbenchError

    class NoCoverage(Criterion):
        name = "no-coverage"

    with pytest.raises(TypeError, match="abstract"):
        NoCoverage()
    criterion = HalfRange(layers=["fc1"])
    criterion.fit({"fc1": np.ones((3, 120))})
    for call in (criterion.matrix, lambda: criterion.profile({"fc1": np.ones((2, 120))}), criterion.state_dict):
        with pytest.raises(WorkbenchError, match="'half-range' cannot"):
            call()


def test_groups_fail_on_their_own_and_a_set_that_measured_nothing_fails_the_job(model, small):
    from workbench.core.coverage.measure import measure_groups

    some = measure_groups(ctx(), model, small, "test", SOME, "fc3", [("idc",), ("nc",)], 12, None)
    assert set(some.results) == {"nc"} and "larger than the 10 neurons" in some.errors["idc"].message
    with pytest.raises(WorkbenchError, match="larger than the 10 neurons") as alone:
        measure_groups(ctx(), model, small, "test", SOME, "fc3", [("idc",)], 12, None)
    assert alone.value.message.startswith("m = 12")  # one failure is raised as it is
    with pytest.raises(WorkbenchError, match="No criterion could be measured: IDC: m = 12 .*; FOO: Unknown") as every:
        measure_groups(ctx(), model, small, "test", SOME, "fc3", [("idc",), ("foo",)], 12, None)
    assert every.value.hint

"""Identity with dnn-tip 0.1.1 (a test extra) on the same activations, in `semantics="dnn-tip"` mode.

dnn-tip has NAC, KMNC, NBC, SNAC, TKNC, LSA, DSA, MDSA and a surprise-coverage mapper; each is fed
the very arrays our criterion gets and must give the same profiles, coverage and SA values. The
activations mimic real ones: ReLU outputs with many exact zeros (ties for top-k, dead neurons whose
min = max), conv tensors flattened element-wise, and a real LeNet-5's activations on Fashion-MNIST.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from workbench.core.coverage import DSA, KMNC, LSA, MDSA, NBC, NC, SNAC, TKNC

nc_tip = pytest.importorskip("dnn_tip.neuron_coverage", reason="dnn-tip not installed: pip install dnn-tip==0.1.1")
sa_tip = pytest.importorskip("dnn_tip.surprise")

pytestmark = [pytest.mark.filterwarnings("ignore::UserWarning"), pytest.mark.filterwarnings("ignore::RuntimeWarning")]


def relu_layers(rng, n, scale=1.0):
    conv = np.maximum(rng.normal(-0.3, scale, size=(n, 3, 4, 4)), 0).astype(np.float32)
    conv[:, 1, 0, 0] = 0.0  # a dead element: min = max = 0
    dense = np.maximum(rng.normal(-0.5, scale, size=(n, 10)), 0).astype(np.float32)
    logits = rng.normal(0, 2 * scale, size=(n, 5)).astype(np.float32)
    return {"conv": conv, "dense": dense, "logits": logits}


@pytest.fixture(scope="module")
def acts():
    rng = np.random.default_rng(0)
    return relu_layers(rng, 400), relu_layers(rng, 150, scale=1.3)


def tip_list(layers: dict) -> list[np.ndarray]:
    return list(layers.values())


def stats(train: dict):
    mins = [a.astype(np.float64).min(0) for a in train.values()]
    maxs = [a.astype(np.float64).max(0) for a in train.values()]
    stds = [a.astype(np.float64).std(0) for a in train.values()]
    return mins, maxs, stds


def ours(criterion, train, test):
    if criterion.needs_fit:
        criterion.fit(train)
    profile = criterion.profile(test)
    criterion.update(test)
    return profile, criterion.coverage()


def test_nac(acts):
    train, test = acts
    scores, profile = nc_tip.NAC(0.75)(tip_list(test))
    mine, value = ours(NC(0.75, conv_neuron="element", semantics="dnn-tip"), train, test)
    np.testing.assert_array_equal(mine, profile)
    assert value.covered == profile.any(0).sum() and value.total == profile.shape[1]
    np.testing.assert_array_equal(mine.sum(1), scores)


@pytest.mark.parametrize("k", [1, 7, 100])
def test_kmnc(acts, k):
    train, test = acts
    mins, maxs, _ = stats(train)
    scores, profile = nc_tip.KMNC(mins, maxs, k)(tip_list(test))
    mine, value = ours(KMNC(k, conv_neuron="element", semantics="dnn-tip"), train, test)
    expected = np.where(profile.any(2), profile.argmax(2), -1)
    np.testing.assert_array_equal(mine, expected)
    assert value.covered == profile.any(0).sum() and value.total == profile.shape[1] * k


def test_kmnc_at_exact_section_edges(acts):
    """Values placed on dnn-tip's own thresholds (and on max) fall on the same side in both."""
    train, _ = acts
    mins, maxs, _ = stats(train)
    k = 8
    lo, hi = np.concatenate([m.ravel() for m in mins]), np.concatenate([m.ravel() for m in maxs])
    jumps = (hi - lo) / k
    edges = np.stack([lo + jumps * i for i in range(k + 1)])  # (k+1, N) dnn-tip's thresholds
    test_flat = np.concatenate([edges, np.nextafter(edges, -np.inf), np.nextafter(edges, np.inf)])
    sizes = [int(np.prod(a.shape[1:])) for a in train.values()]
    parts = np.split(test_flat, np.cumsum(sizes)[:-1], axis=1)
    test = {name: p.reshape((len(p),) + a.shape[1:]) for (name, a), p in zip(train.items(), parts)}
    _, profile = nc_tip.KMNC(mins, maxs, k)(tip_list(test))
    mine, _ = ours(KMNC(k, conv_neuron="element", semantics="dnn-tip"), train, test)
    np.testing.assert_array_equal(mine, np.where(profile.any(2), profile.argmax(2), -1))
    at_max = KMNC(k, conv_neuron="element").fit(train).profile({n: a[k:k + 1] for n, a in test.items()})
    live = hi > lo
    assert (mine[k][live] == -1).all() and (at_max[0][live] == k - 1).all()  # v = max: uncovered vs last section


@pytest.mark.parametrize("scaler", [0.0, 0.5])
def test_nbc_and_snac(acts, scaler):
    train, test = acts
    mins, maxs, stds = stats(train)
    _, nbc_profile = nc_tip.NBC(mins, maxs, stds, scaler)(tip_list(test))
    _, snac_profile = nc_tip.SNAC(maxs, stds, scaler)(tip_list(test))
    mine, value = ours(NBC(scaler, conv_neuron="element", semantics="dnn-tip"), train, test)
    np.testing.assert_array_equal(mine, nbc_profile)
    assert value.covered == nbc_profile.any(0).sum() and value.total == nbc_profile[0].size
    mine, value = ours(SNAC(scaler, conv_neuron="element", semantics="dnn-tip"), train, test)
    np.testing.assert_array_equal(mine, snac_profile)
    assert value.covered == snac_profile.any(0).sum()


@pytest.mark.parametrize("k", [1, 3, 12])
def test_tknc_with_ties(acts, k):
    train, test = acts
    _, profile = nc_tip.TKNC(k)(tip_list(test))
    mine, value = ours(TKNC(k, conv_neuron="element", semantics="dnn-tip"), train, test)
    np.testing.assert_array_equal(mine, profile)
    assert value.covered == profile.any(0).sum()
    if k < 12:  # the zeros tie at the k-th place, so the tie rule matters: the default lower-index rule differs
        assert (TKNC(k, conv_neuron="element").profile(test) != profile).any()


def test_neuron_criteria_on_a_real_lenet(fashion_slice):
    """Conv and dense activations of the bundled LeNet-5, flattened as dnn-tip users pass them."""
    from workbench.core.execution.jobs import JobContext
    from workbench.core.models.activations import NeuronDefinition, stream_activations
    from workbench.core.models.model_io import load_model

    model = load_model("lenet5-fashion")
    defs = [NeuronDefinition("conv2", "post", "element"), NeuronDefinition("fc1"), NeuronDefinition("fc2")]

    def collect(split, n):
        parts = [a for _, a, _ in stream_activations(JobContext("cpu"), model.module, split, defs, (1, 28, 28), 500,
                                                     np.arange(n))]
        return {d.layer: np.concatenate([p[d] for p in parts]) for d in defs}

    train, test = collect(fashion_slice.split("train"), 1000), collect(fashion_slice.split("test"), 100)
    mins, maxs, stds = stats(train)
    tip = {"nc": nc_tip.NAC(0.75), "kmnc": nc_tip.KMNC(mins, maxs, 50), "nbc": nc_tip.NBC(mins, maxs, stds, 0.0),
           "snac": nc_tip.SNAC(maxs, stds, 0.0), "tknc": nc_tip.TKNC(3)}
    mine = {"nc": NC(0.75, semantics="dnn-tip"), "kmnc": KMNC(50, semantics="dnn-tip"),
            "nbc": NBC(semantics="dnn-tip"), "snac": SNAC(semantics="dnn-tip"), "tknc": TKNC(3, semantics="dnn-tip")}
    for name, crit in mine.items():
        _, profile = tip[name](tip_list(test))
        _, value = ours(crit, train, test)
        expected = profile.any(0).sum()
        assert value.covered == expected and value.total == profile[0].size, name


# --- surprise adequacy ---------------------------------------------------------------------------

@pytest.fixture(scope="module")
def ats():
    """Well-conditioned float64 ATs of 3 classes, with a test point equal to a training point."""
    rng = np.random.default_rng(5)
    centres = rng.normal(0, 3, size=(3, 6))
    train_pred = np.repeat(np.arange(3), 80)
    train = centres[train_pred] + rng.normal(size=(240, 6))
    test_pred = rng.integers(0, 3, size=60)
    test = centres[test_pred] + rng.normal(scale=1.5, size=(60, 6))
    test[0], test_pred[0] = train[10], train_pred[10]
    test[1] = centres[test_pred[1]] + 40.0  # far away: dnn-tip's density underflows to 0 there
    return train, train_pred, test, test_pred


def test_lsa(ats):
    train, train_pred, test, test_pred = ats
    tip = sa_tip.MultiModalSA.build_by_class(train, train_pred, lambda a, p: sa_tip.LSA(a, max_features=4))
    expected = tip(test, test_pred)
    mine = LSA(max_features=4, semantics="dnn-tip").fit(train, predictions=train_pred)
    got = mine.score(test, predictions=test_pred)
    assert np.isinf(expected[1]) and np.isinf(got[1])
    np.testing.assert_allclose(got, expected, rtol=1e-9)


def test_dsa(ats):
    train, train_pred, test, test_pred = ats
    expected = sa_tip.DSA(train, train_pred)(test, test_pred, num_threads=1)
    got = DSA(semantics="dnn-tip").fit(train, predictions=train_pred).score(test, predictions=test_pred)
    assert got[0] == 0.0
    np.testing.assert_allclose(got, expected, rtol=1e-9, atol=1e-12)


def test_mdsa(ats):
    train, train_pred, test, test_pred = ats
    tip = sa_tip.MultiModalSA.build_by_class(train, train_pred, lambda a, p: sa_tip.MDSA(a))
    expected = tip(test, test_pred)
    got = MDSA(semantics="dnn-tip").fit(train, predictions=train_pred).score(test, predictions=test_pred)
    np.testing.assert_allclose(got, expected, rtol=1e-9)
    spec = MDSA().fit(train, predictions=train_pred).score(test, predictions=test_pred)
    np.testing.assert_allclose(spec, np.sqrt(expected), rtol=1e-9)  # the default MDSA is the distance itself


@pytest.mark.parametrize("overflow", [False, True])
def test_surprise_coverage_buckets(overflow):
    B, U = 10, 2.0
    sa = np.concatenate([np.linspace(0, U, 41), [-0.1, 2.5, 1e9, np.inf, np.nan, 0.3, 1.7]])
    mapper = sa_tip.SurpriseCoverageMapper(B, U, overflow_bucket=overflow)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        profile = mapper.get_coverage_profile(sa)
    crit = DSA(buckets=B, upper=U, overflow=overflow, semantics="dnn-tip")
    buckets = crit.bucket_of(sa)
    np.testing.assert_array_equal(buckets, np.where(profile.any(1), profile.argmax(1), -1))
    assert crit.sc_total == B

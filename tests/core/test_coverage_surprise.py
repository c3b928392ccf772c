"""Surprise adequacy and surprise coverage on tiny arrays computed by hand
(docs/methods/classic-criteria.md#surprise-adequacy and #surprise-coverage)."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import gaussian_kde

from workbench.core.coverage import DSA, LSA, MDSA, CoverageValue
from workbench.core.coverage.kde import GaussianKDE, SingularDensity
from workbench.core.errors import WorkbenchError

TRAIN = np.array([[0.0, 0.0], [1.0, 0.0], [3.0, 0.0], [5.0, 0.0]])
GROUPS = np.array([0, 0, 1, 1])


def test_dsa_by_hand_with_ties_to_the_lower_index():
    dsa = DSA().fit(TRAIN, predictions=GROUPS)
    x = np.array([[0.5, 0.0], [4.0, 1.0], [1.0, 0.0]])
    # x0: class 0, equidistant from (0,0) and (1,0) → x_a = (0,0); its nearest other-class AT (3,0): 0.5 / 3
    # x1: class 1, equidistant from (3,0) and (5,0) → x_a = (3,0); nearest class-0 AT (1,0): √2 / 2
    # x2: class 0, equal to a training AT: 0
    np.testing.assert_allclose(dsa.score(x, predictions=[0, 1, 0]), [0.5 / 3, np.sqrt(2) / 2, 0.0], rtol=1e-12)
    by_label = DSA(by="label").fit(TRAIN, labels=GROUPS)
    np.testing.assert_allclose(by_label.score(x, labels=[0, 1, 0]), [0.5 / 3, np.sqrt(2) / 2, 0.0], rtol=1e-12)


def test_mdsa_by_hand():
    train = np.array([[0.0], [2.0], [10.0], [14.0]])
    mdsa = MDSA().fit(train, predictions=GROUPS)  # class 0: mean 1, var 1; class 1: mean 12, var 4
    np.testing.assert_allclose(mdsa.score(np.array([[3.0], [8.0]]), predictions=[0, 1]), [2.0, 2.0])
    tip = MDSA(semantics="dnn-tip").fit(train, predictions=GROUPS)
    np.testing.assert_allclose(tip.score(np.array([[3.0]]), predictions=[0]), [4.0])  # dnn-tip: squared


def test_kde_matches_scipy_and_stays_finite_far_away():
    rng = np.random.default_rng(0)
    data = rng.normal(size=(300, 4)) @ rng.normal(size=(4, 4))
    points = np.concatenate([rng.normal(size=(50, 4)), [[80.0, -80.0, 80.0, 80.0]]])
    ours = GaussianKDE(data).logpdf(points)
    ref = gaussian_kde(data.T).logpdf(points.T)
    np.testing.assert_allclose(ours[:-1], ref[:-1], rtol=1e-9)
    assert np.isfinite(ours[-1]) and ours[-1] < -1000  # scipy's density is 0 there; the log stays finite
    assert gaussian_kde(data.T).evaluate(points[-1:].T)[0] == 0.0
    with pytest.raises(SingularDensity):
        GaussianKDE(np.c_[data[:, :1], 2 * data[:, :1]])  # collinear columns


def test_lsa_drops_low_variance_neurons_in_any_class():
    rng = np.random.default_rng(1)
    train = rng.normal(size=(200, 3))
    groups = np.repeat([0, 1], 100)
    train[:100, 2] = 0.5  # constant in class 0 only: dropped for every class
    lsa = LSA().fit(train, predictions=groups)
    assert lsa.kept_neurons.tolist() == [0, 1]
    test = rng.normal(size=(5, 3))
    expected = -gaussian_kde(train[100:, :2].T).logpdf(test[:, :2].T)
    np.testing.assert_allclose(lsa.score(test, predictions=np.ones(5, int)), expected, rtol=1e-9)
    top = LSA(max_features=1).fit(train, predictions=groups)
    assert len(top.kept_neurons) == 1


def test_a_singular_density_is_reported_not_zeroed():
    rng = np.random.default_rng(2)
    good = rng.normal(size=(50, 2))
    bad = rng.normal(size=(50, 1))
    train = np.concatenate([good, np.c_[bad, 3 * bad]])  # class 1's two neurons are collinear
    groups = np.repeat([0, 1], 50)
    lsa = LSA().fit(train, predictions=groups)
    assert list(lsa.singular_classes) == [1] and any("class 1 has a singular density" in w for w in lsa.warnings)
    sa = lsa.score(np.zeros((2, 2)), predictions=[0, 1])
    assert np.isfinite(sa[0]) and np.isnan(sa[1])
    lsa.update(np.zeros((2, 2)), predictions=[0, 1])
    assert lsa.coverage().covered == (1 if 0 <= sa[0] <= 2000 else 0)
    assert any("test input(s) predicted as class 1: its density is singular" in w for w in lsa.warnings)
    with pytest.raises(WorkbenchError, match="class 1's training activation traces is singular"):
        LSA(on_singular="error").fit(train, predictions=groups)
    with pytest.raises(WorkbenchError, match="every class"):
        LSA().fit(np.c_[bad, 3 * bad], predictions=np.zeros(50, int))


def test_surprise_coverage_buckets_and_overflow():
    dsa = DSA(buckets=4, upper=2.0)
    sa = np.array([0.0, 0.5, 0.49, 2.0, 2.1, -0.1, np.nan, np.inf])
    assert dsa.bucket_of(sa).tolist() == [0, 1, 0, 3, -1, -1, -1, -1]
    over = DSA(buckets=4, upper=2.0, overflow=True)
    assert over.bucket_of(sa).tolist() == [0, 1, 0, 3, 4, -1, -1, 4] and over.sc_total == 5
    assert DSA().sc_upper == 2.0 and LSA().sc_upper == 2000.0 and MDSA().sc_upper is None
    assert MDSA().sc_width == 10.0 and MDSA(upper=50).sc_total == 1000


def test_surprise_coverage_grows_with_inputs_and_counts_out_of_range():
    dsa = DSA(buckets=10, upper=1.0).fit(TRAIN, predictions=GROUPS)
    x = np.array([[0.5, 0.0], [4.0, 1.0], [1.0, 0.0], [0.0, 30.0]])
    sa = dsa.score(x, predictions=[0, 1, 0, 0])
    dsa.update(x[:2], predictions=[0, 1])
    assert dsa.coverage() == CoverageValue.of(2, 10)  # 1/6 → bucket 1, √2/2 → bucket 7
    dsa.update(x[2:], predictions=[0, 0])  # 0 → bucket 0; 30/3 = 10 > 1: uncounted
    assert dsa.coverage() == CoverageValue.of(3, 10) and sa[3] == pytest.approx(10.0)
    assert dsa.matrix().tolist() == [[1, 1, 0, 0, 0, 0, 0, 1, 0, 0]]
    assert any("1 test input(s) had an SA above 1 and cover no bucket" in w for w in dsa.warnings)
    np.testing.assert_allclose(dsa.values, sa)


def test_width_variant_counts_distinct_buckets():
    mdsa = MDSA().fit(np.array([[0.0], [2.0], [10.0], [14.0]]), predictions=GROUPS)
    mdsa.update(np.array([[1.0 + 3], [1.0 + 15], [1.0 + 17], [1.0 + 25]]), predictions=[0, 0, 0, 0])
    assert mdsa.coverage() == CoverageValue(None, 3, None)  # SA 3, 15, 17, 25 → ⌊SA/10⌋ ∈ {0, 1, 2}


def test_per_class_surprise_coverage_is_the_mean_over_classes():
    dsa = DSA(buckets=10, upper=1.0, per_class=True).fit(TRAIN, predictions=GROUPS)
    x = np.array([[0.5, 0.0], [4.0, 1.0], [1.0, 0.0]])
    dsa.update(x, labels=[0, 1, 0], predictions=[0, 1, 0])
    per_class = dsa.per_class_coverage()
    assert per_class == {0: CoverageValue.of(2, 10), 1: CoverageValue.of(1, 10)}
    assert dsa.coverage().fraction == pytest.approx(0.15)


def test_a_class_without_training_traces_gets_no_sa():
    dsa = DSA().fit(TRAIN, predictions=GROUPS)
    sa = dsa.update(np.array([[0.0, 0.0]]), predictions=[5]).values
    assert np.isnan(sa[0]) and any("class 5" in w for w in dsa.warnings)


def test_seeded_training_subsample_and_state_round_trip():
    rng = np.random.default_rng(3)
    train, groups = rng.normal(size=(300, 3)), rng.integers(0, 3, 300)
    test, pred = rng.normal(size=(20, 3)), rng.integers(0, 3, 20)
    a = DSA(max_train=100, seed=4).fit(train, predictions=groups)
    b = DSA(max_train=100, seed=4).fit(train, predictions=groups)
    assert len(a.train_ats) == 100 and (a.train_ats == b.train_ats).all()
    a.update(test, predictions=pred)
    c = DSA(max_train=100, seed=4).load_state_dict(a.state_dict())
    np.testing.assert_array_equal(c.values, a.values)
    assert c.coverage() == a.coverage()
    np.testing.assert_array_equal(c.score(test, predictions=pred), a.values)
    with pytest.raises(WorkbenchError, match="max_train"):
        DSA(max_train=50, seed=4).load_state_dict(a.state_dict())


def test_negative_lsa_is_reported_as_below_the_buckets():
    rng = np.random.default_rng(6)
    tight = rng.normal(scale=0.01, size=(100, 2))  # a density far above 1: LSA < 0 near the data
    lsa = LSA().fit(tight, predictions=np.zeros(100, int))
    lsa.update(tight[:5], predictions=np.zeros(5, int))
    assert (lsa.values < 0).all() and lsa.coverage().covered == 0
    assert any("5 test input(s) had a negative SA" in w for w in lsa.warnings)

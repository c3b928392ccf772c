"""Classic criteria on tiny arrays whose coverage is computed by hand (docs/methods/classic-criteria.md#nc to
#tknc-and-tknp)."""

from __future__ import annotations

import numpy as np
import pytest

from workbench.core.coverage import KMNC, NBC, NC, SNAC, TKNC, TKNP, CoverageValue
from workbench.core.coverage.stats import NeuronStats
from workbench.core.coverage.topk import top_k_mask
from workbench.core.errors import WorkbenchError

# two neurons: n0 ranges over [0, 10] on the training data, n1 is constant 3
TRAIN = np.array([[0.0, 3.0], [10.0, 3.0], [4.0, 3.0]])


def test_stats_match_numpy_whatever_the_batches():
    rng = np.random.default_rng(0)
    x = rng.normal(5, 3, size=(1000, 7)).astype(np.float32)
    for sizes in ([1000], [1, 999], [333, 333, 334], [7] * 142 + [6]):
        stats, start = NeuronStats(), 0
        for s in sizes:
            stats.add(x[start:start + s])
            start += s
        ref = x.astype(np.float64)
        np.testing.assert_array_equal(stats.min, ref.min(0))
        np.testing.assert_array_equal(stats.max, ref.max(0))
        np.testing.assert_allclose(stats.std, ref.std(0), rtol=1e-12)
        assert stats.n == 1000


def test_kmnc_sections_are_closed_at_both_ends_and_out_of_range_covers_nothing():
    kmnc = KMNC(k=4).fit(TRAIN)  # n0 sections [0, 2.5) [2.5, 5) [5, 7.5) [7.5, 10]
    test = np.array([[10.0, 3.0], [0.0, 3.0], [-1.0, 3.0], [11.0, 3.0], [5.0, 3.0], [2.4999, 3.0]])
    assert kmnc.profile(test)[:, 0].tolist() == [3, 0, -1, -1, 2, 0]
    assert (kmnc.profile(test)[:, 1] == -1).all()  # a constant neuron is never covered
    kmnc.update(test)
    assert kmnc.coverage() == CoverageValue(3 / 8, 3, 8)
    assert kmnc.matrix().shape == (2, 4) and kmnc.matrix()[0].tolist() == [2, 0, 1, 1]
    assert kmnc.never_coverable.tolist() == [1]
    assert any("1 of 2 neurons" in w and "can never be covered" in w and "[1]" in w for w in kmnc.warnings)


def test_kmnc_uses_float64_so_boundaries_do_not_move():
    # float32 arithmetic puts 0.3 (as float32) one section off for k = 10 on [0, 1]: float64 does not
    kmnc = KMNC(k=10).fit(np.array([[0.0], [1.0]], dtype=np.float32))
    v = np.float32(0.3)
    expected = int(np.floor((np.float64(v) - 0.0) / 1.0 * 10))
    assert kmnc.profile(np.array([[v]], dtype=np.float32))[0, 0] == expected == 3


def test_kmnc_dnn_tip_sections_are_half_open():
    kmnc = KMNC(k=4, semantics="dnn-tip").fit(TRAIN)
    assert kmnc.profile(np.array([[10.0, 3.0], [0.0, 3.0], [9.99, 3.0]]))[:, 0].tolist() == [-1, 0, 3]


def test_nbc_and_snac_corners_strict_by_default_inclusive_for_dnn_tip():
    test = np.array([[10.0, 3.0], [-0.5, 3.0], [10.5, 2.0]])
    nbc, snac = NBC().fit(TRAIN), SNAC().fit(TRAIN)
    prof = nbc.profile(test)  # (inputs, neurons, [lower, upper])
    assert prof[:, 0].tolist() == [[False, False], [True, False], [False, True]]
    assert prof[:, 1].tolist() == [[False, False], [False, False], [True, False]]
    nbc.update(test)
    snac.update(test)
    assert nbc.coverage() == CoverageValue.of(3, 4)   # n0 lower, n0 upper, n1 lower
    assert snac.coverage() == CoverageValue.of(1, 2)  # n0 upper
    assert nbc.matrix().tolist() == [[1, 1], [1, 0]]
    tip = NBC(semantics="dnn-tip").fit(TRAIN)
    tip.update(test)  # v = max counts as upper, and the constant n1 = 3 is both its min and max
    assert tip.coverage() == CoverageValue.of(4, 4)
    assert SNAC(semantics="dnn-tip").fit(TRAIN).update(test).coverage() == CoverageValue.of(2, 2)


def test_boundary_margin_in_stds():
    train = np.array([[0.0], [2.0]])  # std 1
    nbc = NBC(sigma=0.5).fit(train)
    assert nbc.profile(np.array([[2.4], [2.6], [-0.6]]))[:, 0].tolist() == [[False, False], [False, True],
                                                                           [True, False]]


def test_nc_two_scalings_and_constant_inputs():
    # one input, 3 channels of 1×2: ch0 = [0, 4], ch1 = [3, 3], ch2 = [2, 2]
    x = np.array([[[[0.0, 4.0]], [[3.0, 3.0]], [[2.0, 2.0]]]])
    # whole-tensor scaling: means (2, 3, 2) over [0, 4] → 0.5, 0.75, 0.5: nothing > 0.75
    assert NC().profile({"conv": x}).tolist() == [[False, False, False]]
    # NLC's scaling of the means across neurons: (2, 3, 2) over [2, 3] → 0, 1, 0
    assert NC(scaling="neuron_values").profile({"conv": x}).tolist() == [[False, True, False]]
    assert NC(threshold=0.7).profile({"conv": x}).tolist() == [[False, True, False]]
    constant = np.full((2, 3, 1, 2), 5.0)
    nc = NC().update({"conv": constant})
    assert nc.coverage() == CoverageValue.of(0, 3)
    assert any("2 input(s) had constant activations" in w for w in nc.warnings)
    # dnn-tip thresholds raw values; conv tensors flattened
    tip = NC(threshold=2.5, conv_neuron="element", semantics="dnn-tip")
    assert tip.profile({"conv": x}).tolist() == [[False, True, True, True, False, False]]


def test_nc_over_several_layers_counts_every_neuron():
    dense = np.array([[0.0, 1.0, 0.9], [1.0, 0.0, 0.2]])
    conv = np.zeros((2, 2, 2, 2))
    conv[0, 1] = 1.0
    nc = NC().update({"a": dense, "b": conv})
    assert nc.neurons == 5 and nc.neuron_labels() == ["a[0]", "a[1]", "a[2]", "b[0]", "b[1]"]
    assert nc.matrix().tolist() == [[1, 1, 1, 0, 1]]
    assert nc.coverage() == CoverageValue.of(4, 5)
    with pytest.raises(WorkbenchError, match="missing"):
        NC(layers=["a", "c"]).update({"a": dense, "b": conv})


def test_top_k_ties_go_to_the_lower_index():
    v = np.array([[1.0, 3.0, 3.0, 3.0, 0.0], [5.0, 4.0, 4.0, 1.0, 4.0]])
    assert top_k_mask(v, 2).tolist() == [[False, True, True, False, False], [True, True, False, False, False]]
    assert top_k_mask(v, 9).all()
    rng = np.random.default_rng(1)
    many = rng.integers(0, 4, size=(200, 30)).astype(np.float32)
    for k in (1, 3, 10):
        ref = np.zeros_like(many, dtype=bool)
        np.put_along_axis(ref, np.argsort(-many, axis=1, kind="stable")[:, :k], True, axis=1)
        np.testing.assert_array_equal(top_k_mask(many, k), ref)
        tip = np.zeros_like(many, dtype=bool)
        np.put_along_axis(tip, np.argsort(many, axis=1)[:, -k:], True, axis=1)
        np.testing.assert_array_equal(top_k_mask(many, k, "argsort"), tip)


def test_tknc_per_layer_and_tknp_counts_sets_not_orders():
    a = np.array([[3.0, 2.0, 1.0], [2.0, 3.0, 1.0], [1.0, 1.0, 5.0]])
    b = np.array([[0.0, 1.0], [0.0, 1.0], [1.0, 0.0]])
    tknc = TKNC(k=2).update({"a": a, "b": b})
    # layer a: {0,1}, {0,1}, {2,0}; layer b (k ≥ its size): everything
    assert tknc.matrix().tolist() == [[3, 2, 1, 3, 3]]
    assert tknc.coverage() == CoverageValue.of(5, 5)
    tknp = TKNP(k=2).update({"a": a, "b": b})
    # inputs 0 and 1 have the same sets ({0,1}, {0,1}) in different orders: one pattern
    assert tknp.coverage() == CoverageValue(None, 2, None)
    assert tknp.patterns.tolist() == [[0, 1, 0, 1], [0, 2, 0, 1]]
    assert tknp.pattern_counts.tolist() == [2, 1]
    tknp.update({"a": a[:1], "b": b[:1]})
    assert tknp.coverage().covered == 2 and tknp.pattern_counts.tolist() == [3, 1]


def test_criteria_never_lose_coverage_and_reset_keeps_the_fit():
    rng = np.random.default_rng(2)
    train = rng.normal(size=(300, 6))
    tests = [rng.normal(scale=1.5, size=(n, 6)) for n in (1, 1, 2, 4, 8, 16, 32, 64, 72)]
    for crit in (NC(), KMNC(k=10), NBC(), SNAC(), TKNC(k=2), TKNP(k=2)):
        crit.fit(train)
        seen = []
        for batch in tests:
            seen.append(crit.update(batch).coverage().covered)
        assert seen == sorted(seen) and seen[-1] > seen[0], crit.name
        assert crit.inputs_seen == 200
        crit.reset()
        assert crit.coverage().covered == 0 and crit.fitted and crit.inputs_seen == 0


def test_a_criterion_must_be_fitted_and_shapes_must_agree():
    with pytest.raises(WorkbenchError, match="not fitted"):
        KMNC().update(TRAIN)
    kmnc = KMNC().fit(TRAIN)
    with pytest.raises(WorkbenchError, match="neurons"):
        kmnc.update(np.zeros((2, 3)))
    with pytest.raises(WorkbenchError, match="NaN"):
        kmnc.update(np.array([[np.nan, 1.0]]))
    with pytest.raises(WorkbenchError, match="2 labels were given for 3 inputs"):
        kmnc.update(TRAIN, labels=np.zeros(2))
    with pytest.raises(WorkbenchError, match="semantics"):
        NC(semantics="keras")


def test_state_round_trip_keeps_fit_and_coverage():
    rng = np.random.default_rng(3)
    train, test = rng.normal(size=(100, 4)), rng.normal(scale=2, size=(30, 4))
    for make in (lambda: NC(), lambda: KMNC(k=7), lambda: NBC(sigma=0.5), lambda: SNAC(), lambda: TKNC(),
                 lambda: TKNP()):
        a = make().fit(train).update(test)
        b = make().load_state_dict(a.state_dict())
        assert b.coverage() == a.coverage() and b.inputs_seen == 30
        np.testing.assert_array_equal(b.matrix(), a.matrix())
        more = rng.normal(scale=3, size=(5, 4))
        assert b.update(more).coverage() == a.update(more).coverage()

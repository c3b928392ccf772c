"""IDC on tiny arrays whose clusters and covered combinations are worked out by hand (docs/methods/idc.md)."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.cluster import KMeans
from sklearn.metrics import silhouette_score

from workbench.core.coverage import IDC, CoverageValue, PerClass
from workbench.core.coverage.clustering import cluster_neuron, nearest_centroid
from workbench.core.coverage.combinations import CodeCounter, MixedRadix
from workbench.core.errors import WorkbenchError


def training_values(seed=0):
    """Four dense neurons: n2 two groups (≈1, ≈5) plus ten inactive zeros, n0 three groups (≈0.5, 5, 10),
    n1 noise, n3 constant 2.0."""
    rng = np.random.default_rng(seed)
    n = 60
    acts = np.zeros((n, 4))
    acts[:, 2] = np.concatenate([1 + rng.normal(0, 0.05, 25), 5 + rng.normal(0, 0.05, 25), np.zeros(10)])
    acts[:, 0] = np.repeat([0.5, 5.0, 10.0], 20) + rng.normal(0, 0.05, n)
    acts[:, 1] = rng.normal(size=n)
    acts[:, 3] = 2.0
    return acts


TEST = np.array([[0.4, 0.0, 1.1, 7.0],    # n2 → 1 (idx 0), n0 → 0.5 (idx 0), n3 → 2 (idx 0): code 0
                 [9.0, 0.0, 4.8, 0.0],    # (1, 2, 0): code 1·3 + 2 = 5
                 [6.0, 0.0, 0.0, 2.0],    # a zero maps to its nearest centroid ≈ 1: (0, 1, 0): code 1
                 [0.4, 0.0, 1.1, 7.0]])   # the first again


@pytest.fixture
def idc():
    return IDC(neurons=[2, 0, 3]).fit(training_values())


def test_clusters_chosen_by_silhouette_with_the_zero_filter(idc):
    n2, n0, n3 = idc.clusters
    assert idc.cluster_counts.tolist() == [2, 3, 1] and idc.incc_size == 6
    np.testing.assert_allclose(n2.centroids, [1.0, 5.0], atol=0.05)
    assert n2.zeros_dropped == 10 and n2.values == 50  # the dense "post" layer drops inactive zeros
    np.testing.assert_allclose(n0.centroids, [0.5, 5.0, 10.0], atol=0.05)
    assert n0.silhouettes[3] > max(n0.silhouettes[2], n0.silhouettes[4])
    assert n3.reason == "no-valid-k" and n3.centroids.tolist() == [2.0] and n3.silhouettes == {}
    assert any("neuron 3: constant" in w for w in idc.warnings)  # reported, not dropped
    assert idc.k_histogram() == {1: 1, 2: 1, 3: 1}


def test_coverage_is_covered_combinations_over_incc(idc):
    assert idc.profile(TEST).tolist() == [0, 5, 1, 0]
    idc.update(TEST)
    assert idc.coverage() == CoverageValue.of(3, 6)
    codes, counts = idc.covered()
    assert codes.tolist() == [0, 1, 5] and counts.tolist() == [2, 1, 1]
    assert idc.combinations([5]).tolist() == [[1, 2, 0]]
    np.testing.assert_allclose(idc.centroid_values([5]), [[5.0, 10.0, 2.0]], atol=0.05)
    assert idc.inputs_in(0).tolist() == [0, 3] and idc.inputs_in(4).tolist() == []
    assert idc.input_codes.tolist() == [0, 5, 1, 0]


def test_layout_rows_first_half_columns_second_half(idc):
    idc.update(TEST)
    lay = idc.layout()  # m = 3: rows span neuron 2 (2 centroids), columns neurons 0 and 3 (3 × 1)
    assert lay.row_neurons.tolist() == [2] and lay.col_neurons.tolist() == [0, 3]
    assert lay.counts.tolist() == [[2, 1, 0], [0, 0, 1]]
    assert lay.code(1, 2) == 5 and lay.cell(5) == (1, 2)
    assert lay.col_indices().tolist() == [[0, 0], [1, 0], [2, 0]]
    np.testing.assert_array_equal(idc.matrix(), lay.counts)


def test_incremental_updates_equal_one_update_and_never_decrease():
    rng = np.random.default_rng(1)
    test = training_values(7) + rng.normal(0, 3, size=(60, 4))
    whole = IDC(neurons=[2, 0, 3]).fit(training_values()).update(test)
    parts = IDC(neurons=[2, 0, 3]).fit(training_values())
    seen = []
    for chunk in np.array_split(test, 7):
        seen.append(parts.update(chunk).coverage().covered)
    assert seen == sorted(seen) and parts.coverage() == whole.coverage()
    assert parts.input_codes.tolist() == whole.input_codes.tolist()


def test_too_few_values_give_the_single_centroid_zero():
    acts = np.zeros((30, 2))
    acts[:9, 0] = np.arange(1, 10)  # 9 non-zero values < 10
    acts[:, 1] = np.linspace(0, 1, 30)
    idc = IDC(neurons=[0, 1]).fit(acts)
    assert idc.clusters[0].reason == "few-values" and idc.clusters[0].centroids.tolist() == [0.0]
    assert any("only 9 training value(s)" in w for w in idc.warnings)
    off = IDC(neurons=[0, 1], zero_filter=False).fit(acts)  # without the filter the zeros count
    assert off.clusters[0].reason == "silhouette" and off.clusters[0].k >= 2


def test_zero_filter_defaults_dense_post_only():
    conv = np.zeros((40, 2, 2, 2))
    conv[:20, 0] = 3.0  # channel 0: twenty means 0 and twenty means 3
    conv[:, 1] = np.linspace(1, 2, 40)[:, None, None]
    idc = IDC(neurons=[0, 1]).fit(conv)  # conv channels: zeros kept
    assert idc.clusters[0].zeros_dropped == 0 and idc.clusters[0].centroids.tolist() == [0.0, 3.0]
    dense = conv.mean(axis=(2, 3))
    assert IDC(neurons=[0, 1]).fit(dense).clusters[0].zeros_dropped == 20
    assert IDC(neurons=[0, 1], point="pre").fit(dense).clusters[0].zeros_dropped == 0


def test_only_correctly_classified_training_inputs_are_clustered():
    acts = training_values()
    labels = np.zeros(60, dtype=int)
    predictions = labels.copy()
    predictions[20:40] = 1  # the n0 ≈ 5 group is misclassified
    idc = IDC(neurons=[0]).fit(acts, labels, predictions)
    assert idc.train_inputs == 40 and idc.clusters[0].k == 2
    np.testing.assert_allclose(idc.clusters[0].centroids, [0.5, 10.0], atol=0.05)


def test_nearest_centroid_ties_go_to_the_lower_index():
    assert nearest_centroid(np.array([2.0, 2.0001, 1.9999]), np.array([1.0, 3.0])).tolist() == [0, 1, 0]


def test_silhouette_on_a_seeded_sample_matches_scikit_learn():
    rng = np.random.default_rng(3)
    values = np.concatenate([rng.normal(0, 1, 300), rng.normal(4, 1.5, 200)])
    got = cluster_neuron(values, silhouette_sample=100, seed=5)
    for k, score in got.silhouettes.items():
        labels = KMeans(n_clusters=k, n_init=10, random_state=5).fit(values[:, None]).labels_
        assert score == pytest.approx(silhouette_score(values[:, None], labels, sample_size=100, random_state=5),
                                      abs=1e-12)
    full = cluster_neuron(values, silhouette_sample=None, seed=5)
    assert full.silhouettes != got.silhouettes  # the sample really is a sample


def test_deterministic_for_a_seed():
    values = np.random.default_rng(4).gamma(2.0, size=800)
    a, b = cluster_neuron(values, seed=11), cluster_neuron(values, seed=11)
    assert a.centroids.tolist() == b.centroids.tolist() and a.silhouettes == b.silhouettes


def test_rounding_merges_centroids_in_compatibility_mode():
    rng = np.random.default_rng(5)
    values = np.concatenate([1.0011 + rng.normal(0, 1e-5, 50), 1.0039 + rng.normal(0, 1e-5, 50)])
    assert cluster_neuron(values).k == 2
    merged = cluster_neuron(values, rounding=2)
    assert merged.centroids.tolist() == [1.0]


def test_idc_falls_as_m_grows_with_nested_top_m():
    rng = np.random.default_rng(6)
    train = np.abs(rng.normal(size=(400, 12))) + rng.integers(0, 2, size=(400, 12)) * 3
    test = np.abs(rng.normal(size=(300, 12))) + rng.integers(0, 2, size=(300, 12)) * 3
    order = rng.permutation(12)
    fractions = [IDC(neurons=order[:m]).fit(train).update(test).coverage().fraction for m in (2, 4, 6, 8, 10, 12)]
    assert fractions == sorted(fractions, reverse=True) and fractions[0] > fractions[-1]


def test_m_larger_than_the_layer_is_refused():
    with pytest.raises(WorkbenchError, match="m = 5 is larger than the 4 neurons"):
        IDC(neurons=[0, 1, 2, 3, 7]).fit(training_values())
    with pytest.raises(WorkbenchError, match="important neurons"):
        IDC(m=3).fit(training_values())
    with pytest.raises(WorkbenchError, match="m = 2 but 3"):
        IDC(neurons=[0, 1, 2], m=2)


def test_per_class_mode_routes_by_label_and_reports_the_mean():
    acts = training_values()
    labels = np.repeat([0, 1, 2], 20)
    members = {0: [0, 2], 1: [2, 3], 2: []}  # class 2 has no important neurons (no correct inputs)
    idc = PerClass(lambda c: IDC(neurons=members[c]), classes=3).fit(acts, labels, labels)
    test_labels = np.array([0, 1, 1, 0])
    idc.update(TEST, test_labels)
    per_class = idc.per_class_coverage()
    assert per_class[2] == CoverageValue(None, 0, 0)
    assert per_class[0].total == idc.model(0).incc_size and per_class[1].total == idc.model(1).incc_size
    assert idc.coverage().fraction == pytest.approx((per_class[0].fraction + per_class[1].fraction) / 2)
    assert idc.global_indices(1).tolist() == [1, 2]
    code = int(idc.model(1).input_codes[1])
    assert idc.inputs_in(code, 1).tolist() == [2]
    assert any(w.startswith("class 2:") for w in idc.warnings)
    with pytest.raises(WorkbenchError, match="Class 3 is outside"):
        idc.update(TEST, np.array([0, 1, 3, 0]))


def test_state_round_trip_and_refusal_for_another_model_or_layer(idc):
    idc.bind(model="aaaa", layer="fc2").update(TEST)
    state = idc.state_dict()
    again = IDC(neurons=[2, 0, 3]).bind(model="aaaa", layer="fc2").load_state_dict(state)
    assert again.coverage() == idc.coverage() and again.input_codes.tolist() == [0, 5, 1, 0]
    assert [c.centroids.tolist() for c in again.clusters] == [c.centroids.tolist() for c in idc.clusters]
    with pytest.raises(WorkbenchError, match="model: saved \"aaaa\", now \"bbbb\""):
        IDC(neurons=[2, 0, 3]).bind(model="bbbb", layer="fc2").load_state_dict(state)
    with pytest.raises(WorkbenchError, match="layer"):
        IDC(neurons=[2, 0, 3], layer="fc1").bind(model="aaaa", layer="fc2").load_state_dict(state)
    with pytest.raises(WorkbenchError, match="neurons"):
        IDC(neurons=[2, 0, 1]).bind(model="aaaa", layer="fc2").load_state_dict(state)


def test_combination_codes_and_counter():
    radix = MixedRadix([2, 3, 4])
    idx = np.array([[1, 2, 3], [0, 0, 0], [1, 0, 2]])
    assert radix.encode(idx).tolist() == [23, 0, 14] and radix.size == 24
    np.testing.assert_array_equal(radix.decode(radix.encode(idx)), idx)
    for size in (24, (1 << 20) + 1):  # dense and sparse forms agree
        counter = CodeCounter(size)
        counter.add(np.array([5, 3, 5]))
        counter.add(np.array([3, 7]))
        assert counter.distinct == 3 and counter.items()[0].tolist() == [3, 5, 7]
        assert counter.items()[1].tolist() == [2, 2, 1] and counter.count(5) == 2 and counter.count(4) == 0
    with pytest.raises(WorkbenchError, match="too many"):
        MixedRadix([4] * 40)

"""Covered-item matrices, growth curves, overlaps and resampled figures of `workbench.core.comparison`,
each against a brute-force reference written here with plain loops and sets."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import sparse

from workbench.core.comparison import items as cov
from workbench.core.comparison import resampling as rs

# --- brute-force references -------------------------------------------------------------------------

def _brute_sets(profile: np.ndarray, total: int, k: int = 1) -> list[set[int]]:
    """The items each input covers, from the profile by loops (module docstring of `items`)."""
    profile = np.asarray(profile)
    out = []
    for row in profile:
        items = set()
        if profile.ndim == 1:
            if row >= 0:
                items.add(int(row))
        elif profile.ndim == 2 and profile.dtype == bool:
            items.update(j for j, hit in enumerate(row) if hit)
        elif profile.ndim == 2:
            items.update(neuron * k + int(section) for neuron, section in enumerate(row) if section >= 0)
        else:
            items.update(neuron * 2 + corner for neuron in range(row.shape[0]) for corner in range(2)
                         if row[neuron, corner])
        out.append({j for j in items if j < total})
    return out


def _matrix_sets(m: sparse.csr_matrix) -> list[set[int]]:
    dense = m.toarray()
    return [{j for j in range(dense.shape[1]) if dense[i, j]} for i in range(dense.shape[0])]


def _union(sets, rows=None) -> set[int]:
    out = set()
    for i in range(len(sets)) if rows is None else rows:
        out |= sets[i]
    return out


def _random_items(rng, n: int, total: int, popular=(), rare=(1, 2), background: float = 0.0) -> sparse.csr_matrix:
    """An (n, total) bool matrix: items covered by the counts in `popular` (many inputs) and `rare`
    (one or two), cycled over the items, some items covered by none, plus sparse background noise."""
    dense = rng.random((n, total)) < background
    counts = list(popular) + list(rare) + [0]
    for j in range(total):
        c = counts[j % len(counts)]
        if c:  # the background noise stays on the items covered by none of the counts
            dense[:, j] = False
            dense[rng.choice(n, size=min(c, n), replace=False), j] = True
    return sparse.csr_matrix(dense)


def _brute_resampled(m: sparse.csr_matrix, draws: rs.Draws) -> np.ndarray:
    sets = _matrix_sets(m)
    out = []
    for counts in draws.counts:
        covered = set()
        for i, c in enumerate(counts):
            if c > 0:
                covered |= sets[i]
        out.append(len(covered))
    return np.asarray(out, dtype=np.float64)


# --- item_matrix, coverage ------------------------------------------------------------------------------

def _profiles(rng):
    n, neurons, k = 40, 7, 4
    idc = rng.integers(-1, 30, size=n)  # total 25 below: codes 25..29 lie beyond it
    nc = rng.random((n, neurons)) < 0.3
    kmnc = np.where(rng.random((n, neurons)) < 0.4, -1, rng.integers(0, k, size=(n, neurons))).astype(np.int16)
    nbc = rng.random((n, neurons, 2)) < 0.15
    return [("idc", idc, 25, 1), ("nc", nc, neurons, 1), ("kmnc", kmnc, neurons * k, k),
            ("nbc", nbc, neurons * 2, 1), ("nc-cut", nc, neurons - 2, 1), ("kmnc-cut", kmnc, neurons * k - 5, k)]


@pytest.mark.parametrize("which", range(6))
def test_item_matrix_against_brute_force(which):
    rng = np.random.default_rng(10 + which)
    _, profile, total, k = _profiles(rng)[which]
    m = cov.item_matrix(profile, total, k) if k != 1 else cov.item_matrix(profile, total)
    assert sparse.isspmatrix_csr(m) and m.shape == (len(profile), total) and m.dtype == bool
    sets = _brute_sets(profile, total, k)
    assert _matrix_sets(m) == sets
    assert cov.coverage_count(m) == len(_union(sets))
    np.testing.assert_array_equal(cov.covered_items(m), sorted(_union(sets)))
    rows = rng.choice(len(profile), size=11, replace=False)
    assert cov.coverage_count(m, rows) == len(_union(sets, rows))
    np.testing.assert_array_equal(cov.covered_items(m, rows.tolist()), sorted(_union(sets, rows)))
    assert cov.coverage_count(m, []) == 0


def test_item_matrix_numbering_by_hand():
    # KMNC: neuron 1 section 2 of k=3 is item 5; NBC: neuron 2's upper corner is item 5
    kmnc = np.array([[-1, 2, 0], [0, -1, -1]])
    assert _matrix_sets(cov.item_matrix(kmnc, 9, 3)) == [{5, 6}, {0}]
    nbc = np.zeros((1, 3, 2), bool)
    nbc[0, 2, 1] = nbc[0, 0, 0] = True
    assert _matrix_sets(cov.item_matrix(nbc, 6)) == [{0, 5}]
    # an IDC code at or beyond the total is dropped, −1 is no item
    assert _matrix_sets(cov.item_matrix(np.array([3, 4, -1, 0]), 4)) == [{3}, set(), set(), {0}]


@pytest.mark.parametrize("profile", [np.zeros(0, np.int64), np.zeros((0, 3), bool), np.full((0, 3), -1, np.int16),
                                     np.zeros((0, 3, 2), bool)], ids=["idc", "nc", "kmnc", "nbc"])
def test_item_matrix_of_no_inputs(profile):
    m = cov.item_matrix(profile, 6, 2)
    assert m.shape == (0, 6) and m.nnz == 0 and cov.coverage_count(m) == 0


# --- growth, reaching, membership --------------------------------------------------------------------------

@pytest.mark.parametrize("n, points", [(1, 50), (37, 50), (300, 20), (500, 50)])
def test_growth_against_cumulative_union(n, points):
    rng = np.random.default_rng(n)
    m = _random_items(rng, n, 120, popular=(n // 2,), rare=(1, 2, 3), background=0.01)
    sets = _matrix_sets(m)
    curve = cov.growth(m, points)
    assert curve.shape[1] == 2 and 1 <= len(curve) <= points
    taken = curve[:, 0]
    assert np.all(np.diff(taken) > 0) and taken[0] >= 1 and taken[-1] == n
    for inputs, covered in curve:
        assert covered == len(_union(sets, range(int(inputs))))
    assert curve[-1, 1] == cov.coverage_count(m)
    assert cov.growth(sparse.csr_matrix((0, 5), dtype=bool)).shape == (0, 2)


def test_reaching_against_sets():
    rng = np.random.default_rng(3)
    m = _random_items(rng, 60, 80, popular=(20,), rare=(1, 2), background=0.02)
    sets = _matrix_sets(m)
    for targets in (np.array([0, 5, 17, 33]), rng.choice(80, size=10, replace=False), np.arange(80)):
        want = [i for i, s in enumerate(sets) if s & set(targets.tolist())]
        np.testing.assert_array_equal(cov.reaching(m, targets), want)
    assert len(cov.reaching(m, np.zeros(0, np.int64))) == 0
    assert len(cov.reaching(sparse.csr_matrix((0, 80), dtype=bool), np.array([1]))) == 0


def test_membership_against_sets():
    rng = np.random.default_rng(4)
    total = 200
    covered = {name: np.unique(rng.choice(total, size=size)) for name, size in (("A", 90), ("B", 60), ("C", 30))}
    covered["D"] = np.zeros(0, np.int64)  # a set covering nothing appears in no combination
    out = cov.membership(covered, total)
    as_sets = {name: set(v.tolist()) for name, v in covered.items()}
    want = {}
    for item in range(total):
        combo = tuple(name for name in covered if item in as_sets[name])
        if combo:
            want[combo] = want.get(combo, 0) + 1
    assert out == want
    assert sum(out.values()) == len(set().union(*as_sets.values()))
    assert list(out.values()) == sorted(out.values(), reverse=True)  # largest bar first
    assert cov.membership({}, 10) == {}


# --- draws ---------------------------------------------------------------------------------------------------

def test_bootstrap_draws():
    d = rs.bootstrap_draws(50, 300, seed=1)
    assert d.counts.shape == (300, 50) and d.size == 50 and d.replace and d.n == 50
    np.testing.assert_array_equal(d.counts.sum(axis=1), 50)
    assert d.counts.min() >= 0 and d.counts.max() > 1  # with replacement some input is drawn twice
    np.testing.assert_array_equal(rs.bootstrap_draws(50, 300, seed=1).counts, d.counts)
    assert not np.array_equal(rs.bootstrap_draws(50, 300, seed=2).counts, d.counts)
    assert not np.array_equal(d.counts[0], d.counts[1])  # the draws differ from each other
    # every input is about equally likely
    assert abs(d.counts.mean(axis=0) - 1).max() < 0.35
    assert d.as_dict() == {"resamples": 300, "size": 50, "replace": True, "seed": 1}
    assert rs.bootstrap_draws(0, 5).counts.shape == (5, 0)


@pytest.mark.parametrize("n, size", [(200, 3), (200, 57), (20, 19), (20, 20), (20, 40), (10, 0)])
def test_subsample_draws(n, size):
    d = rs.subsample_draws(n, size, 250, seed=5)
    assert d.counts.shape == (250, n) and not d.replace and d.size == min(size, n)
    assert set(np.unique(d.counts).tolist()) <= {0, 1}
    np.testing.assert_array_equal(d.counts.sum(axis=1), min(size, n))
    np.testing.assert_array_equal(rs.subsample_draws(n, size, 250, seed=5).counts, d.counts)
    if 0 < size < n:
        assert not np.array_equal(rs.subsample_draws(n, size, 250, seed=6).counts, d.counts)
        assert d.counts.sum(axis=0).min() > 0 or size < 5  # no input is left out of every draw
        assert abs(d.counts.mean(axis=0) - size / n).max() < 0.2


# --- resampled coverage ----------------------------------------------------------------------------------------

def _coverage_cases():
    # (n, total, popular counts, rare counts, background, seed)
    return [(200, 300, (200, 199, 150, 60, 30, 12, 5), (1, 2), 0.0, 0),
            (200, 250, (190, 120, 40), (1, 2, 3), 0.01, 1),
            (5, 12, (5, 4, 3), (1, 2), 0.0, 2),
            (1, 4, (1,), (1,), 0.0, 3)]


@pytest.mark.parametrize("case", range(4))
def test_resampled_coverage_bootstrap_exact(case):
    n, total, popular, rare, background, seed = _coverage_cases()[case]
    rng = np.random.default_rng(seed)
    m = _random_items(rng, n, total, popular, rare, background)
    draws = rs.bootstrap_draws(n, 200, seed=seed)
    got = rs.resampled_coverage(m, draws)
    assert got.shape == (200,)
    np.testing.assert_array_equal(got, _brute_resampled(m, draws))
    assert got.max() <= cov.coverage_count(m)


@pytest.mark.parametrize("case", range(3))
@pytest.mark.parametrize("size", [1, 2, 3, 17, 100, 199, 200])
def test_resampled_coverage_subsample_exact(case, size):
    n, total, popular, rare, background, seed = _coverage_cases()[case]
    rng = np.random.default_rng(seed)
    m = _random_items(rng, n, total, popular, rare, background)
    draws = rs.subsample_draws(n, size, 150, seed=seed + size)
    got = rs.resampled_coverage(m, draws)
    np.testing.assert_array_equal(got, _brute_resampled(m, draws))
    if draws.size == n:
        np.testing.assert_array_equal(got, cov.coverage_count(m))


def test_resampled_coverage_shortcut_is_exercised():
    # the items every or nearly every input covers are the ones taken as covered in every draw: there are
    # some at n = 200, and with 3 of 200 drawn only those covered by all 200 are
    rng = np.random.default_rng(0)
    m = _random_items(rng, 200, 300, (200, 199, 150, 60, 30, 12, 5), (1, 2))
    per_item = np.asarray(m.sum(axis=0)).ravel()
    for size, least in ((200, 30), (3, 200)):
        bound = (1 - per_item / 200.0) ** size
        negligible = (per_item > 0) & (bound < rs.NEGLIGIBLE)
        assert negligible.any() and per_item[negligible].min() >= least


def test_resampled_coverage_empty_and_other_shapes():
    m = sparse.csr_matrix((0, 7), dtype=bool)
    assert rs.resampled_coverage(m, rs.bootstrap_draws(0, 4)).tolist() == [0.0] * 4
    full = sparse.csr_matrix(np.ones((6, 3), bool))
    np.testing.assert_array_equal(rs.resampled_coverage(full, rs.bootstrap_draws(6, 9)), 3.0)
    nothing = sparse.csr_matrix(np.zeros((6, 3), bool))
    np.testing.assert_array_equal(rs.resampled_coverage(nothing, rs.subsample_draws(6, 2, 9)), 0.0)
    np.testing.assert_array_equal(rs.resampled_coverage(full, rs.subsample_draws(6, 0, 9)), 0.0)


# --- resampled means and medians ----------------------------------------------------------------------------------

def test_resampled_mean_against_repeat():
    rng = np.random.default_rng(7)
    values = rng.normal(size=40)
    draws = rs.bootstrap_draws(40, 120, seed=3)
    got = rs.resampled_mean(values, draws)
    want = [np.repeat(values, c).mean() for c in draws.counts]
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    small = rs.subsample_draws(40, 6, 120, seed=3)
    np.testing.assert_allclose(rs.resampled_mean(values, small), [np.repeat(values, c).mean() for c in small.counts],
                               rtol=1e-12, atol=1e-12)


def test_resampled_mean_ignores_nan_and_restricts_rows():
    rng = np.random.default_rng(8)
    values = rng.random(30)
    values[[2, 9, 17]] = np.nan
    draws = rs.bootstrap_draws(30, 150, seed=4)
    got = rs.resampled_mean(values, draws)
    for g, c in zip(got, draws.counts):
        drawn = np.repeat(values, c)
        drawn = drawn[np.isfinite(drawn)]
        assert g == pytest.approx(drawn.mean(), rel=1e-12)
    rows = np.array([0, 1, 2, 5, 11])  # row 2 is NaN
    got = rs.resampled_mean(values, draws, rows)
    mask = np.zeros(30, bool)
    mask[rows] = True
    for g, c in zip(got, draws.counts):
        drawn = np.repeat(np.where(mask, values, np.nan), c)
        drawn = drawn[np.isfinite(drawn)]
        if len(drawn):
            assert g == pytest.approx(drawn.mean(), rel=1e-12)
        else:
            assert np.isnan(g)  # a draw that holds none of `rows` has no mean
    assert np.isnan(got).any()  # with five rows of thirty, some draw misses them all
    assert np.isnan(rs.resampled_mean(np.full(30, np.nan), draws)).all()


@pytest.mark.parametrize("ties", [False, True])
def test_resampled_median_against_repeat(ties):
    rng = np.random.default_rng(9)
    values = rng.integers(0, 5, size=25).astype(float) if ties else rng.normal(size=25)
    for draws in (rs.bootstrap_draws(25, 200, seed=1), rs.subsample_draws(25, 4, 200, seed=1),
                  rs.subsample_draws(25, 7, 200, seed=2), rs.subsample_draws(25, 25, 3)):
        got = rs.resampled_median(values, draws)
        want = [np.median(np.repeat(values, c)) for c in draws.counts]
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-12)


def test_interval_against_quantile():
    rng = np.random.default_rng(11)
    values = rng.normal(size=1000)
    lo, hi = rs.interval(values)
    assert lo == pytest.approx(np.quantile(values, 0.025)) and hi == pytest.approx(np.quantile(values, 0.975))
    lo, hi = rs.interval(values, 0.8)
    assert lo == pytest.approx(np.quantile(values, 0.1)) and hi == pytest.approx(np.quantile(values, 0.9))
    with_nan = np.concatenate([values, [np.nan, np.inf]])
    assert rs.interval(with_nan) == rs.interval(values)  # what is not finite is left out
    assert rs.interval(np.array([np.nan, np.nan])) is None
    assert rs.interval(np.array([])) is None
    assert rs.interval(np.array([2.5])) == (2.5, 2.5)

"""Selection strategies pinned on fixed arrays (spec/robustness.md §4, §10.6)."""

from __future__ import annotations

import numpy as np
import pytest

from workbench.core.errors import WorkbenchError
from workbench.core.robustness import selection as sel

FOL = np.array([0.5, 0.1, 0.9, 0.1, 0.3, 0.7, 0.0, 0.9])


def test_be_st_takes_the_exact_ends_with_stable_ties():
    # stable ascending order: 6(0.0) 1(0.1) 3(0.1) 4 0 5 2(0.9) 7(0.9)
    assert sel.be_st(FOL, 4).indices.tolist() == [6, 1, 2, 7]
    assert sel.be_st(FOL, 3).indices.tolist() == [6, 2, 7]          # ⌊3/2⌋ low, ⌈3/2⌉ high
    compat = sel.be_st(FOL, 3, compat=True)
    assert compat.indices.tolist() == [6, 7] and compat.params["compat"]  # the original's n−1 items
    assert sorted(sel.be_st(FOL, 8).indices.tolist()) == list(range(8))  # budget = pool
    assert sel.be_st(FOL, 1).indices.tolist() == [7]


def test_budget_errors_and_percentages():
    with pytest.raises(WorkbenchError, match="larger than the pool"):
        sel.be_st(FOL, 9)
    with pytest.raises(WorkbenchError, match="empty"):
        sel.km_st(np.array([]), 1)
    with pytest.raises(WorkbenchError, match="no test"):
        sel.deepgini_top(FOL, 0)
    with pytest.raises(WorkbenchError, match="whole number"):
        sel.be_st(FOL, 2.5)
    assert sel.resolve_budget("50%", 8) == 4 and sel.resolve_budget("10%", 120_000) == 12_000
    assert len(sel.random_select(8, "25%", seed=0).indices) == 2


def test_nan_scores_are_excluded_and_counted():
    fol = FOL.copy()
    fol[[2, 5]] = np.nan
    result = sel.be_st(fol, 6)
    assert result.excluded_nan == 2 and sorted(result.indices.tolist()) == [0, 1, 3, 4, 6, 7]
    with pytest.raises(WorkbenchError, match="larger than the pool of 6"):
        sel.km_st(fol, 7)
    assert 2 not in sel.random_select(fol, 6, seed=1).indices


def test_kmst_sections_closed_at_the_maximum():
    sections, lo, hi = sel.kmst_sections(FOL, 4)
    assert (lo, hi) == (0.0, 0.9)
    # width 0.225: [0, .225) [.225, .45) [.45, .675) [.675, .9]; both maxima fall in the last section
    assert sections.tolist() == [2, 0, 3, 0, 1, 3, 0, 3]
    same, lo, hi = sel.kmst_sections(np.full(5, 0.0), 4)
    assert same.tolist() == [0] * 5 and lo == hi == 0.0
    neg, lo, _ = sel.kmst_sections(np.array([-1.0, 1.0]), 2)
    assert lo == -1.0 and neg.tolist() == [0, 1]


def test_kmst_follows_the_pinned_draws():
    n, k, seed = 4, 4, 3
    result = sel.km_st(FOL, n, k=k, seed=seed)
    rng = np.random.default_rng(seed)
    expected = [rng.choice(np.array(m), size=1, replace=False)[0] for m in ([1, 3, 6], [4], [0], [2, 5, 7])]
    assert result.indices.tolist() == expected
    assert result.params == {"budget": 4, "k": 4, "seed": 3, "lo": 0.0, "hi": 0.9, "quota": 1, "topped_up": 0}
    assert sel.km_st(FOL, n, k=k, seed=seed).indices.tolist() == expected  # reproducible


def test_kmst_tops_up_without_replacement_and_can_take_the_maximum():
    # over [0, 1]: indices 0–3 fall in the first section, the maximum (index 4) alone in the last
    fol = np.array([0.0, 0.05, 0.1, 0.2, 1.0])
    result = sel.km_st(fol, 4, k=2, seed=0)  # quota 2: two from section 0, the only one in section 1, top-up 1
    assert len(set(result.indices.tolist())) == 4 and 4 in result.indices
    assert result.params["topped_up"] == 1
    rng = np.random.default_rng(0)
    first = rng.choice(np.array([0, 1, 2, 3]), size=2, replace=False)
    rest = np.setdiff1d([0, 1, 2, 3], first)
    assert result.indices.tolist() == [*first.tolist(), 4, rng.choice(rest, size=1, replace=False)[0]]
    # k = 4, n = 5 = pool: every candidate exactly once whatever the sections hold
    assert sorted(sel.km_st(fol, 5, k=4, seed=9).indices.tolist()) == [0, 1, 2, 3, 4]
    # the maximum is selectable: over seeds, the single last-section item is always taken when q ≥ 1
    for seed in range(5):
        assert 4 in sel.km_st(fol, 4, k=4, seed=seed).indices


def test_kmst_budget_below_k_is_all_top_up_and_equal_scores():
    result = sel.km_st(FOL, 3, k=4, seed=2)  # quota 0: all three from the top-up
    expected = np.random.default_rng(2).choice(np.arange(8), size=3, replace=False)
    assert result.indices.tolist() == expected.tolist() and result.params["topped_up"] == 3
    flat = sel.km_st(np.ones(6), 4, k=2, seed=1)
    assert len(set(flat.indices.tolist())) == 4
    with pytest.raises(WorkbenchError, match="sections"):
        sel.km_st(FOL, 2, k=0)


def test_deepgini_top_and_random():
    gini = np.array([0.2, 0.8, 0.5, 0.8, 0.1])
    assert sel.deepgini_top(gini, 3).indices.tolist() == [1, 3, 2]  # ties to the lower index
    a = sel.random_select(10, 4, seed=5)
    assert a.indices.tolist() == np.random.default_rng(5).choice(np.arange(10), 4, replace=False).tolist()
    assert a.indices.tolist() == sel.random_select(10, 4, seed=5).indices.tolist()
    assert len(set(a.indices.tolist())) == 4 and a.params == {"budget": 4, "seed": 5}
    assert sorted(sel.random_select(10, 10, seed=1).indices.tolist()) == list(range(10))


def test_mcp_hand_worked_example():
    probs = np.array([[0.6, 0.4, 0.0],    # 0: bucket (0,1), priority 0.667
                      [0.9, 0.1, 0.0],    # 1: bucket (0,1), priority 0.111
                      [0.5, 0.0, 0.5],    # 2: bucket (0,2) (tie → lower class first), priority 1.0
                      [0.0, 0.7, 0.3],    # 3: bucket (1,2), priority 0.429
                      [0.0, 0.2, 0.8],    # 4: bucket (2,1), priority 0.25
                      [0.0, 0.45, 0.55]])  # 5: bucket (2,1), priority 0.818
    # budget 4 covers the four buckets: heads in bucket order (0,1) (0,2) (1,2) (2,1)
    assert sel.mcp(probs, 4).indices.tolist() == [0, 2, 3, 5]
    # budget 6: first round takes the four heads; then two left for two buckets: round robin again
    assert sel.mcp(probs, 6).indices.tolist() == [0, 2, 3, 5, 1, 4]
    # budget 2 < four buckets: the two highest-priority heads
    assert sel.mcp(probs, 2).indices.tolist() == [2, 5]
    # budget 5: four heads, then the better of the remaining heads (1: 0.111, 4: 0.25)
    result = sel.mcp(probs, 5)
    assert result.indices.tolist() == [0, 2, 3, 5, 4] and result.params == {"budget": 5, "buckets": 4}
    with pytest.raises(WorkbenchError, match="larger than the pool"):
        sel.mcp(probs, 7)
    with pytest.raises(WorkbenchError, match="probability matrix"):
        sel.mcp(probs[:, 0], 1)

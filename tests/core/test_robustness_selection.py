"""Selection strategies pinned on fixed arrays (docs/methods/fol-and-selection.md#selection-strategies)."""

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


# --- KM-ST legacy (the ICSE artifact's rank blocks) ------------------------------------------------------

def _legacy_reference(fol, n, blocks, seed):
    """The docstring's rule, written out plainly."""
    valid = np.flatnonzero(~np.isnan(fol))
    order = valid[np.argsort(fol[valid], kind="stable")]
    k = min(blocks, order.size)
    w = order.size // k
    full = min(n // w, k)
    rest = n - full * w
    rng = np.random.default_rng(seed)
    perm = rng.permutation(k)
    out = [i for b in perm[:full] for i in order[b * w:(b + 1) * w]]
    if rest:
        members = order[perm[full] * w:(perm[full] + 1) * w] if full < k else order[k * w:]
        out += rng.choice(members, size=rest, replace=False).tolist()
    return out


def test_kmst_legacy_takes_whole_rank_blocks():
    fol = np.array([0.9, 0.1, 0.5, 0.3, 0.7, 0.2, 0.8, 0.0, 0.6, 0.4])  # ranks: 7 1 5 3 9 2 8 4 6 0
    result = sel.kmst_legacy(fol, 4, blocks=5, seed=0)
    blocks = [[7, 1], [5, 3], [9, 2], [8, 4], [6, 0]]  # five blocks of two consecutive ranks
    perm = np.random.default_rng(0).permutation(5)
    assert result.indices.tolist() == blocks[perm[0]] + blocks[perm[1]]
    assert result.params == {"budget": 4, "blocks": 5, "blocks_used": 5, "block_size": 2, "whole_blocks": 2,
                             "partial": 0, "partial_from": None, "tail": 0, "seed": 0}
    odd = sel.kmst_legacy(fol, 5, blocks=5, seed=0)  # two whole blocks and one member of the third drawn
    assert odd.indices[:4].tolist() == result.indices.tolist() and odd.indices[4] in blocks[perm[2]]
    assert odd.params["partial"] == 1 and odd.params["partial_from"] == f"block {perm[2]}"
    assert sorted(sel.kmst_legacy(fol, 10, blocks=5, seed=3).indices.tolist()) == list(range(10))


def test_kmst_legacy_exact_count_reproducible_tail_and_small_pools():
    rng = np.random.default_rng(1)
    fol = rng.normal(size=23)
    fol[[4, 17]] = np.nan
    for blocks in (1, 4, 5, 21, 1000):  # 21 valid: w = 5 with a tail of one for k = 4; k = 21 when blocks > N
        for n in range(1, 22):
            result = sel.kmst_legacy(fol, n, blocks=blocks, seed=n)
            assert len(result.indices) == n == len(set(result.indices.tolist()))
            assert not set(result.indices.tolist()) & {4, 17} and result.excluded_nan == 2
            assert result.indices.tolist() == _legacy_reference(fol, n, blocks, n)
            assert result.indices.tolist() == sel.kmst_legacy(fol, n, blocks=blocks, seed=n).indices.tolist()
    full = sel.kmst_legacy(fol, 21, blocks=4, seed=0)  # all four blocks of five, then the tail's one
    assert full.params["partial_from"] == "tail" and full.params["tail"] == 1
    assert sel.kmst_legacy(fol, 21, blocks=1000, seed=0).params["blocks_used"] == 21
    assert sel.kmst_legacy(fol, 5, blocks=4, seed=0).params["tail"] == 1  # the tail is not drawn from otherwise
    top = int(np.nanargmax(fol))
    assert all(top not in sel.kmst_legacy(fol, 20, blocks=4, seed=s).indices for s in range(10))
    with pytest.raises(WorkbenchError, match="blocks"):
        sel.kmst_legacy(fol, 2, blocks=0)
    with pytest.raises(WorkbenchError, match="larger than the pool"):
        sel.kmst_legacy(fol, 22)
    with pytest.raises(WorkbenchError, match="empty"):
        sel.kmst_legacy(np.array([]), 1)


# --- coverage-greedy -------------------------------------------------------------------------------------

def _greedy_reference(covers, n, fill):
    """Greedy additional coverage, every gain recomputed every step (no laziness)."""
    covers = np.asarray(covers, dtype=bool)
    remaining = list(range(len(covers)))
    covered = np.zeros(covers.shape[1], bool)
    chosen = []
    while len(chosen) < n:
        gains = [int((covers[i] & ~covered).sum()) for i in remaining]
        best = max(gains)
        if best == 0 and covered.any():
            if fill == "total":
                rest = sorted(remaining, key=lambda i: (-int(covers[i].sum()), i))
                return chosen + rest[:n - len(chosen)]
            covered[:] = False
            continue
        i = remaining[gains.index(best)]  # the first maximum: the lowest index
        chosen.append(i)
        remaining.remove(i)
        covered |= covers[i]
    return chosen


def test_coverage_greedy_hand_example():
    covers = np.array([[1, 1, 0, 0, 0],   # 0: 2 items
                       [0, 0, 1, 1, 1],   # 1: 3 items
                       [1, 1, 1, 0, 0],   # 2: 3 items
                       [0, 0, 0, 0, 1],   # 3: 1 item
                       [0, 0, 0, 0, 0],   # 4: none
                       [1, 1, 1, 1, 0]],  # 5: 4 items
                      dtype=bool)
    # 5 (4 new); then 1 adds item 4 (1 new; 3 also adds 1 but 1 has the lower index); then saturated
    assert sel.coverage_greedy(covers, 2).indices.tolist() == [5, 1]
    # reset: again among 0 2 3 4 → 2 (3 items), 3 (item 4); 0 adds nothing → reset → 0; reset → 4 (nothing)
    reset = sel.coverage_greedy(covers, 6)
    assert reset.indices.tolist() == [5, 1, 2, 3, 0, 4]
    assert reset.params["saturated_at"] == 2 and reset.params["resets"] == 3
    assert reset.params["covered_items"] == reset.params["coverable_items"] == 5
    # total: after saturation the largest rows, ties to the lower index: 2 (3), 0 (2), 3 (1), 4 (0)
    assert sel.coverage_greedy(covers, 6, fill="total").indices.tolist() == [5, 1, 2, 0, 3, 4]
    assert sel.coverage_greedy(covers, 1).indices.tolist() == [5]


@pytest.mark.parametrize("fill", sel.COVERAGE_FILLS)
def test_coverage_greedy_matches_brute_force(fill):
    for seed in range(12):
        rng = np.random.default_rng(seed)
        n_rows, n_items = rng.integers(1, 25), rng.integers(0, 12)
        covers = rng.random((n_rows, n_items)) < rng.uniform(0.05, 0.6)
        for n in range(1, n_rows + 1):
            result = sel.coverage_greedy(covers, n, fill=fill)
            assert result.indices.tolist() == _greedy_reference(covers, n, fill), (seed, n)
            assert len(set(result.indices.tolist())) == n


def test_coverage_greedy_without_numpy_bitwise_count(monkeypatch):
    rng = np.random.default_rng(7)
    covers = rng.random((40, 130)) < 0.2  # three 64-bit words per row
    expected = _greedy_reference(covers, 30, "reset")
    monkeypatch.setattr(sel, "_BITWISE_COUNT", None)  # numpy < 2.0: the byte table
    assert sel.coverage_greedy(covers, 30).indices.tolist() == expected


def test_coverage_greedy_edge_cases():
    covers = np.array([[1.0, 0.0], [np.nan, 1.0], [0.0, 1.0], [1.0, 1.0]])
    result = sel.coverage_greedy(covers, 2)
    assert result.indices.tolist() == [3, 0] and result.excluded_nan == 1  # row 1 (NaN) never chosen
    assert sorted(sel.coverage_greedy(covers, 3).indices.tolist()) == [0, 2, 3]
    with pytest.raises(WorkbenchError, match="larger than the pool of 3"):
        sel.coverage_greedy(covers, 4)
    with pytest.raises(WorkbenchError, match="empty"):
        sel.coverage_greedy(np.zeros((0, 3), bool), 1)
    with pytest.raises(WorkbenchError, match="matrix"):
        sel.coverage_greedy(np.ones(3, bool), 1)
    with pytest.raises(WorkbenchError, match="fill"):
        sel.coverage_greedy(covers, 1, fill="random")
    assert sel.coverage_greedy(np.zeros((4, 0), bool), 3).indices.tolist() == [0, 1, 2]  # no items: index order


def test_neuron_coverage_items_follow_the_nc_definition(digits):
    import torch

    from workbench.core.execution.jobs import JobContext
    from workbench.core.models.architectures import lenet_for_digits

    torch.manual_seed(0)
    model = lenet_for_digits().eval()
    images = digits.split("test").numpy(slice(0, 50))
    for threshold in (0.0, 0.5):
        items = sel.neuron_coverage_items(JobContext("cpu"), model, ["conv1", "fc1"], images, threshold=threshold,
                                          batch_size=16)
        assert items.shape == (50, 8 + 32) and items.dtype == bool
        with torch.no_grad():  # NC's scaling from first principles: scale each input's layer tensor, channel means
            x = torch.from_numpy(images)
            conv = model.relu1(model.conv1(x))
            dense = model.relu2(model.fc1(model.flatten(model.pool1(conv))))
        expected = []
        for act in (conv, dense):
            flat = act.flatten(1).double()
            lo, hi = flat.min(1, keepdim=True).values, flat.max(1, keepdim=True).values
            values = act.double().mean(dim=(2, 3)) if act.dim() == 4 else act.double()
            expected.append(((values - lo) / (hi - lo) > threshold) & (hi > lo))
        assert np.array_equal(items, torch.cat(expected, 1).numpy())
    assert sel.coverage_greedy(items, 5).params["items"] == 40
    with pytest.raises(WorkbenchError, match="no layer"):
        sel.neuron_coverage_items(JobContext("cpu"), model, "conv9", images)
    model.train()
    with pytest.raises(WorkbenchError, match="training mode"):
        sel.neuron_coverage_items(JobContext("cpu"), model, "fc1", images)


# --- the registry ----------------------------------------------------------------------------------------

def _scores():
    rng = np.random.default_rng(4)
    probs = rng.dirichlet(np.ones(3), size=8)
    return {"fol_linf": FOL.copy(), "grad_l2": FOL[::-1].copy(), "deepgini": 1 - (probs ** 2).sum(1),
            "probs": probs, "covers": rng.random((8, 6)) < 0.3}


def test_select_dispatches_to_each_strategy():
    scores = _scores()
    assert set(sel.STRATEGIES) == {"be-st", "km-st", "deepgini", "random", "mcp", "coverage-greedy", "kmst-legacy"}
    expected = {"be-st": sel.be_st(FOL, 3), "km-st": sel.km_st(FOL, 3, seed=2),
                "deepgini": sel.deepgini_top(scores["deepgini"], 3), "random": sel.random_select(8, 3, seed=2),
                "mcp": sel.mcp(scores["probs"], 3), "coverage-greedy": sel.coverage_greedy(scores["covers"], 3),
                "kmst-legacy": sel.kmst_legacy(FOL, 3, seed=2)}
    for name, direct in expected.items():
        result = sel.select(name, scores, 3, seed=2)
        assert result.strategy == name and result.indices.tolist() == direct.indices.tolist(), name
        assert result.params["strategy"] == name and result.params["budget"] == 3
        assert result.params["budget_given"] == 3 and result.params["seed"] == 2
        assert result.params["pool_size"] == 8
        assert result.params["fol_kind"] == ("fol_linf" if name in ("be-st", "km-st", "kmst-legacy") else None)
    pct = sel.select("be-st", scores, "50%", compat=True)
    assert pct.params["budget_given"] == "50%" and pct.params["budget"] == 4 and pct.params["compat"] is True
    assert sel.select("KM-ST", scores, 4, k=2, seed=1).params["k"] == 2


def test_select_fol_kind_and_derived_scores():
    scores = _scores()
    by_grad = sel.select("be-st", scores, 2, fol_kind="grad_l2")
    assert by_grad.indices.tolist() == sel.be_st(scores["grad_l2"], 2).indices.tolist()
    assert by_grad.params["fol_kind"] == "grad_l2"
    only_probs = {"probs": scores["probs"]}
    assert sel.select("deepgini", only_probs, 3).indices.tolist() == sel.deepgini_top(scores["deepgini"], 3).indices.tolist()
    assert sel.select("random", {"pool_size": 8}, 8).indices.size == 8


def test_select_errors():
    scores = _scores()
    with pytest.raises(WorkbenchError, match="Unknown selection strategy 'gini'"):
        sel.select("gini", scores, 2)
    with pytest.raises(WorkbenchError, match="needs the pool's 'fol_linf'"):
        sel.select("km-st", {"grad_l2": FOL}, 2)
    with pytest.raises(WorkbenchError, match="needs the pool's 'covers'"):
        sel.select("coverage-greedy", {"fol_linf": FOL}, 2)
    with pytest.raises(WorkbenchError, match="needs the pool's 'probs'"):
        sel.select("mcp", {"deepgini": FOL}, 2)
    with pytest.raises(WorkbenchError, match="needs the pool's 'deepgini'"):
        sel.select("deepgini", {"fol_linf": FOL}, 2)
    with pytest.raises(WorkbenchError, match="Unknown FOL kind"):
        sel.select("be-st", scores, 2, fol_kind="fol_l2")
    with pytest.raises(WorkbenchError, match="no option"):
        sel.select("deepgini", scores, 2, k=4)
    with pytest.raises(WorkbenchError, match="no option"):
        sel.select("mcp", scores, 2, fol_kind="grad_l2")
    with pytest.raises(WorkbenchError, match="different sizes"):
        sel.select("be-st", {**scores, "deepgini": np.zeros(5)}, 2)
    with pytest.raises(WorkbenchError, match="pool's size"):
        sel.select("random", {}, 2)
    with pytest.raises(WorkbenchError, match="dict"):
        sel.select("random", [1, 2], 1)


@pytest.mark.parametrize("name", sorted(sel.STRATEGIES))
def test_every_strategy_edge_cases(name):
    scores = _scores()
    full = sel.select(name, scores, 8, seed=1)  # budget = pool: every candidate once
    assert sorted(full.indices.tolist()) == list(range(8))
    assert len(sel.select(name, scores, 1, seed=1).indices) == 1
    with pytest.raises(WorkbenchError, match="larger than the pool"):
        sel.select(name, scores, 9)
    with pytest.raises(WorkbenchError, match="no test"):
        sel.select(name, scores, 0)
    empty = {"fol_linf": np.zeros(0), "grad_l2": np.zeros(0), "deepgini": np.zeros(0), "probs": np.zeros((0, 3)),
             "covers": np.zeros((0, 6), bool)}
    with pytest.raises(WorkbenchError, match="empty"):
        sel.select(name, empty, 1)
    # NaN scores (a NaN probability row, a NaN FOL) are excluded and counted — random draws from the whole pool
    nan = {**scores, "fol_linf": np.where(np.arange(8) == 2, np.nan, FOL),
           "deepgini": np.where(np.arange(8) == 2, np.nan, scores["deepgini"]),
           "probs": np.where(np.arange(8)[:, None] == 2, np.nan, scores["probs"]),
           "covers": np.where(np.arange(8)[:, None] == 2, np.nan, scores["covers"].astype(float))}
    if name == "random":
        assert sel.select(name, nan, 8).excluded_nan == 0
    else:
        result = sel.select(name, nan, 7, seed=1)
        assert result.excluded_nan == 1 and 2 not in result.indices and len(set(result.indices.tolist())) == 7
        with pytest.raises(WorkbenchError, match="larger than the pool of 7"):
            sel.select(name, nan, 8)

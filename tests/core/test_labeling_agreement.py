"""Inter-rater agreement: hand-computed cases, the reference libraries, and the edge cases."""

from __future__ import annotations

import json

import numpy as np
import pytest

from workbench.core.errors import WorkbenchError
from workbench.core.labeling.agreement import (
    Agreement,
    agreement,
    cohen_kappa,
    fleiss_kappa,
    krippendorff_alpha,
)

# Krippendorff (2011), "Computing Krippendorff's Alpha-Reliability", nominal example: 4 observers × 12 units,
# "." (here None) where an observer did not code a unit.
KRIPPENDORFF_2011 = [
    [1, 2, 3, 3, 2, 1, 4, 1, 2, None, None, None],  # observer A
    [1, 2, 3, 3, 2, 2, 4, 1, 2, 5, None, 3],  # observer B
    [None, 3, 3, 3, 2, 3, 4, 2, 2, 5, 1, None],  # observer C
    [1, 2, 3, 3, 2, 4, 4, 1, 2, 5, 1, None],  # observer D
]


def by_item(raters: list[list]) -> list[list]:
    """Raters × items (the way the papers print them) turned into our items × raters rows."""
    return [list(row) for row in zip(*raters)]


def with_gaps(table: np.ndarray, rng: np.random.Generator, share: float) -> list[list]:
    rows = table.tolist()
    for i, j in zip(*np.nonzero(rng.random(table.shape) < share)):
        rows[i][j] = None
    return rows


# ---------------------------------------------------------------- hand-computed


def test_cohen_by_hand():
    # 10 items: (a,a)×4, (a,b)×2, (b,a)×1, (b,b)×3.
    # p_o = (4+3)/10 = 0.7; rater 1: a 6/10, b 4/10; rater 2: a 5/10, b 5/10.
    # p_e = 0.6·0.5 + 0.4·0.5 = 0.5;  κ = (0.7 − 0.5)/(1 − 0.5) = 0.4.
    rows = [["a", "a"]] * 4 + [["a", "b"]] * 2 + [["b", "a"]] + [["b", "b"]] * 3
    result = cohen_kappa(rows)
    assert result == Agreement("Cohen's κ", pytest.approx(0.4, abs=1e-12), pytest.approx(0.7, abs=1e-12), 10, 0)
    assert result.text() == "Cohen's κ 0.40 (raw 0.70, 10 items)"


def test_cohen_perfect_agreement_is_one():
    rows = [[c, c] for c in ["x", "y", "z", "x", "y"]]
    result = cohen_kappa(rows)
    assert result.value == pytest.approx(1.0) and result.raw == 1.0 and result.items == 5


def test_cohen_single_category_is_undefined():
    # Both raters always say "valid": p_o = 1 and p_e = 1·1 = 1, so κ = 0/0: n/a, with raw 1.0 beside it.
    result = cohen_kappa([["valid", "valid"]] * 12)
    assert result.value is None and result.raw == 1.0 and result.items == 12
    assert result.text() == "Cohen's κ n/a (raw 1.00, 12 items)"


def test_cohen_leaves_out_items_either_rater_skipped():
    # The by-hand table plus 3 half-rated items: same κ, and the 3 are counted as left out.
    rows = [["a", "a"]] * 4 + [["a", "b"]] * 2 + [["b", "a"]] + [["b", "b"]] * 3
    rows += [["a", None], [None, "b"], [None, None]]
    result = cohen_kappa(rows)
    assert (result.items, result.excluded) == (10, 3)
    assert result.value == pytest.approx(0.4, abs=1e-12)
    assert result.text() == "Cohen's κ 0.40 (raw 0.70, 10 items, 3 left out)"


def test_fleiss_by_hand():
    # 3 raters, 4 items, categories x/y:
    #   xxx: P = (9 − 3)/(3·2) = 1;  xxy: (4 + 1 − 3)/6 = 1/3;  xyy: 1/3;  yyy: 1.
    #   P̄ = (1 + 1/3 + 1/3 + 1)/4 = 2/3;  p_x = (3+2+1+0)/12 = 1/2, p_y = 1/2;  P̄_e = 1/4 + 1/4 = 1/2.
    #   κ = (2/3 − 1/2)/(1 − 1/2) = 1/3.
    rows = [["x", "x", "x"], ["x", "x", "y"], ["x", "y", "y"], ["y", "y", "y"]]
    result = fleiss_kappa(rows)
    assert result.value == pytest.approx(1 / 3, abs=1e-12)
    assert result.raw == pytest.approx(2 / 3, abs=1e-12)
    assert (result.items, result.excluded) == (4, 0)


def test_fleiss_leaves_out_items_with_another_number_of_ratings():
    # The same 4 items plus one with 2 ratings and one with 1: n = 3 (most common), the other two left out.
    rows = [["x", "x", "x"], ["x", "x", "y"], ["x", "y", "y"], ["y", "y", "y"], ["x", None, "y"], [None, "x", None]]
    result = fleiss_kappa(rows)
    assert (result.items, result.excluded) == (4, 2)
    assert result.value == pytest.approx(1 / 3, abs=1e-12)
    assert result.text() == "Fleiss' κ 0.33 (raw 0.67, 4 items, 2 left out)"


def test_fleiss_raters_need_not_be_the_same_people():
    # Three ratings per item from different columns count the same as three from the same columns.
    rows = [["x", "x", "x", None], [None, "x", "x", "y"], ["x", None, "y", "y"], ["y", "y", None, "y"]]
    assert fleiss_kappa(rows).value == pytest.approx(1 / 3, abs=1e-12)


def test_fleiss_tie_in_ratings_per_item_goes_to_the_larger_number():
    # Two items with 2 ratings, two with 3: n = 3, the 2-rating items are left out.
    rows = [["x", "x", None], ["x", "y", None], ["x", "x", "x"], ["x", "y", "y"]]
    result = fleiss_kappa(rows)
    assert (result.items, result.excluded) == (2, 2)
    # xxx: P = 1, xyy: P = 1/3 → P̄ = 2/3; p_x = 4/6, p_y = 2/6 → P̄_e = 16/36 + 4/36 = 5/9;
    # κ = (2/3 − 5/9)/(4/9) = (1/9)/(4/9) = 1/4.
    assert result.value == pytest.approx(0.25, abs=1e-12)


def test_krippendorff_2011_nominal_example():
    # Unit 12 has one value (not pairable), so 11 units and n = 40 pairable values.
    # Coincidence diagonal o_cc = Σ_u n_uc(n_uc − 1)/(m_u − 1):
    #   o_11 = 3 (u1: 1,1,1) + 2 (u8: 1,1,2,1) + 2 (u11: 1,1) = 7
    #   o_22 = 2 (u2: 2,2,3,2) + 4 (u5) + 4 (u9) = 10;  o_33 = 4 (u3) + 4 (u4) = 8;  o_44 = 4 (u7);  o_55 = 3 (u10)
    #   Σ o_cc = 32, so D_o = (40 − 32)/40 = 0.2 and raw = 0.8.
    # n_c = 9, 13, 10, 5, 3 → Σ n_c² = 81 + 169 + 100 + 25 + 9 = 384, D_e = (1600 − 384)/(40·39) = 1216/1560.
    # α = 1 − 0.2·1560/1216 = 1 − 312/1216 = 904/1216 ≈ 0.7434.
    result = krippendorff_alpha(by_item(KRIPPENDORFF_2011))
    assert result.value == pytest.approx(904 / 1216, abs=1e-12)
    assert round(result.value, 3) == 0.743
    assert result.raw == pytest.approx(0.8, abs=1e-12)
    assert (result.items, result.excluded) == (11, 1)


def test_krippendorff_single_category_is_undefined():
    result = krippendorff_alpha([["a", "a", None], ["a", None, "a"], ["a", "a", "a"]])
    assert result.value is None and result.raw == 1.0 and result.items == 3


# ---------------------------------------------------------------- against reference libraries


def test_cohen_matches_scikit_learn():
    metrics = pytest.importorskip("sklearn.metrics")
    rng = np.random.default_rng(1960)
    for trial in range(200):
        categories, items = int(rng.integers(2, 7)), int(rng.integers(5, 300))
        first = rng.integers(0, categories, items)
        # Correlate the second rater with the first so κ ranges well away from 0.
        second = np.where(rng.random(items) < rng.random(), first, rng.integers(0, categories, items))
        rows = with_gaps(np.stack([first, second], axis=1), rng, 0.15)
        kept = [row for row in rows if None not in row]
        expected = metrics.cohen_kappa_score([a for a, _ in kept], [b for _, b in kept])
        result = cohen_kappa(rows)
        assert (result.items, result.excluded) == (len(kept), items - len(kept))
        if np.isnan(expected):
            assert result.value is None
        else:
            assert result.value == pytest.approx(expected, abs=1e-12), trial


def test_fleiss_matches_statsmodels():
    inter_rater = pytest.importorskip("statsmodels.stats.inter_rater")
    rng = np.random.default_rng(1971)
    for trial in range(100):
        raters, categories, items = int(rng.integers(3, 7)), int(rng.integers(2, 6)), int(rng.integers(5, 200))
        truth = rng.integers(0, categories, items)
        table = np.where(rng.random((items, raters)) < rng.random(), truth[:, None],
                         rng.integers(0, categories, (items, raters)))
        counts, _ = inter_rater.aggregate_raters(table)
        expected = inter_rater.fleiss_kappa(counts, method="fleiss")
        result = fleiss_kappa(table.tolist())
        assert (result.items, result.excluded) == (items, 0)
        assert result.value == pytest.approx(expected, abs=1e-12), trial


def test_krippendorff_matches_the_krippendorff_package():
    krippendorff = pytest.importorskip("krippendorff")
    rng = np.random.default_rng(2011)
    for trial in range(100):
        raters, categories, items = int(rng.integers(2, 7)), int(rng.integers(2, 6)), int(rng.integers(5, 200))
        truth = rng.integers(0, categories, items)
        table = np.where(rng.random((items, raters)) < rng.random(), truth[:, None],
                         rng.integers(0, categories, (items, raters))).astype(float)
        table[rng.random(table.shape) < rng.uniform(0.0, 0.5)] = np.nan
        if len(np.unique(table[~np.isnan(table)])) < 2:
            continue  # one category: α is undefined, checked by hand above
        expected = krippendorff.alpha(reliability_data=table.T, level_of_measurement="nominal")
        rows = [[None if np.isnan(v) else int(v) for v in row] for row in table]
        result = krippendorff_alpha(rows)
        assert result.value == pytest.approx(expected, abs=1e-9), trial
        # A numeric array with NaN gaps reads the same (category codes may differ in order, so the last bits may too).
        assert krippendorff_alpha(table).value == pytest.approx(result.value, abs=1e-12)


def test_krippendorff_package_agrees_on_the_2011_example():
    krippendorff = pytest.importorskip("krippendorff")
    data = np.array([[np.nan if v is None else v for v in row] for row in KRIPPENDORFF_2011])
    expected = krippendorff.alpha(reliability_data=data, level_of_measurement="nominal")
    assert krippendorff_alpha(by_item(KRIPPENDORFF_2011)).value == pytest.approx(expected, abs=1e-12)


def test_string_categories_give_the_same_results_as_ints():
    rng = np.random.default_rng(7)
    names = ["valid", "invalid", "unsure", "ambiguous"]
    for raters in (2, 3, 5):
        table = rng.integers(0, 4, (60, raters))
        table[:30] = table[:30, :1]  # half the items unanimous, so the measures are not all near 0
        ints = with_gaps(table, rng, 0.1)
        strings = [[None if v is None else names[v] for v in row] for row in ints]
        assert agreement(strings) == agreement(ints)
        assert krippendorff_alpha(strings) == krippendorff_alpha(ints)
        assert fleiss_kappa(strings) == fleiss_kappa(ints)


# ---------------------------------------------------------------- edge cases


def test_empty_input():
    assert agreement([]) == []
    for measure in (cohen_kappa, fleiss_kappa, krippendorff_alpha):
        result = measure([])
        assert (result.value, result.raw, result.items, result.excluded) == (None, None, 0, 0)
    assert cohen_kappa([]).text() == "Cohen's κ n/a (no usable items)"


def test_all_items_left_out():
    cohen = cohen_kappa([["a", None], [None, "b"], [None, None]])
    assert (cohen.value, cohen.raw, cohen.items, cohen.excluded) == (None, None, 0, 3)
    assert cohen.text() == "Cohen's κ n/a (no usable items, 3 left out)"
    lonely = [["a", None, None], [None, "b", None], [None, None, None]]
    for measure in (fleiss_kappa, krippendorff_alpha):
        result = measure(lonely)
        assert (result.value, result.raw, result.items, result.excluded) == (None, None, 0, 3)


def test_cohen_needs_exactly_two_columns():
    with pytest.raises(WorkbenchError, match="exactly two raters.*3 columns") as caught:
        cohen_kappa([["a", "b", "a"], ["b", "b", "b"]])
    assert "Fleiss" in caught.value.hint
    with pytest.raises(WorkbenchError, match="1 columns"):
        cohen_kappa([["a"], ["b"]])


def test_ragged_rows_are_refused():
    with pytest.raises(WorkbenchError, match="Row 2 .* 3 entries, the first row has 2"):
        agreement([["a", "b"], ["a", "b", "c"]])
    with pytest.raises(WorkbenchError, match="not a table"):
        agreement([1, 2])
    with pytest.raises(WorkbenchError, match="not a table"):
        cohen_kappa(["ab", "ba"])


def test_agreement_picks_the_measures_by_rater_count():
    assert agreement([["a"], ["b"]]) == []
    two = agreement([["a", "a"], ["a", "b"], ["b", "b"]])
    assert [a.measure for a in two] == ["Cohen's κ", "Krippendorff's α"]
    three = agreement([["a", "a", "a"], ["a", "b", "b"], ["b", "b", "b"]])
    assert [a.measure for a in three] == ["Fleiss' κ", "Krippendorff's α"]
    rows = by_item(KRIPPENDORFF_2011)
    assert agreement(rows) == [fleiss_kappa(rows), krippendorff_alpha(rows)]


def test_text_and_dict():
    assert Agreement("Cohen's κ", 0.374, 0.8125, 120, 0).text() == "Cohen's κ 0.37 (raw 0.81, 120 items)"
    assert Agreement("Cohen's κ", -0.001, 0.5, 1, 0).text() == "Cohen's κ 0.00 (raw 0.50, 1 item)"
    assert Agreement("Fleiss' κ", -0.25, 0.4, 8, 1).text() == "Fleiss' κ -0.25 (raw 0.40, 8 items, 1 left out)"
    result = krippendorff_alpha(by_item(KRIPPENDORFF_2011))
    as_dict = json.loads(json.dumps(result.as_dict()))
    assert as_dict == {"measure": "Krippendorff's α", "value": pytest.approx(904 / 1216), "raw": pytest.approx(0.8),
                       "items": 11, "excluded": 1}
    assert all(type(v) in (str, float, int) for v in result.as_dict().values())
    assert json.loads(json.dumps(cohen_kappa([]).as_dict()))["value"] is None


def test_mixed_and_unorderable_categories():
    # 1 and "1" are different categories; np.unique could not even sort them.
    result = cohen_kappa([[1, "1"], ["1", "1"], [1, 1]])
    assert (result.raw, result.items) == (pytest.approx(2 / 3), 3)


def test_hundred_thousand_items_with_gaps():
    """A study's size, labels as strings with gaps: every item is counted where it can be, and raters who
    answer at random agree no better than chance (how fast: benchmarks/bench_agreement.py)."""
    rng = np.random.default_rng(0)
    names = np.array(["valid", "invalid", "unsure"], dtype=object)
    rows = with_gaps(names[rng.integers(0, 3, (100_000, 4))], rng, 0.05)
    fleiss, alpha = agreement(rows)
    cohen = cohen_kappa([row[:2] for row in rows])
    assert (fleiss.measure, alpha.measure) == ("Fleiss' κ", "Krippendorff's α")
    complete = sum(None not in row for row in rows)  # Fleiss: the items all four rated
    assert (fleiss.items, fleiss.excluded) == (complete, 100_000 - complete)
    assert (cohen.items, cohen.excluded) == (sum(None not in row[:2] for row in rows),
                                             sum(None in row[:2] for row in rows))
    assert alpha.items == sum(4 - row.count(None) >= 2 for row in rows)
    assert all(r.items > 50_000 and abs(r.value) < 0.02 and r.raw == pytest.approx(1 / 3, abs=0.02)
               for r in (fleiss, alpha, cohen))

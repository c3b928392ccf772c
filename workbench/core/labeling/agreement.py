"""How far human raters agree on nominal labels, beyond what chance alone would give.

A ratings matrix has one row per item and one column per rater; an entry is a category (any hashable
value, usually a str or an int) or `None` when that rater did not rate that item (a float NaN counts
as `None` too, so a numeric array with NaN gaps works as is). Three chance-corrected measures:

- Cohen's κ (Cohen 1960): exactly two raters; chance agreement comes from each rater's own label
  frequencies. Items one of them skipped are left out.
- Fleiss' κ (Fleiss 1971): any number of raters, who need not be the same people on every item, but
  every item must have the same number of ratings; chance agreement comes from the pooled label
  frequencies. Items with a different number of ratings are left out.
- Krippendorff's α (Krippendorff 2011), nominal: any number of raters with any pattern of gaps; it
  compares the observed disagreement between pairs of values within an item with the disagreement
  expected from all pairable values. Items with fewer than two ratings cannot be paired and are left out.

Each comes back as an `Agreement` with the raw (observed) agreement beside it, because a κ near 0 can
sit next to a raw agreement near 1 when one category dominates. A measure is undefined ("n/a") when
chance already predicts perfect agreement (everyone used one category) or when no item is usable.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from workbench.core.errors import WorkbenchError

COHEN = "Cohen's κ"
FLEISS = "Fleiss' κ"
KRIPPENDORFF = "Krippendorff's α"
TOLERANCE = 1e-12  # a chance term this close to its limit counts as reaching it: the measure is undefined

Ratings = Sequence[Sequence[Hashable | None]] | np.ndarray


@dataclass(frozen=True)
class Agreement:
    measure: str  # COHEN, FLEISS or KRIPPENDORFF
    value: float | None  # None when undefined ("n/a")
    raw: float | None  # observed agreement; None when no item was usable
    items: int  # items counted
    excluded: int  # items left out

    def text(self) -> str:
        """One line, e.g. "Cohen's κ 0.37 (raw 0.81, 120 items)"."""
        value = "n/a" if self.value is None else _two_decimals(self.value)
        parts = [] if self.raw is None else [f"raw {_two_decimals(self.raw)}"]
        if self.items:
            parts.append(f"{self.items} item{'' if self.items == 1 else 's'}")
        else:
            parts.append("no usable items")
        if self.excluded:
            parts.append(f"{self.excluded} left out")
        return f"{self.measure} {value} ({', '.join(parts)})"

    def as_dict(self) -> dict[str, Any]:
        return {"measure": self.measure, "value": self.value, "raw": self.raw,
                "items": self.items, "excluded": self.excluded}


def _two_decimals(x: float) -> str:
    text = f"{x:.2f}"
    return "0.00" if text == "-0.00" else text  # a tiny negative κ is still "no agreement beyond chance"


def _codes(ratings: Ratings) -> np.ndarray:
    """The ratings as an (items, raters) int array: categories as codes 0..K-1, missing as -1."""
    if isinstance(ratings, np.ndarray) and ratings.ndim == 2 and ratings.dtype.kind in "biuf":
        # Numeric arrays skip the per-entry Python loop; NaN marks a gap.
        missing = np.isnan(ratings) if ratings.dtype.kind == "f" else np.zeros(ratings.shape, bool)
        codes = np.full(ratings.shape, -1, dtype=np.int64)
        codes[~missing] = np.unique(ratings[~missing], return_inverse=True)[1].ravel()
        return codes
    rows = list(ratings)
    if not rows:
        return np.empty((0, 0), dtype=np.int64)
    hint = "Give every item one row with one entry per rater, None where a rater did not rate it."
    try:  # a str has a length too, but a row of characters is a mistake, not a table
        widths = [len(row) if not isinstance(row, (str, bytes)) else None for row in rows]
    except TypeError:
        widths = [None]
    if None in widths:
        raise WorkbenchError("The ratings are not a table: each item must be a row of ratings.", hint) from None
    width = widths[0]
    for number, length in enumerate(widths, 1):
        if length != width:
            raise WorkbenchError(f"Row {number} of the ratings has {length} entries, the first row has {width}.", hint)
    # A dict rather than np.unique: it works for mixed or unorderable categories (1 and "1"), and is as fast.
    index: dict[Hashable, int] = {}
    flat = np.fromiter((-1 if v is None or v != v else index.setdefault(v, len(index))  # noqa: PLR0124 (NaN)
                        for row in rows for v in row), dtype=np.int64, count=len(rows) * width)
    return flat.reshape(len(rows), width)


def _counts(codes: np.ndarray) -> np.ndarray:
    """n_ij: how many raters put item i in category j, as an (items, categories) array."""
    items, categories = codes.shape[0], int(codes.max(initial=-1)) + 1
    rated = codes >= 0
    rows = np.broadcast_to(np.arange(items)[:, None], codes.shape)[rated]
    flat = np.bincount(rows * categories + codes[rated], minlength=items * categories)
    return flat.reshape(items, categories)


def _ratio(numerator: float, denominator: float) -> float | None:
    return None if abs(denominator) <= TOLERANCE else float(numerator / denominator)


def cohen_kappa(ratings: Ratings) -> Agreement:
    """Cohen's κ for exactly two raters; items either rater skipped are left out."""
    return _cohen(_codes(ratings))


def _cohen(codes: np.ndarray) -> Agreement:
    if codes.shape == (0, 0):  # no rows at all, so no column count to check
        return Agreement(COHEN, None, None, 0, 0)
    if codes.shape[1] != 2:
        raise WorkbenchError(f"Cohen's κ needs exactly two raters; the ratings have {codes.shape[1]} columns.",
                             "Use Fleiss' κ or Krippendorff's α for more than two raters.")
    both = (codes >= 0).all(axis=1)
    first, second = codes[both, 0], codes[both, 1]
    items, excluded = len(first), int((~both).sum())
    if items == 0:
        return Agreement(COHEN, None, None, 0, excluded)
    categories = int(codes.max()) + 1
    observed = float(np.mean(first == second))
    chance = float(np.bincount(first, minlength=categories) @ np.bincount(second, minlength=categories)) / items**2
    return Agreement(COHEN, _ratio(observed - chance, 1.0 - chance), observed, items, excluded)


def fleiss_kappa(ratings: Ratings) -> Agreement:
    """Fleiss' κ; only items with the most common number of ratings (at least 2) are counted."""
    return _fleiss(_codes(ratings))


def _fleiss(codes: np.ndarray) -> Agreement:
    total = codes.shape[0]
    counts = _counts(codes) if total else np.empty((0, 0), dtype=np.int64)
    per_item = counts.sum(axis=1)
    pairable = per_item[per_item >= 2]
    if len(pairable) == 0:
        return Agreement(FLEISS, None, None, 0, total)
    frequency = np.bincount(pairable)
    n = int(np.flatnonzero(frequency == frequency.max())[-1])  # ties go to the larger number of raters
    kept = counts[per_item == n].astype(np.float64)
    items = len(kept)
    per_item_agreement = ((kept**2).sum(axis=1) - n) / (n * (n - 1))
    observed = float(per_item_agreement.mean())
    shares = kept.sum(axis=0) / (items * n)
    chance = float((shares**2).sum())
    return Agreement(FLEISS, _ratio(observed - chance, 1.0 - chance), observed, items, total - items)


def krippendorff_alpha(ratings: Ratings) -> Agreement:
    """Nominal Krippendorff's α from the coincidence matrix; items with fewer than 2 ratings are left out."""
    return _krippendorff(_codes(ratings))


def _krippendorff(codes: np.ndarray) -> Agreement:
    total = codes.shape[0]
    counts = _counts(codes) if total else np.empty((0, 0), dtype=np.int64)
    per_item = counts.sum(axis=1)
    pairable = per_item >= 2
    units = int(pairable.sum())
    if units == 0:
        return Agreement(KRIPPENDORFF, None, None, 0, total)
    kept, m = counts[pairable].astype(np.float64), per_item[pairable].astype(np.float64)
    # Only the diagonal of the coincidence matrix is needed for nominal data: o_cc = Σ_u n_uc(n_uc−1)/(m_u−1),
    # and its row sums n_c are simply the pairable values per category.
    matching = float((kept * (kept - 1) / (m - 1)[:, None]).sum())
    n_c = kept.sum(axis=0)
    n = float(n_c.sum())
    observed_disagreement = (n - matching) / n
    expected_disagreement = (n * n - float((n_c**2).sum())) / (n * (n - 1))
    value = None if expected_disagreement <= TOLERANCE else 1.0 - observed_disagreement / expected_disagreement
    return Agreement(KRIPPENDORFF, value, 1.0 - observed_disagreement, units, total - units)


def agreement(ratings: Ratings) -> list[Agreement]:
    """The measures that fit the matrix: Cohen's κ and α for two raters, Fleiss' κ and α for more."""
    codes = _codes(ratings)  # encoded once, shared by both measures
    if codes.shape[1] < 2:
        return []
    first = _cohen(codes) if codes.shape[1] == 2 else _fleiss(codes)
    return [first, _krippendorff(codes)]

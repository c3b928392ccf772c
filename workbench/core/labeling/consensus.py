"""The consensus of an item's raters on validity and label preservation.

The rules are the GenAI-TIG benchmark's, with "both" read as "all" and "neither" as "none" for more
than two raters:

- **validity**: `yes` when every rater judged the image valid, `no` when every rater judged it
  invalid, `N/A` otherwise;
- **label preservation**: `N/A` when validity is `no`; otherwise `yes` when every rater chose the
  expected label, `no` when none did, `N/A` when some did.

So one "invalid" beside one other class reads validity `N/A`, preservation `no`. Items with fewer
answers than the study asks for (two by default) are `pending`. The majority columns decide by more
than half of the raters (`tie` otherwise); preservation is `N/A` where the majority found the image
invalid.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from workbench.core.labeling.answers import is_valid, keeps_label

YES, NO, NA, PENDING, TIE = "yes", "no", "N/A", "pending", "tie"


@dataclass(frozen=True)
class Consensus:
    validity: str
    preservation: str
    validity_majority: str
    preservation_majority: str
    raters: int

    @property
    def decided(self) -> bool:
        return self.validity != PENDING


def consensus(answers: Sequence[str], expected: str, min_raters: int = 2) -> Consensus:
    """The consensus of `answers` (one per rater who answered) on an image whose label should be `expected`."""
    n = len(answers)
    if n < max(min_raters, 1):
        return Consensus(PENDING, PENDING, PENDING, PENDING, n)
    valid = sum(is_valid(a) for a in answers)
    kept = sum(keeps_label(a, expected) for a in answers)
    validity = YES if valid == n else NO if valid == 0 else NA
    preservation = NA if validity == NO else YES if kept == n else NO if kept == 0 else NA
    validity_majority = YES if 2 * valid > n else NO if 2 * valid < n else TIE
    if validity_majority == NO:
        preservation_majority = NA
    else:
        preservation_majority = YES if 2 * kept > n else NO if 2 * kept < n else TIE
    return Consensus(validity, preservation, validity_majority, preservation_majority, n)

"""The order a rater sees a study's items in, with attention checks among them.

- **Random per rater, interleaved.** Each (generator, extent) group is shuffled with the rater's own
  seed (derived from the study's seed and the rater's name, and recorded), then the groups are dealt
  round-robin, so no stretch of the queue shows one generator or one extent only.
- **Disagreement first** (an option). Each item gets an *expected disagreement* in [0, 1] from the
  automated judges: the two validity proxies disagreeing with each other (one half), and the oracle
  classifier disagreeing with the model under test about whether the label survived (the other half;
  an uncertain oracle counts a quarter). Items are put in decreasing order of it, ties in the random
  order, so human effort goes first where the machines cannot settle the question. How much of the
  total expected disagreement the rater's answers cover is shown as they go.
- **Attention checks.** One real test image of known class in every `check_every` entries (1 in 10
  by default), drawn with the study's seed (the same checks for every rater, in each rater's order).
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass

import numpy as np

from workbench.core.labeling.study import StudyItem

ORDERS = ("random", "disagreement")
CHECK_EVERY = 10


@dataclass(frozen=True)
class Entry:
    """One place in a rater's queue: a study item (`index` into the items) or a check (into the checks)."""

    kind: str  # "item" or "check"
    index: int


def rater_seed(study_seed: int, rater: str) -> int:
    """The rater's own seed: the same for the same study and name, in any process."""
    return (int(study_seed) * 1_000_003 + zlib.crc32(rater.encode("utf-8"))) % 2 ** 32


def expected_disagreement(items: list[StudyItem]) -> np.ndarray:
    """Per item, how much the proxies, the oracle classifier and the model disagree (module docstring)."""
    out = np.zeros(len(items), dtype=np.float64)
    for i, item in enumerate(items):
        validity = [item.proxies[k] for k in ("SelfOracle", "DAIV") if k in item.proxies]
        if len(validity) == 2 and validity[0] != validity[1]:
            out[i] += 0.5
        oracle = item.proxies.get("oracle classifier")
        if oracle is not None and item.predicted is not None:
            model_keeps = not item.misbehaves
            if oracle == "uncertain":
                out[i] += 0.25
            elif (oracle == "preserved") != model_keeps:
                out[i] += 0.5
    return out


def item_order(items: list[StudyItem], seed: int, order: str = "random") -> list[int]:
    """The items' positions in the order a rater with `seed` sees them."""
    if order not in ORDERS:
        raise ValueError(f"order must be one of {ORDERS}, not {order!r}")
    rng = np.random.default_rng(seed)
    groups: dict[tuple[str, str], list[int]] = {}
    for i, item in enumerate(items):
        groups.setdefault(item.group, []).append(i)
    shuffled = [list(rng.permutation(members)) for members in groups.values()]
    dealt = []
    for turn in range(max((len(g) for g in shuffled), default=0)):
        dealt.extend(int(g[turn]) for g in shuffled if turn < len(g))
    if order == "disagreement":
        score = expected_disagreement(items)
        dealt.sort(key=lambda i: -score[i])  # a stable sort keeps the interleaving among ties
    return dealt


def with_checks(order: list[int], n_checks: int, check_every: int = CHECK_EVERY) -> list[Entry]:
    """The queue: the items in `order` with check k placed as every `check_every`-th entry."""
    entries = [Entry("item", i) for i in order]
    if check_every < 2 or n_checks == 0:
        return entries
    out, used = [], 0
    for entry in entries:
        if used < n_checks and (len(out) + 1) % check_every == 0:
            out.append(Entry("check", used))
            used += 1
        out.append(entry)
    if used < n_checks and (len(out) + 1) % check_every == 0:  # a check is due after the last item
        out.append(Entry("check", used))
    return out


def checks_needed(n_items: int, check_every: int = CHECK_EVERY) -> int:
    """How many checks a queue of `n_items` items holds (one in every `check_every` entries)."""
    return 0 if check_every < 2 else n_items // (check_every - 1)

"""A labelling study: the items of one test set, its raters' current answers, and what they add up to.

An *item* is one input to judge, keyed by its stable input id, with its expected label and (for a
generated set) the generator, extent, model prediction and proxy verdicts that review mode shows.
For a generated set only the misbehaviour-inducing inputs are items, as in the benchmark's study
(one question per image that made the model misbehave); any other test set is labelled whole.

From the answers a study gives, per generator and extent and overall:

- each item's consensus (`consensus`);
- the agreement of the raters on validity, on label match and on the raw answer (`agreement`);
- validity rate, label-preservation rate and **valid misbehaviours** — inputs all raters found
  valid and of the expected class that the model misclassifies: the failures that count;
- each proxy (SelfOracle, DAIV, the oracle classifier) against the human consensus: confusion
  matrix, accuracy and Cohen's κ, on the items the consensus decides;
- the raters' attention checks (real test images of known class), kept out of all the above; a rater
  who failed one is flagged.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from workbench.core.labeling.agreement import Agreement, agreement, cohen_kappa
from workbench.core.labeling.answers import is_valid, keeps_label
from workbench.core.labeling.consensus import NO, YES, Consensus, consensus
from workbench.core.project.store import text_column

ALL = ("all", "")  # the key of the whole study among the groups
#: the proxies, each as (name, column, what it judges)
PROXIES = (("SelfOracle", "proxy_selforacle_invalid", "validity"), ("DAIV", "proxy_daiv_invalid", "validity"),
           ("oracle classifier", "proxy_oracle_verdict", "label preservation"))
SUBSETS = ("valid", "valid-preserving", "valid-misbehaviours")


@dataclass(frozen=True)
class StudyItem:
    """One input to judge, with what review mode may show about it."""

    input_id: str
    expected: str  # the expected (intended) label, as an answer writes it
    index: int = -1  # its position in the test set (−1 for an imported file's row)
    generator: str = ""
    tool: str = ""  # vae, gan or dm, as the benchmark names the generator kinds
    extent: str = ""
    generations: int | None = None
    predicted: str | None = None
    proxies: dict = field(default_factory=dict)  # proxy name → True (valid) / False, or the oracle's verdict

    @property
    def group(self) -> tuple[str, str]:
        return self.generator, self.extent

    @property
    def misbehaves(self) -> bool:
        return self.predicted is not None and self.predicted != self.expected


def items_from_testset(testset, only_misbehaviours: bool | None = None) -> list[StudyItem]:
    """The items of a test set: a generated set's misbehaviour-inducing inputs (all its inputs with
    `only_misbehaviours=False`), every input of any other set."""
    columns, n = testset.columns, len(testset)
    generated = "generator" in columns
    text = {k: text_column(columns[k]) for k in ("generator", "kind", "extent", "proxy_oracle_verdict") if k in columns}
    predicted = np.asarray(columns["predicted"]) if "predicted" in columns else None
    generations = np.asarray(columns["generations"]) if "generations" in columns else None
    tools = testset.tools()
    if only_misbehaviours is None:
        only_misbehaviours = generated and predicted is not None
    items = []
    for i in range(n):
        expected = str(int(testset.labels[i]))
        guess = None if predicted is None else str(int(predicted[i]))
        if only_misbehaviours and guess == expected:
            continue
        proxies = {}
        for name, column, _ in PROXIES:
            if column in text:
                proxies[name] = str(text[column][i])
            elif column in columns:
                proxies[name] = not bool(columns[column][i])
        items.append(StudyItem(str(testset.ids[i]), expected, i, str(text["generator"][i]) if generated else "",
                               str(tools[i]), str(text["extent"][i]) if "extent" in text else "",
                               None if generations is None else int(generations[i]), guess, proxies))
    return items


@dataclass(frozen=True)
class CheckResult:
    """A rater's attention checks: how many they answered and how many they got wrong."""

    rater: str
    answered: int
    failed: int

    @property
    def flagged(self) -> bool:
        return self.failed > 0


class Study:
    """The items of a test set and the current answers of its raters (`rows` from the label store)."""

    def __init__(self, name: str, items: list[StudyItem], rows=(), min_raters: int = 2, order: list[str] = ()):
        """`order`: the raters in the order they first answered (the label store's `raters`); the raters of
        a study are those who answered an item, attention checks aside."""
        self.name = name
        self.items = items
        self.min_raters = min_raters
        self.answers: dict[str, dict[str, str]] = {}  # input id → rater → answer
        self.check_rows: list = []
        known = {item.input_id for item in items}
        answered: list[str] = []
        for row in rows:
            if row.check_class is not None:
                self.check_rows.append(row)
            elif row.input_id in known:
                self.answers.setdefault(row.input_id, {})[row.rater] = row.answer
                if row.rater not in answered:
                    answered.append(row.rater)
        first = {rater: k for k, rater in enumerate(order)}
        self.raters: list[str] = sorted(answered, key=lambda r: first.get(r, len(first)))

    @classmethod
    def from_answers(cls, name: str, items: list[StudyItem], raters: list[str], answers: dict[str, dict[str, str]],
                     min_raters: int = 2) -> "Study":
        """A study from answers given as input id → rater → answer (e.g. read from a file)."""
        study = cls(name, items, (), min_raters)
        study.raters = list(raters)
        study.answers = {k: dict(v) for k, v in answers.items()}
        return study

    # --- per item -----------------------------------------------------------------------------------------

    def item_answers(self, item: StudyItem) -> list[str]:
        given = self.answers.get(item.input_id, {})
        return [given[r] for r in self.raters if r in given]

    def consensus(self, item: StudyItem) -> Consensus:
        return consensus(self.item_answers(item), item.expected, self.min_raters)

    def consensuses(self) -> list[Consensus]:
        return [self.consensus(item) for item in self.items]

    def groups(self) -> list[tuple[str, str]]:
        """(generator, extent) of the items, in the order they first appear."""
        return list(dict.fromkeys(item.group for item in self.items))

    def _items_of(self, group) -> list[StudyItem]:
        return self.items if group in (None, ALL) else [item for item in self.items if item.group == group]

    # --- what the answers add up to -----------------------------------------------------------------------

    def rates(self, group=None) -> dict:
        """Items, decided items, valid (all raters), valid and label-preserving, valid misbehaviours; the
        rates over the decided items (None while none is decided)."""
        items = self._items_of(group)
        verdicts = [self.consensus(item) for item in items]
        decided = sum(c.decided for c in verdicts)
        valid = sum(c.validity == YES for c in verdicts)
        preserved = sum(c.validity == YES and c.preservation == YES for c in verdicts)
        failures = sum(c.validity == YES and c.preservation == YES and item.misbehaves
                       for c, item in zip(verdicts, items))
        rate = (lambda k: k / decided if decided else None)
        return {"items": len(items), "decided": decided, "valid": valid, "valid_rate": rate(valid),
                "valid_preserving": preserved, "preservation_rate": rate(preserved),
                "valid_misbehaviours": failures}

    def ratings(self, question: str, group=None) -> list[list]:
        """The items × raters matrix for `question` ('validity', 'label match' or 'answer'); None where a
        rater did not answer."""
        rows = []
        for item in self._items_of(group):
            given = self.answers.get(item.input_id, {})
            row = []
            for rater in self.raters:
                answer = given.get(rater)
                if answer is None:
                    row.append(None)
                elif question == "validity":
                    row.append(is_valid(answer))
                elif question == "label match":
                    row.append(keeps_label(answer, item.expected))
                else:
                    row.append(answer)
            rows.append(row)
        return rows

    def agreement(self, group=None) -> dict[str, list[Agreement]]:
        """Per question, Cohen's κ (two raters) or Fleiss' κ (more) and Krippendorff's α."""
        return {q: agreement(self.ratings(q, group)) for q in ("validity", "label match", "answer")}

    def proxy_comparison(self, group=None) -> list[dict]:
        """Each proxy against the human consensus on the items it decides: for a validity proxy the
        validity consensus, for the oracle classifier the label-preservation consensus (its uncertain
        verdicts are counted apart). Confusion counts read (proxy, human): yes/yes, yes/no, no/yes, no/no."""
        out = []
        items = self._items_of(group)
        verdicts = [self.consensus(item) for item in items]
        for name, _, judges in PROXIES:
            pairs, uncertain = [], 0
            for item, c in zip(items, verdicts):
                if name not in item.proxies:
                    continue
                human = c.validity if judges == "validity" else c.preservation
                if human not in (YES, NO):
                    continue
                verdict = item.proxies[name]
                if judges != "validity":
                    if verdict == "uncertain":
                        uncertain += 1
                        continue
                    verdict = verdict == "preserved"
                pairs.append((YES if verdict else NO, human))
            if not pairs and not uncertain:
                continue
            confusion = {f"{p}/{h}": sum(1 for a, b in pairs if (a, b) == (p, h)) for p in (YES, NO) for h in (YES, NO)}
            agree = confusion["yes/yes"] + confusion["no/no"]
            out.append({"proxy": name, "judges": judges, "items": len(pairs), "uncertain": uncertain,
                        "confusion": confusion, "accuracy": agree / len(pairs) if pairs else None,
                        "kappa": cohen_kappa([[a, b] for a, b in pairs])})
        return out

    def checks(self) -> list[CheckResult]:
        """Each rater's attention checks (their current answers to check images)."""
        newest: dict[tuple[str, str], object] = {}
        for row in self.check_rows:
            newest[(row.rater, row.input_id)] = row
        out = []
        for rater in dict.fromkeys([*self.raters, *(who for who, _ in newest)]):
            mine = [r for (who, _), r in newest.items() if who == rater and r.answer is not None]
            out.append(CheckResult(rater, len(mine), sum(r.answer != str(r.check_class) for r in mine)))
        return out

    def human_subset(self, which: str) -> list[int]:
        """Test-set positions of the items the consensus puts in `which` ('valid', 'valid-preserving' or
        'valid-misbehaviours'), in test-set order."""
        if which not in SUBSETS:
            raise ValueError(f"unknown human-validated subset {which!r}")
        picked = []
        for item in self.items:
            c = self.consensus(item)
            if c.validity != YES:
                continue
            if which != "valid" and c.preservation != YES:
                continue
            if which == "valid-misbehaviours" and not item.misbehaves:
                continue
            picked.append(item.index)
        return sorted(picked)

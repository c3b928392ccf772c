"""A rater's queue (order, interleaving, attention checks, disagreement first), a labelling session's keys on
the store (answer, skip, undo, redo, moving, resuming), and what a study's answers add up to."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from sklearn.metrics import cohen_kappa_score

from workbench.core.errors import WorkbenchError
from workbench.core.labeling.answers import INVALID, options_for
from workbench.core.labeling.consensus import NO, YES
from workbench.core.labeling.label_store import FILE, LabelStore
from workbench.core.labeling.queue import (
    Entry,
    checks_needed,
    expected_disagreement,
    item_order,
    rater_seed,
    with_checks,
)
from workbench.core.labeling.session import CheckImages, LabellingSession
from workbench.core.labeling.study import Study, StudyItem

DIGITS = options_for([str(i) for i in range(10)])
NAME = "gen"


class Clock:
    def __init__(self):
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def make_items(sizes: dict[tuple[str, str], int]) -> list[StudyItem]:
    items = []
    for (generator, extent), size in sizes.items():
        for _ in range(size):
            i = len(items)
            items.append(StudyItem(f"{generator}-{extent}-{i}", str(i % 10), i, generator, "vae", extent,
                                   predicted=str((i + 1) % 10)))
    return items


ITEMS = make_items({("g1", "small"): 5, ("g1", "large"): 4, ("g2", "small"): 3})
IMAGES = np.arange(len(ITEMS) * 4, dtype=np.float32).reshape(len(ITEMS), 1, 2, 2)


@pytest.fixture
def store(tmp_path):
    with LabelStore(tmp_path / FILE) as s:
        yield s


def session(store, rater="a", items=ITEMS, clock=None, **kwargs) -> LabellingSession:
    kwargs.setdefault("check_every", 0)
    return LabellingSession(store, NAME, items, IMAGES, DIGITS, rater, clock=clock or Clock(), **kwargs)


def ids(s: LabellingSession) -> list[str]:
    return [s.input_id(e) for e in s.queue]


# ---------------------------------------------------------------- item order


def test_item_order_is_a_deterministic_permutation_per_seed_and_rater():
    items = make_items({("g1", "a"): 20, ("g2", "a"): 15, ("g3", "b"): 10})
    seed_a, seed_b = rater_seed(7, "alice"), rater_seed(7, "bob")
    assert rater_seed(7, "alice") == seed_a and 0 <= seed_a < 2 ** 32
    assert len({seed_a, seed_b, rater_seed(8, "alice")}) == 3
    first = item_order(items, seed_a)
    assert item_order(items, seed_a) == first
    assert sorted(first) == list(range(len(items)))
    assert all(isinstance(i, int) for i in first)
    assert item_order(items, seed_b) != first  # another rater sees another order
    assert item_order(items, rater_seed(8, "alice")) != first
    with pytest.raises(ValueError):
        item_order(items, 0, "alphabetical")
    assert item_order([], 0) == []


@pytest.mark.parametrize("sizes", [(5, 5, 5), (20, 15, 10), (1, 7), (9,), (3, 1, 4, 1, 5)])
def test_groups_are_interleaved(sizes):
    items = make_items({(f"g{k}", f"e{k % 2}"): n for k, n in enumerate(sizes)})
    groups = {item.group for item in items}
    for seed in range(5):
        order = item_order(items, seed)
        seen = [items[i].group for i in order]
        # while every group still has items (from the window's start on), a window of len(groups) consecutive
        # items shows each group once
        last = {g: max(p for p, h in enumerate(seen) if h == g) for g in groups}
        checked = 0
        for start in range(len(order) - len(groups) + 1):
            if all(last[g] >= start for g in groups):
                window = seen[start:start + len(groups)]
                assert len(set(window)) == len(groups), (seed, start, window)
                checked += 1
        assert checked >= len(groups) * min(sizes) - len(groups) + 1
        # and the first len(groups) × (smallest group) entries are whole rounds, one of each group
        k, rounds = len(groups), min(sizes)
        for start in range(k * rounds - k + 1):
            assert len(set(seen[start:start + k])) == k, (seed, start)
    orders = {tuple(item_order(items, seed)) for seed in range(5)}
    assert len(orders) > 1 or len(items) == 1


def test_disagreement_order_puts_the_disputed_items_first_keeping_the_random_order_among_ties():
    rng = np.random.default_rng(3)
    items = []
    for i in range(40):
        so, daiv = bool(rng.integers(2)), bool(rng.integers(2))
        oracle = ["preserved", "changed", "uncertain"][int(rng.integers(3))]
        predicted = str(i % 10) if rng.random() < 0.5 else str((i + 1) % 10)
        items.append(StudyItem(f"x{i}", str(i % 10), i, f"g{i % 3}", "gan", "e", predicted=predicted,
                               proxies={"SelfOracle": so, "DAIV": daiv, "oracle classifier": oracle}))
    score = expected_disagreement(items)
    random = item_order(items, 11)
    order = item_order(items, 11, "disagreement")
    assert sorted(order) == list(range(40))
    assert all(score[a] >= score[b] for a, b in itertools.pairwise(order))
    assert len(set(score)) > 2
    for value in set(score):
        assert [i for i in order if score[i] == value] == [i for i in random if score[i] == value]


def test_expected_disagreement_by_hand():
    def item(proxies, predicted="1", expected="1"):
        return StudyItem("x", expected, 0, predicted=predicted, proxies=proxies)

    cases = [
        (item({}), 0.0),
        (item({"SelfOracle": True, "DAIV": True}), 0.0),
        (item({"SelfOracle": False, "DAIV": False}), 0.0),
        (item({"SelfOracle": True, "DAIV": False}), 0.5),
        (item({"SelfOracle": True}), 0.0),  # one validity proxy alone cannot disagree
        (item({"oracle classifier": "uncertain"}), 0.25),
        (item({"oracle classifier": "uncertain"}, predicted=None), 0.0),  # no model prediction to compare
        (item({"oracle classifier": "preserved"}), 0.0),  # both say the label survived
        (item({"oracle classifier": "changed"}, predicted="2"), 0.0),  # both say it did not
        (item({"oracle classifier": "preserved"}, predicted="2"), 0.5),
        (item({"oracle classifier": "changed"}), 0.5),
        (item({"SelfOracle": False, "DAIV": True, "oracle classifier": "changed"}), 1.0),
        (item({"SelfOracle": False, "DAIV": True, "oracle classifier": "uncertain"}, predicted="3"), 0.75),
    ]
    got = expected_disagreement([c for c, _ in cases])
    assert got.tolist() == [want for _, want in cases]
    assert got.dtype == np.float64
    assert expected_disagreement([]).shape == (0,)


# ---------------------------------------------------------------- attention checks in the queue


@pytest.mark.parametrize("every", [2, 3, 5, 10])
def test_check_k_is_at_every_check_every_th_place(every):
    for n in range(45):
        order = list(np.random.default_rng(n).permutation(n))
        needed = checks_needed(n, every)
        queue = with_checks(order, needed, every)
        places = [p for p, e in enumerate(queue, 1) if e.kind == "check"]
        assert places == [every * (k + 1) for k in range(needed)], (n, every)
        assert [e.index for e in queue if e.kind == "check"] == list(range(needed))
        assert [e.index for e in queue if e.kind == "item"] == order
        assert len(queue) == n + needed
        # a queue of n items with one in every `every` entries a check holds exactly `needed` of them
        assert len(queue) // every == needed


def test_checks_needed_by_hand():
    assert checks_needed(9) == 1 and checks_needed(8) == 0 and checks_needed(18) == 2 and checks_needed(100) == 11
    assert checks_needed(5, 2) == 5 and checks_needed(100, 0) == 0 and checks_needed(100, 1) == 0
    assert with_checks([0, 1, 2, 3, 4, 5, 6, 7, 8], 1)[-1] == Entry("check", 0)  # the 10th place comes last


def test_fewer_checks_than_places_and_no_checks():
    queue = with_checks(list(range(30)), 1, 10)
    assert [p for p, e in enumerate(queue, 1) if e.kind == "check"] == [10]
    assert with_checks(list(range(30)), 0, 10) == [Entry("item", i) for i in range(30)]
    assert with_checks(list(range(30)), 5, 1) == [Entry("item", i) for i in range(30)]
    assert with_checks(list(range(30)), 5, 0) == [Entry("item", i) for i in range(30)]


# ---------------------------------------------------------------- a labelling session


def test_a_session_starts_at_the_first_entry_in_the_raters_order(store):
    s = session(store, seed=4)
    assert s.queue == with_checks(item_order(ITEMS, rater_seed(4, "a")), 0, 0)
    assert s.position == 0 and s.answered() == 0 and not s.done
    entry = s.entry
    assert np.array_equal(s.image(entry), IMAGES[ITEMS[entry.index].index])
    assert s.answer_of(entry) is None
    assert s.settings() == {"rater": "a", "order_seed": rater_seed(4, "a"), "study_seed": 4, "order": "random",
                            "check_every": 0, "checks": 0, "mode": "blind"}
    assert s.opaque_id(entry) == s.opaque_id(entry) and s.input_id(entry) not in s.opaque_id(entry)
    assert len({s.opaque_id(e) for e in s.queue}) == len(ITEMS)


def test_a_session_needs_a_rater_and_items(store):
    with pytest.raises(WorkbenchError, match="rater"):
        session(store, rater="  ")
    with pytest.raises(WorkbenchError, match="no inputs"):
        session(store, items=[])
    assert session(store, rater=" bob ").rater == "bob"


def test_answer_commits_advances_and_times_the_entry(store):
    clock = Clock()
    s = session(store, clock=clock)
    first = s.entry
    clock.t += 2.5
    row = s.answer("3")
    assert (row.input_id, row.answer, row.rater, row.seconds, row.mode, row.check_class) == \
        (s.input_id(first), "3", "a", 2.5, "blind", None)
    assert store.row(row.id) == row
    assert s.position == 1 and s.answer_of(first) == "3" and s.answered() == 1
    clock.t += 0.75
    assert s.answer(INVALID).seconds == 0.75
    # moving restarts the timer: the time is the time on the entry answered
    clock.t += 10
    s.move(1)
    clock.t += 1
    assert s.answer("1").seconds == 1.0


def test_answer_without_advancing_stays_and_restarts_the_timer(store):
    clock = Clock()
    s = session(store, clock=clock)
    clock.t += 1
    s.answer("2", advance=False)
    assert s.position == 0
    clock.t += 4
    row = s.answer("5", advance=False)
    assert row.seconds == 4 and s.answer_of(s.entry) == "5"
    assert [r.answer for r in store.history(NAME, "a")] == ["2", "5"]
    assert [r.answer for r in store.current(NAME, "a")] == ["5"]


def test_answers_not_among_the_options_are_refused(store):
    s = session(store)
    for bad in ("10", "different", "cat", "", "3.0"):  # digits offer no "different item"
        with pytest.raises(WorkbenchError, match="not one of this study's answers"):
            s.answer(bad)
    assert store.history() == [] and s.position == 0


def test_moving_and_next_unlabelled(store):
    s = session(store)
    s.move(-1)
    assert s.position == 0  # clamped at the start
    s.go(100)
    assert s.position == len(s.queue) - 1  # and at the end
    s.go(0)
    s.answer("1")
    s.answer("1")
    s.answer("1")
    assert s.position == 3
    s.move(-2)
    assert s.position == 1 and s.answer_of(s.entry) == "1"
    s.next_unlabelled()
    assert s.position == 3
    s.go(len(s.queue) - 1)
    s.next_unlabelled()  # wraps round past the answered ones
    assert s.position == 3
    # answering an entry that was already answered replaces the answer and goes to the next unanswered
    s.go(0)
    s.answer(INVALID)
    assert s.position == 3 and s.answer_of(s.queue[0]) == INVALID


def test_skip_moves_the_entry_to_the_end_and_shows_the_next(store):
    s = session(store)
    before = list(s.queue)
    row = s.skip()
    assert row.action == "skip" and row.answer is None
    assert s.queue == before[1:] + before[:1]
    assert s.position == 0 and s.entry == before[1]
    assert s.answered() == 0
    # skipping the last entry goes back to the first unanswered
    s.go(len(s.queue) - 1)
    skipped = s.entry
    s.skip()
    assert s.queue[-1] == skipped and s.position == 0
    assert [r.action for r in store.history(NAME, "a")] == ["skip", "skip"]


def test_undo_redo_and_a_new_answer_clearing_redo(store):
    s = session(store)
    first, second = s.queue[0], s.queue[1]
    assert s.undo() is None and s.redo() is None
    s.answer("1")
    s.answer("2")
    assert s.position == 2
    undo = s.undo()
    assert undo.action == "undo" and undo.answer is None
    assert s.entry == second and s.answer_of(second) is None
    assert s.undo().input_id == s.input_id(first)
    assert s.entry == first and s.answered() == 0
    redo = s.redo()
    assert redo.action == "redo" and redo.answer == "1" and s.answer_of(first) == "1"
    assert s.entry == second  # redo goes on to the next unanswered
    assert s.redo().answer == "2" and s.position == 2
    assert s.redo() is None
    s.undo()
    s.answer("7")  # a new answer clears what could be redone
    assert s.redo() is None
    assert {r.input_id: r.answer for r in store.current(NAME, "a")} == {s.input_id(first): "1",
                                                                       s.input_id(second): "7"}
    assert len(store.history(NAME, "a")) == 2 + 2 + 2 + 1 + 1  # nothing deleted


def test_undo_of_a_changed_answer_gives_back_the_first(store):
    s = session(store)
    entry = s.entry
    s.answer("4")
    s.go(0)
    s.answer("6")
    assert s.answer_of(entry) == "6"
    s.undo()
    assert s.answer_of(entry) == "4" and s.entry == entry
    assert [r.answer for r in store.current(NAME, "a")] == ["4"]
    s.undo()
    assert s.answer_of(entry) is None and store.current(NAME, "a") == []


def test_a_new_session_resumes_at_the_first_unanswered_with_skipped_entries_at_the_end(store):
    s = session(store, seed=9)
    order = ids(s)
    s.answer("1")
    s.answer("2")
    s.skip()  # the third entry
    s.skip()  # the fourth
    s.answer("3")  # the fifth
    s.go(0)
    s.skip()  # an answered entry skipped again stays answered
    assert s.answered() == 3

    again = session(store, seed=9)
    assert again.session_id != s.session_id
    assert again.answered() == 3
    expected = [order[0], order[1], order[4], *order[5:], order[2], order[3]]
    # (the answered first entry, skipped last, goes to the end as well: its last row is a skip)
    expected.remove(order[0])
    expected.append(order[0])
    assert ids(again) == expected
    assert again.position == ids(again).index(order[5])
    assert again.answer_of(again.entry) is None
    # undo takes back the earlier session's last answer and goes back to it
    row = again.undo()
    assert row.input_id == order[4] and row.supersedes is not None and row.session == again.session_id
    assert again.input_id(again.entry) == order[4] and again.answer_of(again.entry) is None
    assert again.answered() == 2
    assert again.redo().answer == "3"
    # another rater's session is unaffected
    other = session(store, rater="b", seed=9)
    assert other.answered() == 0 and other.position == 0 and other.undo() is None


def test_a_finished_session_is_done(store):
    s = session(store)
    for _ in range(len(s.queue)):
        s.answer("0")
    assert s.done and s.answered() == len(ITEMS)
    assert 0 <= s.position < len(s.queue)
    s.next_unlabelled()
    assert 0 <= s.position < len(s.queue)
    resumed = session(store)
    assert resumed.done and 0 <= resumed.position < len(resumed.queue)


def test_attention_checks_in_a_session(store):
    checks = CheckImages(np.full((2, 1, 2, 2), 7, np.float32), np.array([4, 8]), np.array(["test:17", "test:3"]))
    s = session(store, checks=checks, check_every=5)
    places = [p for p, e in enumerate(s.queue, 1) if e.kind == "check"]
    assert places == [5, 10]
    assert s.settings()["checks"] == 2
    rows = []
    while not s.done:
        entry = s.entry
        rows.append(s.answer("4" if entry.kind == "check" else "1"))
        if entry.kind == "check":
            assert np.array_equal(s.image(entry), checks.images[entry.index])
    by_id = {r.input_id: r for r in rows}
    assert by_id["test:17"].check_class == 4 and by_id["test:3"].check_class == 8
    assert all(r.check_class is None for r in rows if not r.input_id.startswith("test:"))
    result = {c.rater: c for c in Study(NAME, ITEMS, store.current(NAME)).checks()}["a"]
    assert (result.answered, result.failed, result.flagged) == (2, 1, True)


def test_resolved_disagreement(store):
    items = [StudyItem(f"x{i}", "1", i, "g", predicted="1",
                       proxies={"SelfOracle": True, "DAIV": i % 2 == 0}) for i in range(4)]
    s = session(store, items=items)
    assert s.resolved_disagreement() == 0.0
    while s.resolved_disagreement() == 0.0:
        s.answer("1")
    assert s.resolved_disagreement() == 0.5  # one of the two disputed items
    calm = [StudyItem("y", "1", 0, "g")]
    assert session(store, rater="b", items=calm).resolved_disagreement() is None


# ---------------------------------------------------------------- what a study adds up to


def rows_for(store, answers: dict[str, dict[str, str]], testset=NAME, check_class=None):
    for input_id, given in answers.items():
        for rater, answer in given.items():
            store.answer(testset, input_id, rater, answer, session="s", check_class=check_class)


HAND = [
    # expected, predicted, answers of a and b, group
    ("0", "1", {"a": "0", "b": "0"}, ("g1", "small")),  # valid, preserving, a misbehaviour that counts
    ("1", "1", {"a": "1", "b": "1"}, ("g1", "small")),  # valid, preserving, the model is right
    ("2", "3", {"a": INVALID, "b": INVALID}, ("g1", "large")),  # invalid
    ("3", "4", {"a": "3", "b": "5"}, ("g1", "large")),  # valid, raters split on the label
    ("4", "0", {"a": "4"}, ("g2", "small")),  # pending
    ("5", "6", {"a": INVALID, "b": "5"}, ("g2", "small")),  # validity N/A
    ("6", "2", {"a": "6", "b": "6"}, ("g2", "small")),  # valid, preserving, misbehaviour
]


def hand_study(store) -> Study:
    items = [StudyItem(f"h{k}", expected, 20 - k, group[0], "vae", group[1], predicted=predicted)
             for k, (expected, predicted, _, group) in enumerate(HAND)]
    rows_for(store, {f"h{k}": given for k, (_, _, given, _) in enumerate(HAND)})
    rows_for(store, {"h0": {"a": "9"}}, testset="other")  # another test set's answers stay out
    return Study(NAME, items, store.current(NAME))


def test_rates_by_hand(store):
    study = hand_study(store)
    assert study.raters == ["a", "b"]
    assert study.rates() == {"items": 7, "decided": 6, "valid": 4, "valid_rate": 4 / 6, "valid_preserving": 3,
                             "preservation_rate": 3 / 6, "valid_misbehaviours": 2}
    assert study.groups() == [("g1", "small"), ("g1", "large"), ("g2", "small")]
    assert study.rates(("g1", "small")) == {"items": 2, "decided": 2, "valid": 2, "valid_rate": 1.0,
                                            "valid_preserving": 2, "preservation_rate": 1.0,
                                            "valid_misbehaviours": 1}
    assert study.rates(("g1", "large"))["valid_preserving"] == 0
    assert study.rates(("g2", "small"))["decided"] == 2
    assert study.rates(("nowhere", ""))["valid_rate"] is None
    assert [c.validity for c in study.consensuses()] == [YES, YES, NO, YES, "pending", "N/A", YES]
    agreement = study.agreement()
    assert set(agreement) == {"validity", "label match", "answer"}
    assert [a.measure for a in agreement["answer"]] == ["Cohen's κ", "Krippendorff's α"]


def test_human_subsets_by_hand(store):
    study = hand_study(store)
    # positions are 20 − k, so test-set order is the reverse of the items' order
    assert study.human_subset("valid") == [14, 17, 19, 20]
    assert study.human_subset("valid-preserving") == [14, 19, 20]
    assert study.human_subset("valid-misbehaviours") == [14, 20]
    with pytest.raises(ValueError):
        study.human_subset("valid-ish")


def test_rates_need_min_raters(store):
    study = hand_study(store)
    lenient = Study(NAME, study.items, store.current(NAME), min_raters=1)
    assert lenient.rates()["decided"] == 7 and lenient.human_subset("valid") == [14, 16, 17, 19, 20]
    strict = Study(NAME, study.items, store.current(NAME), min_raters=3)
    assert strict.rates()["decided"] == 0 and strict.human_subset("valid") == []


def test_from_answers_matches_the_store(store):
    study = hand_study(store)
    again = Study.from_answers(NAME, study.items, ["a", "b"],
                               {f"h{k}": given for k, (_, _, given, _) in enumerate(HAND)})
    assert again.consensuses() == study.consensuses()
    assert again.rates() == study.rates()


def proxy_items(n: int, seed: int) -> tuple[list[StudyItem], dict]:
    rng = np.random.default_rng(seed)
    items, answers = [], {}
    for i in range(n):
        expected = str(int(rng.integers(3)))
        proxies = {}
        if rng.random() < 0.9:
            proxies["SelfOracle"] = bool(rng.random() < 0.7)
        if rng.random() < 0.9:
            proxies["DAIV"] = bool(rng.random() < 0.6)
        if rng.random() < 0.9:
            proxies["oracle classifier"] = ["preserved", "changed", "uncertain"][int(rng.choice(3, p=[.5, .3, .2]))]
        items.append(StudyItem(f"p{i}", expected, i, f"g{i % 2}", "dm", "e", predicted=str(int(rng.integers(3))),
                               proxies=proxies))
        raters = ["a", "b"] if rng.random() < 0.9 else ["a"]
        choices = [expected, expected, expected, str((int(expected) + 1) % 3), INVALID]
        answers[f"p{i}"] = {r: choices[int(rng.integers(len(choices)))] for r in raters}
    return items, answers


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_proxies_against_the_human_consensus_against_a_direct_loop(store, seed):
    items, answers = proxy_items(150, seed)
    rows_for(store, answers)
    study = Study(NAME, items, store.current(NAME))
    found = {p["proxy"]: p for p in study.proxy_comparison()}
    assert set(found) == {"SelfOracle", "DAIV", "oracle classifier"}
    for name, judges in (("SelfOracle", "validity"), ("DAIV", "validity"), ("oracle classifier", "label")):
        proxy, human, uncertain = [], [], 0
        for item in items:
            if name not in item.proxies:
                continue
            c = study.consensus(item)
            verdict = c.validity if judges == "validity" else c.preservation
            if verdict not in ("yes", "no"):
                continue
            said = item.proxies[name]
            if judges != "validity":
                if said == "uncertain":
                    uncertain += 1
                    continue
                said = said == "preserved"
            proxy.append("yes" if said else "no")
            human.append(verdict)
        p = found[name]
        assert p["items"] == len(proxy) > 20 and p["uncertain"] == uncertain
        assert p["judges"] == ("validity" if judges == "validity" else "label preservation")
        for a, b in itertools.product(("yes", "no"), repeat=2):
            assert p["confusion"][f"{a}/{b}"] == sum(1 for x, y in zip(proxy, human) if (x, y) == (a, b))
        assert p["accuracy"] == pytest.approx(np.mean(np.array(proxy) == np.array(human)))
        assert p["kappa"].value == pytest.approx(cohen_kappa_score(proxy, human), abs=1e-12)
        assert p["kappa"].items == len(proxy)
    # per group too
    for group in study.groups():
        for p in study.proxy_comparison(group):
            assert p["items"] <= found[p["proxy"]]["items"]


def test_a_proxy_on_no_decided_item_is_left_out(store):
    items = [StudyItem("x", "1", 0, proxies={"SelfOracle": True})]
    study = Study.from_answers(NAME, items, ["a", "b"], {"x": {"a": "1"}})  # pending
    assert study.proxy_comparison() == []
    study = Study.from_answers(NAME, items, ["a", "b"], {"x": {"a": "1", "b": "1"}})
    (p,) = study.proxy_comparison()
    assert p["confusion"] == {"yes/yes": 1, "yes/no": 0, "no/yes": 0, "no/no": 0} and p["accuracy"] == 1.0
    assert p["kappa"].value is None  # everyone said yes: κ is undefined


def test_attention_checks_are_kept_out_of_the_study_and_flag_wrong_answers(tmp_path):
    with LabelStore(tmp_path / FILE) as store:
        rows_for(store, {"h0": {"a": "0", "b": "0", "c": "0"}})
        for rater, answer in (("a", "4"), ("b", "4"), ("c", "4")):
            store.answer(NAME, "test:1", rater, answer, session="s", check_class=4)
        for rater, answer in (("a", "8"), ("b", "3")):
            store.answer(NAME, "test:2", rater, answer, session="s", check_class=8)
        # c answered test:2 wrongly, then took it back: an undone check counts for nothing
        wrong = store.answer(NAME, "test:2", "c", "1", session="s", check_class=8)
        store.undo(wrong, session="s")
        # a corrected answer counts as corrected
        store.answer(NAME, "test:2", "b", "8", session="s", check_class=8)
        store.answer(NAME, "test:1", "b", INVALID, session="s", check_class=4)
        rows = store.current(NAME)
    items = [StudyItem("h0", "0", 0), StudyItem("h1", "1", 1)]
    study = Study(NAME, items, rows)
    assert study.raters == ["a", "b", "c"]
    assert set(study.answers) == {"h0"}  # checks are no study item
    checks = {c.rater: (c.answered, c.failed, c.flagged) for c in study.checks()}
    assert checks == {"a": (2, 0, False), "b": (2, 1, True), "c": (1, 0, False)}
    assert study.rates()["items"] == 2

"""One rater labelling one study: their queue, where they are in it, and every key's effect on the store.

Every answer, skip, undo and redo is committed to the label store before the call returns. A
session started again for the same rater and study rebuilds the same queue (the rater's seed), puts
the items they skipped last at its end, and continues at the first entry they have not answered.
Undo takes back the rater's last answer (also one given in an earlier session) and goes back to it;
redo gives it again; a new answer clears what could be redone. Time per item runs from the moment an
entry is shown to its answer.
"""

from __future__ import annotations

import hashlib
import time
import uuid
from dataclasses import dataclass

import numpy as np

from workbench.core.errors import WorkbenchError
from workbench.core.labeling.answers import AnswerOptions
from workbench.core.labeling.label_store import AnswerRow, LabelStore
from workbench.core.labeling.queue import CHECK_EVERY, Entry, expected_disagreement, item_order, rater_seed, \
    with_checks
from workbench.core.labeling.study import StudyItem


@dataclass
class CheckImages:
    """Real test images of known class shown as attention checks."""

    images: np.ndarray
    labels: np.ndarray
    ids: np.ndarray

    def __len__(self) -> int:
        return len(self.labels)


def no_checks(shape: tuple = (1, 28, 28)) -> CheckImages:
    return CheckImages(np.zeros((0, *shape), np.float32), np.zeros(0, np.int64), np.zeros(0, str))


class LabellingSession:
    """A rater's pass through a study (see the module docstring)."""

    def __init__(self, store: LabelStore, name: str, items: list[StudyItem], images, options: AnswerOptions,
                 rater: str, checks: CheckImages | None = None, *, mode: str = "blind", seed: int = 0,
                 order: str = "random", check_every: int = CHECK_EVERY, clock=time.monotonic):
        if not rater.strip():
            raise WorkbenchError("No rater name was given.", "Enter your name or initials before labelling.")
        if not items:
            raise WorkbenchError(f"{name!r} has no inputs to label.",
                                 "A generated set offers its misbehaviour-inducing inputs; generate some first.")
        self.store, self.name, self.items, self.images, self.options = store, name, items, images, options
        self.rater, self.mode, self.order, self.check_every = rater.strip(), mode, order, check_every
        self.checks = checks if checks is not None else no_checks(np.asarray(images[0]).shape)
        self.study_seed = int(seed)
        self.seed = rater_seed(seed, self.rater)
        self.session_id = uuid.uuid4().hex
        self._clock = clock
        order_ = item_order(items, self.seed, order)
        self.queue: list[Entry] = with_checks(order_, len(self.checks), check_every)
        self.disagreement = expected_disagreement(items)
        self._mine: dict[str, str] = {r.input_id: r.answer for r in store.current(name, self.rater)}
        self._undo: list[AnswerRow] = [r for r in store.current(name, self.rater) if r.action in ("answer", "redo")]
        self._redo: list[AnswerRow] = []
        self._requeue_skipped()
        self.position = self._first_unanswered(0)
        self._shown_at = clock()

    # --- what is where ------------------------------------------------------------------------------------

    def input_id(self, entry: Entry) -> str:
        return str(self.checks.ids[entry.index]) if entry.kind == "check" else self.items[entry.index].input_id

    def image(self, entry: Entry) -> np.ndarray:
        if entry.kind == "check":
            return np.asarray(self.checks.images[entry.index])
        return np.asarray(self.images[self.items[entry.index].index])

    def check_class(self, entry: Entry) -> int | None:
        return int(self.checks.labels[entry.index]) if entry.kind == "check" else None

    def opaque_id(self, entry: Entry) -> str:
        """What blind mode calls an entry: a digest that says nothing about the input."""
        return hashlib.sha1(f"{self.name}\0{self.input_id(entry)}".encode()).hexdigest()[:8]

    @property
    def entry(self) -> Entry:
        return self.queue[self.position]

    def answer_of(self, entry: Entry) -> str | None:
        return self._mine.get(self.input_id(entry))

    def answered(self) -> int:
        return sum(self.answer_of(e) is not None for e in self.queue)

    @property
    def done(self) -> bool:
        return self.answered() == len(self.queue)

    def seconds_on_entry(self) -> float:
        """How long the current entry has been shown."""
        return max(0.0, self._clock() - self._shown_at)

    def mean_seconds(self) -> float | None:
        """The rater's mean time per answer in this session (None before the first)."""
        times = [r.seconds for r in self._undo if r.session == self.session_id and r.seconds is not None]
        return sum(times) / len(times) if times else None

    def resolved_disagreement(self) -> float | None:
        """The share of the items' expected disagreement that this rater's answers cover (None when the
        judges agree on every item, or no proxies were run)."""
        total = float(self.disagreement.sum())
        if total == 0:
            return None
        answered = [i for i, item in enumerate(self.items) if item.input_id in self._mine]
        return float(self.disagreement[answered].sum()) / total

    def upcoming(self) -> Entry:
        """The entry an answer to the current one advances to (shown before the answer is committed)."""
        return self.queue[self._first_unanswered(self.position + 1)]

    def _first_unanswered(self, start: int) -> int:
        n = len(self.queue)
        for step in range(n):
            position = (start + step) % n
            if self.answer_of(self.queue[position]) is None:
                return position
        return min(start, n - 1)

    def _requeue_skipped(self) -> None:
        """Entries whose last row is a skip go to the end, in the order they were skipped."""
        last: dict[str, AnswerRow] = {}
        for row in self.store.history(self.name, self.rater):
            last[row.input_id] = row
        skipped = sorted((r.id, r.input_id) for r in last.values() if r.action == "skip")
        for _, input_id in skipped:
            where = next((i for i, e in enumerate(self.queue) if self.input_id(e) == input_id), None)
            if where is not None:
                self.queue.append(self.queue.pop(where))

    # --- moving ------------------------------------------------------------------------------------------

    def go(self, position: int) -> None:
        self.position = max(0, min(position, len(self.queue) - 1))
        self._shown_at = self._clock()

    def move(self, step: int) -> None:
        """Move without answering (← / →)."""
        self.go(self.position + step)

    def next_unlabelled(self) -> None:
        self.go(self._first_unanswered(self.position + 1))

    # --- answering ---------------------------------------------------------------------------------------

    def answer(self, answer: str, advance: bool = True) -> AnswerRow:
        """Commit the rater's answer to the current entry, then (with `advance`) go to the next unanswered."""
        if answer not in dict(self.options.choices()):
            raise WorkbenchError(f"{answer!r} is not one of this study's answers.",
                                 f"Answer one of: {', '.join(t for _, t in self.options.choices())}.")
        entry = self.entry
        seconds = max(0.0, self._clock() - self._shown_at)
        row = self.store.answer(self.name, self.input_id(entry), self.rater, answer, session=self.session_id,
                                mode=self.mode, seconds=round(seconds, 3), check_class=self.check_class(entry))
        self._mine[row.input_id] = answer
        self._undo.append(row)
        self._redo.clear()
        if advance:
            self.go(self._first_unanswered(self.position + 1))
        else:
            self._shown_at = self._clock()
        return row

    def skip(self) -> AnswerRow:
        """Pass over the current entry: it moves to the end of the queue, and the next entry shows."""
        entry = self.entry
        row = self.store.skip(self.name, self.input_id(entry), self.rater, session=self.session_id, mode=self.mode,
                              check_class=self.check_class(entry))
        self.queue.append(self.queue.pop(self.position))
        self.go(self._first_unanswered(self.position if self.position < len(self.queue) - 1 else 0))
        return row

    def undo(self) -> AnswerRow | None:
        """Take back the last answer and go back to its entry (None when there is nothing to undo)."""
        if not self._undo:
            return None
        undone = self._undo.pop()
        row = self.store.undo(undone, session=self.session_id)
        self._set_mine(row)
        self._redo.append(row)
        self._go_to_input(row.input_id)
        return row

    def redo(self) -> AnswerRow | None:
        """Give the undone answer again and go on (None when nothing was undone)."""
        if not self._redo:
            return None
        row = self.store.redo(self._redo.pop(), session=self.session_id)
        self._set_mine(row)
        self._undo.append(row)
        self._go_to_input(row.input_id)
        self.go(self._first_unanswered(self.position + 1))
        return row

    def _set_mine(self, row: AnswerRow) -> None:
        if row.answer is None:
            self._mine.pop(row.input_id, None)
        else:
            self._mine[row.input_id] = row.answer

    def _go_to_input(self, input_id: str) -> None:
        where = next((i for i, e in enumerate(self.queue) if self.input_id(e) == input_id), self.position)
        self.go(where)

    def settings(self) -> dict:
        """What this rater's queue was made with (for the study's record)."""
        return {"rater": self.rater, "order_seed": self.seed, "study_seed": self.study_seed, "order": self.order,
                "check_every": self.check_every, "checks": len(self.checks), "mode": self.mode}

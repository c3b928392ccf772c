"""The Labelling view driven with the keyboard alone: answers, skip, undo, redo, moving, an attention check,
resuming in a new window, the key map, blind and review mode, and export and import; every step is checked
against the rows of the project's label store."""

from __future__ import annotations

import csv

import numpy as np
import pytest
from gui_helpers import flush_events
from PySide6.QtCore import Qt

from workbench.core.labeling.label_store import LabelStore, store_path
from workbench.core.testsets import save_testset

pytestmark = pytest.mark.gui

TIMEOUT_MS = 30_000
N = 12  # inputs of the set; the model misbehaves on the first 10 of them


def make_generated_set(window, name: str = "generated-test") -> list[str]:
    """A generated set in the project (real test images), with proxy verdicts; returns the generators."""
    data = window.session.datasets["fashion-mnist"].split("test")
    labels = data.labels[:N].astype(np.int64)
    predicted = labels.copy()
    predicted[:10] = (labels[:10] + 1) % 10  # misbehaviours
    generators = np.array(["vae-fashion-mnist", "gan-fashion-mnist"] * (N // 2))
    arrays = {"x": data.numpy()[:N].astype(np.float32), "y": labels, "generator": generators,
              "kind": np.array(["vae", "gan"] * (N // 2)), "extent": np.array(["high"] * N),
              "generations": np.arange(N, dtype=np.int64) + 5, "predicted": predicted,
              "proxy_selforacle_invalid": np.arange(N) % 3 == 0, "proxy_daiv_invalid": np.arange(N) % 4 == 0,
              "proxy_oracle_verdict": np.array(["preserved", "changed", "uncertain"] * (N // 3))}
    save_testset(window.session.project, name, arrays, role="generated", dataset="fashion-mnist")
    window.session.project_changed.emit()
    return sorted(set(generators.tolist()))


def start(qtbot, window, rater: str = "ann", name: str = "generated-test"):
    qtbot.keyClick(window, Qt.Key.Key_9, Qt.KeyboardModifier.ControlModifier)
    view = window.views["labelling"]
    assert window.tabs.currentWidget() is view
    view.choose(name)
    view.rater_edit.clear()
    qtbot.keyClicks(view.rater_edit, rater)
    qtbot.keyClick(view.rater_edit, Qt.Key.Key_Return)  # Enter starts
    qtbot.waitUntil(lambda: view.labelling is not None and view.labelling.rater == rater
                    or "Cannot" in view.status.text(), timeout=TIMEOUT_MS)
    assert view.labelling is not None, view.status.text()
    return view


def rows(window, **match):
    with LabelStore(store_path(window.session.project), read_only=True) as store:
        return [r for r in store.history("generated-test") if all(getattr(r, k) == v for k, v in match.items())]


def key(qtbot, view, k, modifier=Qt.KeyboardModifier.NoModifier):
    qtbot.keyClick(view.canvas, k, modifier)


def test_labelling_with_the_keyboard_alone(qtbot, settled_window):
    window = settled_window
    generators = make_generated_set(window)
    view = start(qtbot, window)
    s = view.labelling
    assert len(s.items) == 10  # the misbehaviours only
    assert len(s.queue) == 11 and [e.kind for e in s.queue].count("check") == 1  # 1 in 10
    assert s.queue[9].kind == "check"
    assert view.canvas.hasFocus()
    # Blind: no generator, prediction or proxy is shown, and the id is opaque.
    shown = view.item_label.text()
    assert all(g not in shown for g in generators) and "proxy" not in shown and "item " in shown
    assert not view.tabs.isTabEnabled(1)

    # An answer is one committed row, and the next image is on screen before the key press returns.
    first = s.entry
    key(qtbot, view, Qt.Key.Key_3)
    assert view.canvas.shown_key == view.key_of(s.entry) != view.key_of(first)
    answered = rows(window, action="answer")
    assert [(r.input_id, r.answer, r.rater, r.mode) for r in answered] == [(s.input_id(first), "3", "ann", "blind")]
    assert answered[0].seconds is not None and answered[0].seconds >= 0
    # X: invalid.
    second = s.entry
    key(qtbot, view, Qt.Key.Key_X)
    assert rows(window, action="answer")[-1].answer == "invalid"
    # S: skipped, to the end of the queue.
    skipped = s.entry
    key(qtbot, view, Qt.Key.Key_S)
    assert rows(window)[-1].action == "skip" and s.queue[-1] == skipped and s.entry != skipped
    # Ctrl+Z takes back the last answer (the invalid one) and goes back to it; Ctrl+Shift+Z gives it again.
    key(qtbot, view, Qt.Key.Key_Z, Qt.KeyboardModifier.ControlModifier)
    assert s.entry == second and s.answer_of(second) is None
    undo = rows(window)[-1]
    assert undo.action == "undo" and undo.answer is None and undo.supersedes == rows(window, action="answer")[-1].id
    key(qtbot, view, Qt.Key.Key_Z, Qt.KeyboardModifier.ControlModifier | Qt.KeyboardModifier.ShiftModifier)
    assert s.answer_of(second) == "invalid" and rows(window)[-1].action == "redo"
    # ← and → move without answering; N goes to the next unlabelled.
    here = s.position
    key(qtbot, view, Qt.Key.Key_Left)
    assert s.position == here - 1
    key(qtbot, view, Qt.Key.Key_Right)
    key(qtbot, view, Qt.Key.Key_Right)
    assert s.position == here + 1
    before = len(rows(window))
    key(qtbot, view, Qt.Key.Key_N)
    assert len(rows(window)) == before and s.answer_of(s.entry) is None
    # The attention check: answered with its known class, stored as a check.
    s.go(next(i for i, e in enumerate(s.queue) if e.kind == "check"))
    view.show_entry()
    check = s.entry
    key(qtbot, view, str(s.check_class(check)))
    stored = rows(window, action="answer")[-1]
    assert stored.check_class == s.check_class(check) and stored.answer == str(s.check_class(check))
    assert stored.input_id.startswith("check:fashion-mnist:test#")
    # Keys answer every remaining item; the status says when all is done.
    while not s.done:
        entry = s.entry
        key(qtbot, view, str(s.check_class(entry)) if entry.kind == "check" else "D")
    assert "all done" in view.progress_label.text()
    current = {r.input_id: r.answer for r in LabelStore(store_path(window.session.project), True).current(
        "generated-test", "ann")}
    assert len(current) == 11 and current[s.input_id(first)] == "3" and current[s.input_id(second)] == "invalid"


def test_resuming_in_a_new_window_continues_where_the_rater_stopped(qtbot, open_window, settle):
    window = open_window()
    settle(window)
    make_generated_set(window)
    view = start(qtbot, window)
    for k in (Qt.Key.Key_1, Qt.Key.Key_2, Qt.Key.Key_S, Qt.Key.Key_4):
        key(qtbot, view, k)
    queue = [view.labelling.input_id(e) for e in view.labelling.queue]
    position = view.labelling.position
    window.close()
    again = open_window(project=type(window.session.project).open(window.session.project.folder))
    settle(again)
    qtbot.keyClick(again, Qt.Key.Key_9, Qt.KeyboardModifier.ControlModifier)
    resumed = again.views["labelling"]
    qtbot.waitUntil(lambda: resumed.labelling is not None, timeout=TIMEOUT_MS)  # the rater's study, at once
    s = resumed.labelling
    assert s.rater == "ann" and s.answered() == 3
    assert [s.input_id(e) for e in s.queue] == queue  # the same order, the skipped item at the end
    assert s.position == position
    # Undo after resuming takes back the last answer of the earlier session.
    key(qtbot, resumed, Qt.Key.Key_Z, Qt.KeyboardModifier.ControlModifier)
    assert s.answered() == 2 and s.input_id(s.entry) == queue[position - 1]


def test_a_resume_never_overrides_a_study_the_rater_started_meanwhile(qtbot, open_window, settle):
    """Where a rater stopped is read in a job; when it answers after the rater has opened another set by
    hand, the open study stays (opening the rater's last set with nothing open: the test above)."""
    window = open_window()
    settle(window)
    make_generated_set(window)
    make_generated_set(window, "generated-other")
    key(qtbot, start(qtbot, window), Qt.Key.Key_1)  # ann answered generated-test last
    window.close()
    again = open_window(project=type(window.session.project).open(window.session.project.folder))
    settle(again)
    view = start(qtbot, again, name="generated-other")  # opening the view starts the resume's job too
    qtbot.waitUntil(again.runner.is_idle, timeout=TIMEOUT_MS)
    assert view.labelling.name == "generated-other"
    view._resumed("generated-test")  # the resume's answer, late
    flush_events()  # what the answer led to has happened (a job it started is waited for next)
    qtbot.waitUntil(again.runner.is_idle, timeout=TIMEOUT_MS)  # (a study it opened would be open now)
    assert view.labelling.name == "generated-other" and view.labelling.answered() == 0


def test_the_key_map_is_configurable_and_conflicts_are_refused(qtbot, settled_window):
    window = settled_window
    make_generated_set(window)
    view = start(qtbot, window)
    view.apply_keymap({"invalid": "Q", "skip": "X"})
    assert "Q" in view.keys_label.text() and "Q   Not a clothing item" in view.answer_buttons["invalid"].text()
    key(qtbot, view, Qt.Key.Key_Q)
    assert rows(window)[-1].answer == "invalid"
    key(qtbot, view, Qt.Key.Key_X)
    assert rows(window)[-1].action == "skip"
    view.apply_keymap({"invalid": "S"})  # S already skips
    assert "bound to both" in view.status.text()
    key(qtbot, view, Qt.Key.Key_Q)  # the old map stays
    assert rows(window)[-1].answer == "invalid"
    with LabelStore(store_path(window.session.project), True) as store:
        assert store.study("generated-test")["keymap"] == {"invalid": "Q", "skip": "X"}  # shared by the raters


def test_review_mode_shows_the_consensus_agreement_and_proxies(qtbot, settled_window, tmp_path):
    window = settled_window
    generators = make_generated_set(window)
    view = start(qtbot, window, rater="bob")
    while not view.labelling.done:
        entry = view.labelling.entry
        key(qtbot, view, str(view.labelling.check_class(entry)) if entry.kind == "check" else "X")
    view = start(qtbot, window, rater="ann")
    s = view.labelling
    while not s.done:
        entry = s.entry
        expected = str(s.check_class(entry)) if entry.kind == "check" else s.items[entry.index].expected
        key(qtbot, view, expected)
    view.mode_box.setCurrentIndex(view.mode_box.findData("review"))
    qtbot.waitUntil(lambda: view.summary is not None and view.summary["raters"] == 2, timeout=TIMEOUT_MS)
    assert view.tabs.isTabEnabled(1)
    shown = view.item_label.text()
    assert any(g in shown for g in generators) and "proxy" in shown and "consensus" in shown
    # bob says invalid everywhere, ann valid: validity N/A on every item, none valid.
    assert view.rates_table.item(0, 0).text() == "all" and view.rates_table.item(0, 4).text().startswith("0 ")
    assert view.proxy_table.rowCount() == 0  # no item has a yes/no validity consensus
    assert "Cohen's κ" in view.agreement_label.text() and "Krippendorff's α" in view.agreement_label.text()
    assert "ann 1/1 passed" in view.checks_label.text()
    # Export, then import the file: the recomputed consensus equals the file's.
    path = tmp_path / "labels.csv"
    view.export_to(str(path), "csv")
    qtbot.waitUntil(path.exists, timeout=TIMEOUT_MS)
    with open(path, newline="") as handle:
        table = list(csv.DictReader(handle))
    assert len(table) == 10 and {r["Validity?"] for r in table} == {"N/A"}
    assert {r["ASS 1"] for r in table} == {"Not a clothing item"}  # bob answered first
    view.import_from(str(path))
    qtbot.waitUntil(lambda: view.imported is not None, timeout=TIMEOUT_MS)
    assert "equal the recomputed consensus" in view.study_title.text() and view.tabs.currentIndex() == 1


def test_label_from_the_project_panel_and_measure_a_validated_subset(qtbot, settled_window):
    window = settled_window
    make_generated_set(window)
    panel = window.project_panel
    item = next(i for i in panel.items("testset") if i.payload["name"] == "generated-test")
    panel.menu_action(item, "Label…").trigger()
    view = window.views["labelling"]
    assert window.tabs.currentWidget() is view and view.testset_box.currentData() == "generated-test"
    view = start(qtbot, window, rater="ann")
    while not view.labelling.done:
        entry = view.labelling.entry
        key(qtbot, view, str(view.labelling.check_class(entry)) if entry.kind == "check" else "D")
    # Once labelled, its human-validated subsets are test sets of the project panel.
    qtbot.waitUntil(lambda: any(i.payload["name"] == "generated-test[valid]" for i in panel.items("testset")),
                    timeout=TIMEOUT_MS)
    view.subset_box.setCurrentIndex(view.subset_box.findData("valid"))
    qtbot.mouseClick(view.coverage_button, Qt.MouseButton.LeftButton)
    coverage = window.views["coverage"]
    assert window.tabs.currentWidget() is coverage
    qtbot.waitUntil(lambda: coverage.set_keys is not None and "stored:generated-test[valid]" in coverage.set_keys,
                    timeout=TIMEOUT_MS)


def test_a_damaged_label_store_is_reported_and_left_untouched(qtbot, settled_window):
    window = settled_window
    make_generated_set(window)
    path = store_path(window.session.project)
    path.write_bytes(b"these are not answers " * 64)
    before = path.read_bytes()
    qtbot.keyClick(window, Qt.Key.Key_9, Qt.KeyboardModifier.ControlModifier)
    view = window.views["labelling"]
    view.choose("generated-test")
    view.rater_edit.setText("ann")
    qtbot.keyClick(view.rater_edit, Qt.Key.Key_Return)
    qtbot.waitUntil(lambda: "damaged" in view.status.text(), timeout=TIMEOUT_MS)
    assert view.labelling is None and "left untouched" in view.status.text()
    assert path.read_bytes() == before and view.start_button.isEnabled()
    # The rest of the window works on.
    qtbot.keyClick(window, Qt.Key.Key_8, Qt.KeyboardModifier.ControlModifier)
    assert window.tabs.currentWidget() is window.views["generation"]

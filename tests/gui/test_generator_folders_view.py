"""The Generators view on hand-written generator folders: a card whose class names do not match its
class count is listed with the file, the field and what to do (clicking it says so again, and the rest
still work); a card without a hash loads and its warning gives the hash computed now."""

from __future__ import annotations

import json

import pytest
from generator_cards import edited, tiny_folder
from PySide6.QtCore import Qt

pytestmark = pytest.mark.gui

TIMEOUT_MS = 60_000


def tile(view, name: str):
    return next(t for t in view.tiles if t.entry["name"] == name)


def test_bad_and_unhashed_generator_folders(qtbot, settled_window, tmp_path, error_dialogs):
    window = settled_window
    root = window.session.project.folder / "generators"
    source = tiny_folder(tmp_path, "gan")
    bad = edited(source, root / "three-names", lambda d: d["card"].update(class_names=["a", "b", "c"]))
    unhashed = edited(source, root / "no-hash", lambda d: d.pop("weights_sha256"))
    digest = json.loads((source / "generator.json").read_text())["weights_sha256"]
    qtbot.keyClick(window, Qt.Key.Key_7, Qt.KeyboardModifier.ControlModifier)
    view = window.views["generators"]
    view.refresh()

    listed = tile(view, "three-names")
    assert listed.entry["problem"] == (f"{bad / 'generator.json'}: card.class_names lists 3 names, but num_classes "
                                       "is 10.")
    qtbot.waitUntil(lambda: listed.isVisible() and listed.width() > 0, timeout=30_000)
    view.overview.parentWidget().parentWidget().ensureWidgetVisible(listed)  # its scroll area
    view.grab().save(str(tmp_path / "generators-overview.png"))
    qtbot.mouseClick(listed, Qt.MouseButton.LeftButton)
    assert view.detail.empty.title.text() == "three-names cannot be read"
    assert "card.class_names lists 3 names" in view.detail.empty.text.text()
    assert "List one name per class" in view.detail.empty.text.text()  # what to do, beside what is wrong
    said = view.detail.empty.text
    assert said.height() >= said.heightForWidth(said.width())  # the long path wraps, the message is not cut
    view.grab().save(str(tmp_path / "generators-bad-card.png"))

    assert "records no weights_sha256" in tile(view, "no-hash").entry["warning"]
    qtbot.mouseClick(tile(view, "no-hash"), Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: view.generator is not None and window.runner.is_idle(), timeout=TIMEOUT_MS)
    assert view.generator.folder == unhashed
    assert view.warning.isVisibleTo(view) and "records no weights_sha256" in view.warning.text()
    assert digest in view.warning.text()
    assert "10 classes" in view.card_text.text()
    view.grab().save(str(tmp_path / "generators-no-hash.png"))
    assert error_dialogs == []  # said in the view, not in a dialog


def test_a_bad_folder_opened_by_path_says_why_in_the_view(qtbot, settled_window, tmp_path, error_dialogs):
    """Open folder… reads a folder outside the project: its refusal shows where its card would."""
    window = settled_window
    folder = edited(tiny_folder(tmp_path, "gan"), tmp_path / "huge",
                    lambda d: (d.update(num_classes=100_000), d["card"].pop("class_names")))
    window.show_view("generators")
    view = window.views["generators"]
    view.choose({"name": "huge", "path": str(folder), "bundled": False})
    qtbot.waitUntil(lambda: view.detail.empty.title.text() == "huge cannot be read", timeout=TIMEOUT_MS)
    text = view.detail.empty.text.text()
    assert "num_classes is 100000, but the weights were trained for 10 classes" in text and "Set num_classes to 10" in text
    assert error_dialogs == []

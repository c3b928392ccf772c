"""Every export asks where through `save_as`: the filter's suffix is added to a bare name, a cancelled dialog
writes nothing, and a file that cannot be written is said in the error dialog, with nothing left behind."""

from __future__ import annotations

import pytest
from PySide6.QtWidgets import QFileDialog, QWidget

from workbench.gui.widgets.error_dialog import ErrorDialog
from workbench.gui.widgets.export import export_csv, save_as

pytestmark = pytest.mark.gui

ROWS = (lambda: (["a", "b"], [[1, 2], [3, 4]]))


@pytest.fixture
def parent(qtbot):
    widget = QWidget()
    qtbot.addWidget(widget)
    return widget


def answer(monkeypatch, path) -> list:
    asked = []
    monkeypatch.setattr(QFileDialog, "getSaveFileName",
                        lambda *args, **kwargs: asked.append(args) or (str(path) if path else "", ""))
    return asked


def test_the_suffix_is_added_and_the_file_written(parent, monkeypatch, tmp_path):
    asked = answer(monkeypatch, tmp_path / "table")
    written = save_as(parent, "Export", "proposed.csv", "CSV table (*.csv)", lambda p: export_csv(ROWS, p))
    assert written == str(tmp_path / "table.csv")
    assert (tmp_path / "table.csv").read_text().splitlines() == ["a,b", "1,2", "3,4"]
    assert asked[0][1:] == ("Export", "proposed.csv", "CSV table (*.csv)")
    assert save_as(parent, "Export", "x.csv", "CSV table (*.csv)", lambda p: export_csv(ROWS, p)) \
        == str(tmp_path / "table.csv")  # a name that has the suffix keeps it, once


def test_a_cancelled_dialog_writes_nothing(parent, monkeypatch, tmp_path):
    answer(monkeypatch, None)
    calls = []
    assert save_as(parent, "Export", "x.png", "PNG image (*.png)", calls.append) is None
    assert calls == [] and list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("where", ["missing folder", "a file as folder", "read-only folder"])
def test_a_file_that_cannot_be_written_is_said_and_the_window_carries_on(parent, monkeypatch, tmp_path, where):
    import os

    if where == "missing folder":
        target = tmp_path / "nowhere" / "table.csv"
    elif where == "a file as folder":
        (tmp_path / "plain").write_text("")
        target = tmp_path / "plain" / "table.csv"
    else:
        if os.geteuid() == 0:
            pytest.skip("root writes into a read-only folder")
        locked = tmp_path / "locked"
        locked.mkdir()
        locked.chmod(0o500)
        target = locked / "table.csv"
    answer(monkeypatch, target)
    assert save_as(parent, "Export", "table.csv", "CSV table (*.csv)", lambda p: export_csv(ROWS, p)) is None
    dialog = parent.findChild(ErrorDialog)
    assert dialog is not None and dialog.isVisible()
    assert dialog.message.startswith(f"Could not write {target}") and "folder you can write to" in dialog.hint
    assert not target.exists()
    dialog.close()

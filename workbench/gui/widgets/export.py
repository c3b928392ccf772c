"""An "Export" button for plots: PNG at twice the screen scale, SVG, and the data as CSV.

Every file an export writes is announced on `export_notices().written` with a line that names its
path; the main window shows that line in its status bar, so each export confirms where it went.
"""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Callable

from PySide6.QtCore import QObject, Signal
from PySide6.QtWidgets import QApplication, QFileDialog, QMenu, QToolButton, QWidget

CsvRows = Callable[[], tuple[list[str], list[list]]]  # header, rows


class ExportNotices(QObject):
    written = Signal(str)  # "Exported to PATH": a line for the status bar


_notices: list[ExportNotices] = []


def export_notices() -> ExportNotices:
    """The one object exports announce their files on (made on first use, owned by the application)."""
    if not _notices:
        _notices.append(ExportNotices(QApplication.instance()))
    return _notices[0]


def announce_export(*paths: str | Path) -> None:
    """Say where an export wrote: one file by its path, several by their folder and names."""
    paths = [Path(p) for p in paths]
    if len(paths) == 1:
        text = f"Exported to {paths[0]}"
    else:
        text = f"Exported {len(paths)} files to {paths[0].parent}: " + ", ".join(p.name for p in paths)
    export_notices().written.emit(text)


def save_pixmap(pixmap, path: str | Path) -> Path:
    """Save a grabbed widget as PNG; raises OSError when it could not be written."""
    if not pixmap.save(str(path), "PNG"):
        raise OSError(f"could not write {path}")
    announce_export(path)
    return Path(path)


def export_png(scene_or_item, path: str | Path, scale: float = 2.0) -> Path:
    """Render a pyqtgraph scene or item to PNG at `scale` times its size on screen."""
    import pyqtgraph.exporters as exporters

    exporter = exporters.ImageExporter(scene_or_item)
    width = exporter.parameters()["width"]
    exporter.parameters()["width"] = int(width * scale)
    exporter.export(str(path))
    if not Path(path).exists():  # the exporter says nothing when Qt could not write the file
        raise OSError(f"could not write {path}")
    announce_export(path)
    return Path(path)


def export_svg(scene, path: str | Path) -> Path:
    """Render a graphics scene to SVG with Qt's own generator.

    (pyqtgraph's SVG exporter cannot parse the path data recent Qt releases write.)
    """
    from PySide6.QtCore import QRectF
    from PySide6.QtGui import QGuiApplication, QPainter
    from PySide6.QtSvg import QSvgGenerator

    rect = scene.sceneRect()
    generator = QSvgGenerator()
    generator.setFileName(str(path))
    generator.setSize(rect.size().toSize())
    generator.setViewBox(QRectF(0, 0, rect.width(), rect.height()))
    generator.setTitle(Path(path).stem)
    # Same resolution as the screen, so text and pens keep their size relative to the images.
    screen = QGuiApplication.primaryScreen()
    generator.setResolution(int(screen.logicalDotsPerInch()) if screen is not None else 96)
    painter = QPainter(generator)
    try:
        scene.render(painter, QRectF(0, 0, rect.width(), rect.height()), rect)
    finally:
        painter.end()
    announce_export(path)
    return Path(path)


def export_csv(rows: CsvRows, path: str | Path) -> Path:
    header, data = rows()
    with open(path, "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(header)
        writer.writerows(data)
    announce_export(path)
    return Path(path)


def _suffix(file_filter: str) -> str:
    """'PNG image (*.png)' → '.png'."""
    return file_filter[file_filter.index("*") + 1:file_filter.index(")")] if "*" in file_filter else ""


def save_as(parent: QWidget, title: str, name: str, file_filter: str, write: Callable[[str], object]) -> str | None:
    """Ask where to save (`name` proposed; the filter's suffix added to a name without it), then `write(path)`.
    A file that cannot be written is said in the error dialog and the window carries on. Returns the path
    written, or None when the user cancelled or writing failed."""
    from workbench.core.errors import WorkbenchError
    from workbench.gui.widgets.error_dialog import report_error

    path, _ = QFileDialog.getSaveFileName(parent, title, name, file_filter)
    if not path:
        return None
    suffix = _suffix(file_filter)
    if suffix and not path.endswith(suffix):
        path += suffix
    try:
        write(path)
    except OSError as exc:
        report_error(parent, WorkbenchError(f"Could not write {path}: {exc.strerror or exc}.",
                                            "Choose a folder you can write to.", details=repr(exc)))
        return None
    return path


class ExportButton(QToolButton):
    """A tool button whose menu saves what a plot shows; `source()` returns the scene to render."""

    def __init__(self, source: Callable[[], object], rows: CsvRows | None, basename: str,
                 parent: QWidget | None = None):
        super().__init__(parent)
        self.source, self.rows, self.basename = source, rows, basename
        self.setText("Export")
        self.setToolTip("Save this plot as PNG or SVG, or its data as CSV")
        self.setPopupMode(QToolButton.ToolButtonPopupMode.InstantPopup)
        menu = QMenu(self)
        menu.addAction("PNG image (2×)…", lambda: self._save("PNG image (*.png)", export_png))
        menu.addAction("SVG drawing…", lambda: self._save("SVG drawing (*.svg)", export_svg))
        if rows is not None:
            menu.addAction("Data as CSV…", lambda: self._save("CSV table (*.csv)",
                                                               lambda _, p: export_csv(self.rows, p)))
        self.setMenu(menu)

    def _save(self, file_filter: str, write) -> None:
        save_as(self, "Export", self.basename + _suffix(file_filter), file_filter,
                lambda path: write(self.source(), path))

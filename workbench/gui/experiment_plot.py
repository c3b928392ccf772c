"""A RobOT experiment's robustness-against-budget curves saved as a PNG, with no window on screen.

`save_experiment_plot(rows, path, title)` draws the rows of a retraining grid (strategy × budget ×
seed) with the Robustness view's own widget and series (`RobustnessCurves`, `experiment_series`):
one small plot per metric, a colour per strategy, mean ± 1 sd over the seeds. It works headless:
without a running QApplication it starts one, on the offscreen platform when there is no display.
Qt is imported only when drawing, so a caller without Qt (the CLI, a benchmark) learns it from the
ImportError of the call, and `write_experiment_outputs` skips the PNG.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np

SIZE = (1200, 800)
X_LABEL = "Budget (% of the selectable pool)"


def application():
    """The running QApplication, or a new one (offscreen when there is no display to show on)."""
    from PySide6.QtWidgets import QApplication

    app = QApplication.instance()
    if app is None:
        headless = not (os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"))
        if headless and not os.environ.get("QT_QPA_PLATFORM"):
            os.environ["QT_QPA_PLATFORM"] = "offscreen"
        app = QApplication(["workbench"])
    elif not isinstance(app, QApplication):
        raise RuntimeError("a Qt application without widgets is running, so no plot can be drawn in it")
    return app


def save_experiment_plot(rows: list[dict], path, title: str = "", size: tuple[int, int] = SIZE) -> Path:
    """Draw `rows` (each with strategy, budget, budget_percent, seed and the metrics) and save the
    picture to `path` as PNG, atomically; returns the path. Raises RuntimeError if it cannot be saved."""
    app = application()
    from PySide6.QtCore import Qt, qInstallMessageHandler
    from PySide6.QtGui import QPalette

    from workbench.core.store import atomic_path
    from workbench.gui.plot_style import configure_pyqtgraph
    from workbench.gui.views.robustness_report import experiment_series
    from workbench.gui.widgets.robustness_curves import RobustnessCurves

    series = experiment_series(rows)
    if not series:
        raise ValueError("There are no experiment rows to plot.")
    configure_pyqtgraph()
    widget = RobustnessCurves()
    widget.setAttribute(Qt.WidgetAttribute.WA_DontShowOnScreen)
    palette = widget.palette()  # one background for the title and the plots
    palette.setColor(QPalette.ColorRole.Window, palette.color(QPalette.ColorRole.Base))
    widget.setPalette(palette)
    widget.setAutoFillBackground(True)
    widget.resize(*size)
    widget.export.hide()
    font = widget.status.font()
    font.setBold(True)
    font.setPointSizeF(font.pointSizeF() * 1.25)
    widget.status.setFont(font)
    widget.status.setContentsMargins(8, 6, 8, 0)
    widget.set_status(title)
    ticks = budget_ticks(rows)
    previous = None

    def quiet(mode, context, message: str) -> None:  # the offscreen platform's note that it cannot size windows
        if "propagateSizeHints" in message:
            return
        if previous is not None:
            previous(mode, context, message)
        else:
            print(message, file=sys.stderr)

    previous = qInstallMessageHandler(quiet)
    try:
        widget.set_series(X_LABEL, series)
        widget.show()
        app.processEvents()
        widget.set_series(X_LABEL, series)  # again at its final size: the legend fits the laid-out width
        for metric in widget.metrics():  # ticks at the budgets run, not at 1.5, 2.5 …
            widget.plot_for(metric).getAxis("bottom").setTicks([ticks, []])
        widget.set_readout(budget_caption(rows))
        app.processEvents()
        picture = widget.grab()
        path = Path(path)
        with atomic_path(path) as tmp:
            if not picture.save(str(tmp), "PNG"):
                raise RuntimeError(f"Qt could not write the plot to {path}")
    finally:
        widget.close()
        qInstallMessageHandler(previous)
    return path


def _by_budget(rows: list[dict]) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for r in rows:
        if "strategy" in r:
            out.setdefault(str(r["budget"]), []).append(r)
    return out


def budget_ticks(rows: list[dict]) -> list[tuple[float, str]]:
    """An x tick per budget, where its runs are drawn (the mean % actually selected), labelled with the
    budget asked for: "5" for 5%, so rounding to whole tests does not print 4.82759."""
    ticks = []
    for name, runs in _by_budget(rows).items():
        x = float(np.mean([r["budget_percent"] for r in runs]))
        ticks.append((x, name[:-1] if name.endswith("%") else f"{x:.3g}"))
    return sorted(ticks)


def budget_caption(rows: list[dict]) -> str:
    """The line under the plots: how many tests each budget selected, and what lines and bands mean."""
    groups = _by_budget(rows)
    sizes = []
    for name in sorted(groups, key=lambda b: np.mean([r["budget_percent"] for r in groups[b]])):
        counts = [int(r["selected"]) for r in groups[name] if r.get("selected") is not None]
        if counts:
            sizes.append(f"{name} → {round(float(np.mean(counts))):,}")
    seeds = max(len({r.get("seed") for r in runs if r["strategy"] == s})
                for runs in groups.values() for s in {r["strategy"] for r in runs})
    how = f"Lines: mean over {seeds} seeds; bands: ± 1 sd." if seeds > 1 else "One run (seed) per point."
    return (f"Tests selected per budget: {', '.join(sizes)}. " if sizes else "") + how

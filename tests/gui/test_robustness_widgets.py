"""The Robustness view's widgets on synthetic data: FOL histograms of several sets with a selection
rug, robustness curves per strategy and metric, the strip of selected candidates, and the fuzzer's
seed → test pairs. Each test checks that the API changes what is drawn, that the CSV matches the
input, that clicks report the right item, and saves a screenshot (also to /tmp/robwidgets, or to
$WORKBENCH_WIDGET_SHOTS, for a developer to look at)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import numpy as np
import pyqtgraph as pg
import pytest
from PySide6.QtCore import QPointF, Qt
from PySide6.QtGui import QColor
from PySide6.QtWidgets import QApplication

from workbench.gui.plotting.colors import CLASS_PALETTE
from workbench.gui.widgets.fol_histogram import (
    LOG_DECADES,
    LOW_BIN,
    FolHistogram,
    fol_kind_label,
)
from workbench.gui.widgets.fuzz_pairs import (
    FuzzPairs,
    difference_rgb,
    format_elapsed,
    progress_text,
)
from workbench.gui.widgets.robustness_curves import (
    RobustnessCurves,
    Series,
    strategy_color,
)
from workbench.gui.widgets.selection_strip import SelectionStrip, as_display_images

pytestmark = pytest.mark.gui

CLASSES = ["T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot"]
SHOTS = Path(os.environ.get("WORKBENCH_WIDGET_SHOTS", Path(tempfile.gettempdir()) / "robwidgets"))


@pytest.fixture(scope="module", autouse=True)
def plot_style(qapp):
    from workbench.gui.plotting.plot_style import configure_pyqtgraph

    configure_pyqtgraph()


def screenshot(widget, tmp_path: Path, name: str) -> Path:
    """Save what the widget shows to tmp_path and to the shared screenshot folder."""
    QApplication.processEvents()  # let the graphics layouts take their new sizes first
    widget.repaint()
    pixmap = widget.grab()
    assert not pixmap.isNull()
    path = tmp_path / name
    assert pixmap.save(str(path))
    try:
        SHOTS.mkdir(parents=True, exist_ok=True)
        pixmap.save(str(SHOTS / name))
    except OSError:
        pass
    return path


def shown(widget, qtbot, width: int, height: int):
    qtbot.addWidget(widget)
    widget.resize(width, height)
    widget.show()
    qtbot.waitExposed(widget)
    return widget


def blobs(rng, n: int, side: int = 28) -> np.ndarray:
    """n float images in [0, 1] that look like small garments: a bright blob with some texture."""
    yy, xx = np.mgrid[0:side, 0:side] / (side - 1)
    out = []
    for _ in range(n):
        cx, cy, r = rng.uniform(0.35, 0.65), rng.uniform(0.35, 0.65), rng.uniform(0.03, 0.06)
        blob = 0.9 * np.exp(-((xx - cx) ** 2 + (yy - cy) ** 2) / r)
        out.append(np.clip(blob + rng.uniform(-0.08, 0.08, (side, side)) * (blob > 0.1), 0, 1))
    return np.stack(out).astype(np.float32)


def fol_sets(rng) -> dict[str, np.ndarray]:
    """FOL∞ as the pool looks: clean inputs weak (high FOL), PGD strong (low, some exactly 0 from
    saturated samples and a few rounding negatives), FGSM between, fuzzed tests around FGSM."""
    return {"clean": rng.lognormal(-1.0, 1.0, 4000),
            "FGSM": rng.lognormal(-3.0, 1.2, 2500),
            "PGD": np.concatenate([rng.lognormal(-5.0, 1.2, 2400), np.zeros(80), -rng.uniform(0, 1e-7, 20)]),
            "fuzzed": rng.lognormal(-2.0, 0.7, 600)}


# --- FOL histogram ------------------------------------------------------------------------------------

def histogram_items(widget: FolHistogram) -> list:
    return [i for i in widget.plot.listDataItems() if i.opts.get("stepMode")]


def test_fol_histogram_overlays_sets_on_shared_bins_and_exports_their_counts(qtbot, tmp_path):
    rng = np.random.default_rng(0)
    widget = shown(FolHistogram(), qtbot, 900, 440)
    assert not widget.has_data() and widget.stack.empty.title.text() == "No FOL values yet"
    screenshot(widget, tmp_path, "fol_histogram_empty.png")

    sets = fol_sets(rng)
    label = fol_kind_label("fol_inf", 0.1)
    assert label == fol_kind_label("fol_linf", 0.1) == "FOL∞ (FOSC, ε = 0.1)"
    widget.set_sets(label, sets)
    assert widget.has_data()
    assert len(histogram_items(widget)) == 4  # linear axis: one outline per set, no low bin
    assert [lab.text for _, lab in widget.legend.items] == [
        "clean (n = 4,000)", "FGSM (n = 2,500)", "PGD (n = 2,500)", "fuzzed (n = 600)"]
    assert [item.opts["pen"].color().name() for item in histogram_items(widget)] == CLASS_PALETTE[:4]
    assert widget.plot.getAxis("bottom").labelText == label
    # Shared bins: every set's counts add up to its size, and the CSV says the same.
    header, rows = widget.csv_rows()
    assert header == ["bin_low", "bin_high", "clean", "FGSM", "PGD", "fuzzed"]
    assert len(rows) == widget.bin_count()
    for j, name in enumerate(sets):
        assert sum(r[2 + j] for r in rows) == len(sets[name])
    assert rows[0][0] == pytest.approx(min(v.min() for v in sets.values()))
    assert rows[-1][1] == pytest.approx(max(v.max() for v in sets.values()))

    # Fewer sets: fewer outlines and legend entries.
    widget.set_sets(label, {"clean": sets["clean"], "PGD": sets["PGD"]})
    assert len(histogram_items(widget)) == 2 and len(widget.legend.items) == 2
    with pytest.raises(ValueError, match="grad-L2"):
        widget.set_sets("FOL-L2", sets)
    assert fol_kind_label("grad_l2") == "grad-L2 (RobOT fuzzer FOL)"


def test_fol_histogram_log_axis_keeps_zero_and_negative_values_in_their_own_bin(qtbot, tmp_path):
    rng = np.random.default_rng(1)
    sets = fol_sets(rng)
    widget = shown(FolHistogram(), qtbot, 900, 440)
    widget.set_sets(fol_kind_label("fol_inf", 0.1), sets)
    widget.set_log_x(True)
    assert widget.log_box.isChecked() and widget.floor is not None
    assert widget.floor == pytest.approx(min(v[v > 0].min() for v in sets.values()))
    assert widget.low_counts == {"clean": 0, "FGSM": 0, "PGD": 100, "fuzzed": 0}
    assert len(histogram_items(widget)) == 8  # each set's outline and its low bin
    assert "log scale" in widget.plot.getAxis("bottom").labelText
    ticks = widget.plot.getAxis("bottom")._tickLevels[0]
    assert "≤ 0" in [text for _, text in ticks] and "0.01" in [text for _, text in ticks]
    header, rows = widget.csv_rows()
    assert rows[0][:2] == [-np.inf, widget.floor] and rows[0][2:] == [0, 0, 100, 0]
    for j, name in enumerate(sets):  # nothing dropped
        assert sum(r[2 + j] for r in rows) == len(sets[name])
    members = widget.members("PGD", LOW_BIN)
    assert len(members) == 100 and np.all(sets["PGD"][members] <= 0)
    # A tiny positive value would stretch the axis over empty decades: the floor stops LOG_DECADES
    # below the largest value, and the low bin takes everything under it.
    widget.set_sets(widget.kind_label, {**sets, "fuzzed": np.append(sets["fuzzed"], 1e-12)})
    highest = max(v.max() for v in sets.values())
    assert widget.floor == pytest.approx(highest * 10.0 ** -LOG_DECADES)
    assert widget.low_counts["fuzzed"] == 1 and widget.low_counts["PGD"] == int((sets["PGD"] < widget.floor).sum())
    assert widget._low_text.startswith("< ")
    widget.set_sets(widget.kind_label, sets)

    # A BE-ST-like selection: both ends of the adversarial pool, drawn as a rug with a legend entry.
    pool = np.sort(np.concatenate([sets["FGSM"], sets["PGD"]]))
    chosen = np.concatenate([pool[:300], pool[-300:]])
    widget.mark_selected(chosen, "BE-ST selection")
    assert widget.legend.items[-1][1].text == "BE-ST selection (n = 600)"
    header, rows = widget.csv_rows()
    assert header[-1] == "BE-ST selection" and sum(r[-1] for r in rows) == 600
    assert rows[0][-1] == 100  # the 100 PGD values ≤ 0 are the lowest: all selected
    rug = [i for i in widget.plot.listDataItems() if i.opts.get("connect") == "pairs"]
    assert len(rug) == 1 and len(rug[0].xData) == 2 * 600
    widget.set_percent(True)
    assert widget.plot.getAxis("left").labelText == "% of set"
    screenshot(widget, tmp_path, "fol_histogram_log_selection.png")
    widget.set_percent(False)

    # Hover reads a bin out; a click on it reports it.
    x = float(np.log10(np.median(sets["clean"])))
    top = widget.plot.vb.viewRange()[1][1]
    scene_pos = widget.plot.vb.mapViewToScene(QPointF(x, top / 2))
    widget.graphics.scene().sigMouseMoved.emit(scene_pos)
    assert widget.readout_text.startswith("<b>FOL∞ (FOSC, ε = 0.1) in [") and "clean:" in widget.readout_text
    assert "BE-ST selection:" in widget.readout_text
    with qtbot.waitSignal(widget.bin_clicked) as clicked:
        qtbot.mouseClick(widget.graphics.viewport(), Qt.MouseButton.LeftButton,
                         pos=widget.graphics.mapFromScene(scene_pos))
    index = clicked.args[0]
    low, high = widget.bin_range(index)
    assert low <= np.median(sets["clean"]) <= high
    assert np.all(sets["clean"][widget.members("clean", index)] >= low)

    widget.mark_selected(None)
    assert not [i for i in widget.plot.listDataItems() if i.opts.get("connect") == "pairs"]
    assert len(widget.legend.items) == 4
    widget.set_sets("grad-L2 (RobOT fuzzer FOL)", {"fuzzed": [np.nan, np.nan]})
    assert not widget.has_data() and "No finite" in widget.stack.empty.title.text()


# --- robustness curves ----------------------------------------------------------------------------

BUDGETS = np.array([0.5, 1, 1.5, 2, 3, 4, 5, 6, 8, 10])
STRATEGIES = [("BE-ST", 1.0), ("KM-ST", 0.9), ("DeepGini", 0.7), ("random", 0.55), ("MCP", 0.75)]


def budget_series(rng) -> list[Series]:
    series = []
    for name, gain in STRATEGIES:
        rise = 1 - np.exp(-BUDGETS / 3)
        series += [
            Series(name, "static", BUDGETS, 90 * gain * rise, rng.uniform(1, 4, 10), seeds=3),
            Series(name, "adaptive", BUDGETS, 2 + 25 * gain * rise, rng.uniform(0.5, 2, 10), seeds=3),
            Series(name, "clean", BUDGETS, 91 - 0.2 * BUDGETS * gain, rng.uniform(0.1, 0.4, 10), seeds=3),
            Series(name, "fol_selected", BUDGETS, 0.05 * gain / (1 + BUDGETS / 5), seeds=3),
        ]
    return series


def curves_of(plot) -> list:
    return [i for i in plot.listDataItems() if isinstance(i, pg.PlotDataItem)]


def test_robustness_curves_one_plot_per_metric_one_colour_per_strategy(qtbot, tmp_path):
    rng = np.random.default_rng(2)
    widget = shown(RobustnessCurves(), qtbot, 1000, 640)
    assert not widget.has_data() and "No robustness results" in widget.stack.empty.title.text()
    screenshot(widget, tmp_path, "robustness_curves_empty.png")

    series = budget_series(rng)
    series[-1].running = True  # MCP's mean FOL still running
    widget.set_series("Budget (% of pool)", series)
    widget.set_status("Retraining: MCP, budget 10 %, seed 3 of 3 …")
    assert widget.has_data()
    assert list(widget.plots) == ["static", "adaptive", "clean", "fol_selected"]
    for metric, plot in widget.plots.items():
        lines = curves_of(plot)
        assert len(lines) == len(STRATEGIES)
        assert [line.opts["pen"].color().name() for line in lines] == [
            strategy_color(name).name() for name, _ in STRATEGIES]
        assert plot.getAxis("bottom").labelText == "Budget (% of pool)"
        bands = [i for i in plot.items if isinstance(i, pg.FillBetweenItem)]
        assert len(bands) == (0 if metric == "fol_selected" else len(STRATEGIES))  # sd given → a band
    assert strategy_color("random").name() == CLASS_PALETTE[9] and strategy_color("be-st").name() == CLASS_PALETTE[0]
    assert [lab.text for _, lab in widget.legend.items] == [f"{n} (3 seeds)" for n, _ in STRATEGIES] + [
        "running", "mean ± 1 sd"]
    dashed = [line for line in curves_of(widget.plots["fol_selected"])
              if line.opts["pen"].style() == Qt.PenStyle.DashLine]
    assert len(dashed) == 1
    header, rows = widget.csv_rows()
    assert header == ["strategy", "metric", "Budget (% of pool)", "mean", "sd", "seeds", "running"]
    assert len(rows) == len(series) * len(BUDGETS)
    first = series[0]
    assert rows[3] == ["BE-ST", "static", 2.0, pytest.approx(first.mean[3]), pytest.approx(first.sd[3]), 3, False]
    assert rows[-1][4] is None and rows[-1][-1] is True
    # Hover reads each strategy's value at the nearest budget.
    plot = widget.plots["static"]
    widget.graphics.scene().sigMouseMoved.emit(plot.vb.mapViewToScene(QPointF(2.1, 50)))
    assert widget.readout_text.startswith("<b>Static AE accuracy</b>")
    assert f"BE-ST: {first.mean[3]:.1f} ± {first.sd[3]:.1f} % at budget 2" in widget.readout_text
    screenshot(widget, tmp_path, "robustness_curves_budgets.png")

    # Fewer metrics: fewer plots.
    widget.set_series("Budget (% of pool)", [s for s in series if s.metric in ("static", "clean")])
    assert list(widget.plots) == ["static", "clean"]
    widget.set_series("Budget (% of pool)", [])
    assert not widget.has_data()


def test_robustness_curves_grow_point_by_point_over_rounds(qtbot, tmp_path):
    widget = shown(RobustnessCurves(), qtbot, 1000, 560)
    widget.set_x_label("Round")
    widget.set_reference("static", 80, "REQ = 80 %")
    for r in range(6):
        widget.add_point("all successes", "static", r, min(100.0, 16.0 * r))
        widget.add_point("all successes", "adaptive", r, 3.0 * r)
        widget.add_point("all successes", "clean", r, 91 - 0.3 * r)
        widget.add_point("all successes", "fol", r, 0.04 * np.exp(-r / 2.5))
        line = curves_of(widget.plots["static"])[0]
        assert len(line.xData) == r + 1
    widget.add_point("all successes", "static", 5, 81.0)  # the same round again: replaced, not added
    line = curves_of(widget.plots["static"])[0]
    assert len(line.xData) == 6 and line.yData[-1] == 81.0
    assert line.opts["pen"].style() == Qt.PenStyle.DashLine
    assert next(i for i in widget.plots["static"].items if isinstance(i, pg.InfiniteLine)).value() == 80
    assert list(widget.plots) == ["static", "adaptive", "clean", "fol"]
    assert widget.plots["fol"].getAxis("left").labelText == "Mean FOL∞"
    screenshot(widget, tmp_path, "robustness_curves_rounds_running.png")
    widget.finish()
    line = curves_of(widget.plots["static"])[0]
    assert line.opts["pen"].style() == Qt.PenStyle.SolidLine
    assert "running" not in [lab.text for _, lab in widget.legend.items]
    _, rows = widget.csv_rows()
    assert [r[2] for r in rows if r[1] == "static"] == [0, 1, 2, 3, 4, 5]
    assert widget.plots["static"].getAxis("bottom").labelText == "Round"
    screenshot(widget, tmp_path, "robustness_curves_rounds.png")


# --- selection strip --------------------------------------------------------------------------------

def candidates(rng, n: int = 40):
    images = blobs(rng, n)
    labels = rng.integers(0, 10, n)
    predictions = (labels + rng.integers(1, 10, n)) % 10
    fol = rng.lognormal(-4, 1.5, n)
    attacks = rng.choice(["FGSM", "PGD"], n)
    return images, fol, labels, predictions, attacks


def test_selection_strip_sorted_by_fol_and_clicks_report_the_candidate(qtbot, tmp_path):
    rng = np.random.default_rng(3)
    widget = shown(SelectionStrip(), qtbot, 900, 250)
    assert not widget.has_candidates() and "No candidates" in widget.stack.empty.title.text()
    screenshot(widget, tmp_path, "selection_strip_empty.png")

    images, fol, labels, predictions, attacks = candidates(rng)
    indices = np.arange(5000, 5040)
    widget.set_candidates(images, fol, labels, predictions, attacks, CLASSES, indices=indices,
                          title="BE-ST: 40 of 2,620 candidates")
    assert widget.has_candidates() and widget.model.rowCount() == 40
    assert widget.shown_order() == list(indices[np.argsort(fol, kind="stable")])
    row0 = int(np.argmin(fol))
    assert widget.model.caption_at(0) == f"{fol[row0]:.3g} · {attacks[row0]}"
    assert "→ adversarial prediction" in widget.model.data(widget.model.index(0), Qt.ItemDataRole.ToolTipRole)
    qtbot.waitUntil(lambda: widget.visual_rect(0).isValid(), timeout=30_000)
    screenshot(widget, tmp_path, "selection_strip.png")

    with qtbot.waitSignal(widget.candidate_clicked) as clicked:
        qtbot.mouseClick(widget.grid.viewport(), Qt.MouseButton.LeftButton, pos=widget.visual_rect(2).center())
    assert clicked.args == [widget.shown_order()[2]]
    widget.grid.setFocus()
    with qtbot.waitSignal(widget.candidate_clicked) as entered:
        qtbot.keyClick(widget.grid, Qt.Key.Key_Right)
        qtbot.keyClick(widget.grid, Qt.Key.Key_Return)
    assert entered.args == [widget.shown_order()[3]]

    widget.set_sort("fol_descending")
    assert widget.sort_box.currentData() == "fol_descending"
    assert widget.shown_order()[0] == indices[int(np.argmax(fol))]
    widget.sort_box.setCurrentIndex(widget.sort_box.findData("given"))
    assert widget.shown_order() == list(indices)

    # A compact grid of colour images, one attack for all.
    widget.set_wrapping(True)
    widget.resize(900, 520)
    colour = np.stack([images, images * 0.6, 1 - images], axis=1)
    widget.set_candidates(colour[:20], fol[:20], labels[:20], predictions[:20], "PGD", CLASSES)
    assert widget.model.rowCount() == 20 and widget.title.text() == "20 selected candidates"
    assert as_display_images(colour[:2]).shape == (2, 28, 28, 3)
    qtbot.waitUntil(lambda: widget.visual_rect(19).isValid(), timeout=30_000)
    assert widget.visual_rect(10).top() > widget.visual_rect(0).top()  # wrapped onto a second row
    screenshot(widget, tmp_path, "selection_grid.png")
    with pytest.raises(ValueError, match="differ in length"):
        widget.set_candidates(images, fol[:3], labels, predictions, attacks, CLASSES)
    widget.clear_candidates()
    assert not widget.has_candidates() and widget.model.rowCount() == 0


# --- fuzz pairs -------------------------------------------------------------------------------------

def fuzz_batch(rng, n: int):
    seeds = blobs(rng, n)
    xx = np.mgrid[0:28, 0:28][1] / 27
    generated = np.clip(seeds + rng.normal(0, 0.08, seeds.shape) * (seeds > 0.1) + 0.12 * np.sin(6 * xx), 0, 1)
    seed_labels = rng.integers(0, 10, n)
    new_labels = (seed_labels + rng.integers(1, 10, n)) % 10
    grad_l2 = rng.lognormal(0, 1, n)
    flat = (generated - seeds).reshape(n, -1)
    dist = np.linalg.norm(flat, axis=1) / np.linalg.norm(seeds.reshape(n, -1), axis=1)
    return seeds, generated.astype(np.float32), seed_labels, new_labels, grad_l2, dist


def test_fuzz_pairs_fill_in_with_a_live_counter(qtbot, tmp_path):
    rng = np.random.default_rng(4)
    widget = shown(FuzzPairs(), qtbot, 900, 440)
    assert widget.stack.currentWidget() is widget.stack.empty and not widget.counter.isVisible()
    assert "No fuzzing tests" in widget.stack.empty.title.text()
    screenshot(widget, tmp_path, "fuzz_pairs_empty.png")

    widget.set_progress(0, 87, 1.2)
    assert widget.counter.isVisible() and widget.stack.empty.busy.isVisible()
    assert widget.counter.text() == "0 tests from 87 seeds, 1.2 s — fuzzing…"
    first = fuzz_batch(rng, 10)
    widget.set_pairs(*first, CLASSES)
    assert widget.pair_count() == 10 and widget.stack.currentWidget() is widget.stack.content
    second = fuzz_batch(rng, 14)
    widget.add_pairs(*second)
    assert widget.pair_count() == 24
    widget.set_progress(1234, 87, 12.34)
    assert widget.counter.text().startswith("1,234 tests from 87 seeds, 12.3 s")
    header, rows = widget.csv_rows()
    assert header == ["test", "seed_prediction", "test_prediction", "grad_l2", "relative_l2_distance"]
    assert len(rows) == 24
    assert rows[12] == [12, CLASSES[second[2][2]], CLASSES[second[3][2]], pytest.approx(second[4][2]),
                        pytest.approx(second[5][2])]
    label, numbers = widget.model.caption_lines(0)
    assert label == f"{CLASSES[first[2][0]]} → {CLASSES[first[3][0]]}"
    assert numbers == f"grad-L2 {first[4][0]:.3g} · dist {first[5][0]:.2f}"
    qtbot.waitUntil(lambda: widget.visual_rect(23).isValid(), timeout=30_000)
    screenshot(widget, tmp_path, "fuzz_pairs.png")

    with qtbot.waitSignal(widget.pair_clicked) as clicked:
        qtbot.mouseClick(widget.view.viewport(), Qt.MouseButton.LeftButton, pos=widget.visual_rect(5).center())
    assert clicked.args == [5]
    widget.set_progress(1300, 0, 301, running=False, note="stopped: 300 s budget")
    assert widget.counter.text() == "1,300 tests from 0 seeds, 5 min 01 s — stopped: 300 s budget"
    widget.clear_pairs()
    assert widget.pair_count() == 0 and widget.stack.currentWidget() is widget.stack.empty


def test_difference_pictures_are_centred_on_white_with_symmetric_levels():
    seed = np.full((1, 4, 4), 0.5, np.float32)
    test = seed.copy()
    test[0, 0, 0] += 0.2  # brighter: the red end
    test[0, 3, 3] -= 0.1  # darker, half as much: a lighter blue
    rgb, limit = difference_rgb(seed, test)
    assert limit == pytest.approx(0.2)
    red, blue, white = QColor(*map(int, rgb[0, 0])), QColor(*map(int, rgb[3, 3])), QColor(*map(int, rgb[1, 1]))
    assert red.red() > 150 and red.blue() < 100
    assert blue.blue() > blue.red() and blue.blue() > 150
    assert min(white.red(), white.green(), white.blue()) > 200
    same, zero = difference_rgb(seed, seed)
    assert zero == 0 and np.all(same == same[0, 0])
    assert format_elapsed(12.34) == "12.3 s" and format_elapsed(3725) == "1 h 02 min"
    assert progress_text(1, 1, 0.5) == "1 test from 1 seed, 0.5 s"


def test_the_clean_test_set_is_explained_as_the_reports_subset():
    from types import SimpleNamespace

    from workbench.gui.views.robustness_report import clean_test_text

    def setup(test, subset):
        return SimpleNamespace(report_subset=subset, dataset=SimpleNamespace(split=lambda name: [0] * test))

    assert "seeded 1,000 of the 10,000 test images" in clean_test_text(setup(10_000, 1000))
    assert "all 800 test images" in clean_test_text(setup(800, 1000))

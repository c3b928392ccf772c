"""The Coverage view's two matrices with their legends, captions and read-outs.

`IdcPanel` shows the IDC combination matrix of one test set (or the difference of two), with the
important neurons' clusters as headers; `KmncPanel` the KMNC neuron × section matrix. Each panel
turns a cell into words for the hover read-out and says, for a clicked cell, which inputs of a set
fall in it: IDC from the combination codes the measurement recorded, KMNC from each input's section
per neuron (computed on demand by the view's runs).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QColor
from PySide6.QtWidgets import QComboBox, QHBoxLayout, QLabel, QVBoxLayout, QWidget

from workbench.gui.plotting.colors import BOTH_SETS, NEVER_COVERABLE, UNCOVERED
from workbench.gui.widgets.empty_state import MessageOrContent
from workbench.gui.widgets.idc_matrix import Axis, IdcMatrix, centroid_text
from workbench.gui.widgets.kmnc_matrix import KmncMatrix
from workbench.gui.widgets.matrix_legend import MatrixLegend

MAX_DRAWN_CELLS = 1 << 16  # 256 × 256: beyond this cells are too small to see or click


@dataclass
class MatrixSet:
    """One test set's measured criterion, as a panel shows it."""

    key: str
    title: str
    color: QColor
    criterion: object  # the fitted and measured core criterion (IDC or KMNC)
    inputs: int  # how many inputs were measured


def largest_drawable_m(cluster_counts, limit: int = MAX_DRAWN_CELLS) -> int:
    """The largest m whose matrix has at most `limit` cells. Top-m neurons are a prefix of top-(m+1)
    and each neuron is clustered on its own, so the first m cluster counts are those m would give."""
    cells, m = 1, 0
    for k in np.asarray(cluster_counts, dtype=np.int64).tolist():
        if cells * k > limit:
            break
        cells, m = cells * k, m + 1
    return max(m, 1)


def difference_counts(a: np.ndarray, b: np.ndarray) -> dict[str, int]:
    a, b = a > 0, b > 0
    return {"only_a": int((a & ~b).sum()), "only_b": int((b & ~a).sum()), "both": int((a & b).sum()),
            "neither": int((~a & ~b).sum())}


def plural(n: int, word: str) -> str:
    return f"{n:,} {word}{'s' * (n != 1)}"


class MatrixPanel(QWidget):
    """What both panels share: a matrix, a legend and a caption under it, or a message instead."""

    cell_clicked = Signal(int, int)

    def __init__(self, matrix, parent: QWidget | None = None):
        super().__init__(parent)
        self.matrix = matrix
        self.matrix.cell_clicked.connect(self.cell_clicked)
        self.a: MatrixSet | None = None
        self.b: MatrixSet | None = None
        self.counts_a = np.zeros((0, 0), np.int64)
        self.counts_b: np.ndarray | None = None
        self.legend = MatrixLegend()
        self.caption = QLabel()
        self.caption.setWordWrap(True)
        self.caption.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        content = QWidget()
        layout = QVBoxLayout(content)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(2)
        layout.addWidget(self.matrix, 1)
        layout.addWidget(self.legend)
        layout.addWidget(self.caption)
        self.stack = MessageOrContent(content)
        outer = QVBoxLayout(self)
        outer.setContentsMargins(0, 0, 0, 0)
        outer.addWidget(self.stack)

    def showing(self) -> bool:
        return self.stack.currentWidget() is self.stack.content

    def show_message(self, title: str, text: str = "", actions=(), busy: bool = False) -> None:
        self.a = self.b = None
        self.stack.show_message(title, text, list(actions), busy=busy)

    def _paint(self, log: bool, units: str, extra_legend=()) -> None:
        """Counts of A, or who covers what of A and B, with the legend to match."""
        a, b = self.a, self.b
        if b is None:
            self.matrix.set_counts(self.counts_a, log=log, units=units)
            uncovered = int((self.counts_a == 0).sum()) - self._never_cells()
            items = [(UNCOVERED, (f"uncovered: no input of {a.title} falls here ({uncovered:,} of "
                                 f"{self.counts_a.size:,} cells)"), False)]
        else:
            self.matrix.set_difference(self.counts_a > 0, self.counts_b > 0, a.color, b.color)
            n = difference_counts(self.counts_a, self.counts_b)
            items = [(a.color, f"only {a.title} ({n['only_a']:,})", False),
                     (b.color, f"only {b.title} ({n['only_b']:,})", False),
                     (BOTH_SETS, f"both ({n['both']:,})", False),
                     (UNCOVERED, f"neither ({n['neither'] - self._never_cells():,})", False)]
        self.legend.set_items(items + list(extra_legend))
        self.stack.show_content()

    def _never_cells(self) -> int:
        return 0

    def who_covers(self, row: int, col: int) -> str:
        """'37 inputs of test and 2 of train' / 'no input of test': the sets' counts in a cell."""
        parts = [(self.a, int(self.counts_a[row, col]))]
        if self.b is not None:
            parts.append((self.b, int(self.counts_b[row, col])))
        reached = [f"{plural(n, 'input')} of {s.title}" if i == 0 else f"{n:,} of {s.title}"
                   for i, (s, n) in enumerate(parts) if n]
        if not reached:
            return "<b>uncovered</b>: no input of " + " or ".join(s.title for s, _ in parts)
        return " and ".join(reached)


class IdcPanel(MatrixPanel):
    """`show_sets(a, b, log, layer, ranks)`; `inputs_in(row, col, set)` for a clicked cell."""

    neuron_clicked = Signal(int)

    def __init__(self, parent: QWidget | None = None):
        super().__init__(IdcMatrix(describe=self._describe_cell, describe_neuron=self._describe_neuron), parent)
        self.matrix.setObjectName("idcMatrix")
        self.matrix.neuron_clicked.connect(self.neuron_clicked)
        self.layout_a = None
        self.layer = ""
        self.ranks: dict[int, int] = {}

    def show_sets(self, a: MatrixSet, b: MatrixSet | None, log: bool, layer: str) -> None:
        idc = a.criterion
        self.a, self.b, self.layer = a, b, layer
        self.ranks = {int(n): i + 1 for i, n in enumerate(idc.neurons)}
        self.layout_a = idc.layout()
        self.counts_a = self.layout_a.counts
        self.counts_b = b.criterion.layout().counts if b is not None else None
        self.matrix.set_axes(self._axis(self.layout_a.row_neurons, self.layout_a.row_indices(), idc),
                             self._axis(self.layout_a.col_neurons, self.layout_a.col_indices(), idc))
        self._paint(log, "inputs per cell")
        rows, cols = self.counts_a.shape
        row_names = ", ".join(f"n{n}" for n in self.layout_a.row_neurons) or "none"
        col_names = ", ".join(f"n{n}" for n in self.layout_a.col_neurons)
        constant = [w for w in idc.warnings if "cannot tell inputs apart" in w]
        self.caption.setText(
            f"{idc.incc_size:,} combinations ({rows:,} × {cols:,}) of the top {len(idc.neurons)} neurons of "
            f"<b>{layer}</b> by relevance — rows: clusters of {row_names}; columns: {col_names}. The strips show "
            "each neuron's cluster centroids (mean activation; darker = higher)."
            + (f"<br><span style='color:#d62728'>{'; '.join(constant)}</span>" if constant else ""))

    @staticmethod
    def _axis(neurons, indices, idc) -> Axis:
        position = {int(n): j for j, n in enumerate(idc.neurons)}
        return Axis([int(n) for n in neurons], [idc.centroids[position[int(n)]] for n in neurons],
                    np.asarray(indices, dtype=np.int64))

    def code(self, row: int, col: int) -> int:
        return self.layout_a.code(row, col)

    def inputs_in(self, row: int, col: int, criterion) -> np.ndarray:
        """Positions (in measuring order) of the set's inputs that fall in cell (row, col)."""
        return criterion.inputs_in(self.code(row, col))

    def _clusters_text(self, row: int, col: int) -> str:
        idc = self.a.criterion
        values = idc.centroid_values([self.code(row, col)])[0]
        clusters = idc.combinations([self.code(row, col)])[0]
        parts = [f"n{n} {centroid_text(float(v))} (cluster {int(k) + 1}/{len(idc.centroids[j])})"
                 for j, (n, v, k) in enumerate(zip(idc.neurons, values, clusters))]
        split = len(self.layout_a.row_neurons)
        return ", ".join(parts[:split]) + " | " + ", ".join(parts[split:]) if split else ", ".join(parts)

    def _describe_cell(self, row: int, col: int) -> str:
        if self.a is None:
            return ""
        return (f"Row {row + 1}, column {col + 1}: {self.who_covers(row, col)}<br>"
                f"<span style='font-size:8pt'>{self._clusters_text(row, col)}</span>")

    def _describe_neuron(self, neuron: int, cluster: int | None) -> str:
        if self.a is None:
            return ""
        idc = self.a.criterion
        j = self.ranks.get(int(neuron), 0) - 1
        centroids = ", ".join(centroid_text(float(c)) for c in idc.centroids[j])
        where = (f": cluster {cluster + 1} of {len(idc.centroids[j])}, centroid "
                 f"{centroid_text(float(idc.centroids[j][cluster]))}" if cluster is not None else "")
        return (f"Neuron <b>{neuron}</b> of {self.layer}, relevance rank {j + 1}{where} · centroids {centroids}"
                f" · click to select it")


    def rows(self) -> tuple[list[str], list[list]]:
        """CSV: one row per combination — its cell, code, each neuron's cluster and centroid, inputs per set."""
        idc = self.a.criterion
        sets = [s for s in (self.a, self.b) if s is not None]
        counts = [self.counts_a] + ([self.counts_b] if self.b is not None else [])
        codes = np.arange(self.counts_a.size)
        clusters, values = idc.combinations(codes), idc.centroid_values(codes)
        header = (["row", "column", "code"] + [f"cluster_n{n}" for n in idc.neurons]
                  + [f"centroid_n{n}" for n in idc.neurons] + [f"inputs_{s.title}" for s in sets])
        rows = []
        for code in codes.tolist():
            r, c = self.layout_a.cell(code)
            rows.append([r, c, code] + clusters[code].tolist() + values[code].tolist()
                        + [int(m[r, c]) for m in counts])
        return header, rows


class KmncPanel(MatrixPanel):
    """`show_sets(a, b, log, layer)`; `inputs_in(row, col, sections)` for a clicked cell. A picker
    narrows the rows to one layer's neurons — 258 rows of a LeNet-5 are too many to tell apart."""

    rows_changed = Signal()

    def __init__(self, parent: QWidget | None = None):
        super().__init__(KmncMatrix(describe=self._describe_cell), parent)
        self.matrix.setObjectName("kmncMatrix")
        self.layer_box = QComboBox()
        self.layer_box.setToolTip("Show the neurons of every layer, or of one layer")
        self.layer_box.activated.connect(self._on_layer_chosen)
        self.chosen_layer: str | None = None  # the user's choice; None follows the view's preference
        self.offset = 0  # the first neuron shown
        self.full_a = np.zeros((0, 0), np.int64)
        self.full_b: np.ndarray | None = None
        self.log = True
        row = QHBoxLayout()
        row.addWidget(QLabel("Neurons of"))
        row.addWidget(self.layer_box)
        row.addStretch(1)
        self.stack.content.layout().insertLayout(0, row)

    def show_sets(self, a: MatrixSet, b: MatrixSet | None, log: bool, preferred_layer: str | None = None) -> None:
        kmnc = a.criterion
        self.a, self.b, self.log = a, b, log
        self.full_a = kmnc.matrix()
        self.full_b = b.criterion.matrix() if b is not None else None
        layers = list(kmnc.layer_sizes)
        shown = self.chosen_layer if self.chosen_layer in layers + [""] else (
            preferred_layer if preferred_layer in layers else "")
        self.layer_box.blockSignals(True)
        self.layer_box.clear()
        self.layer_box.addItem(f"all layers ({kmnc.neurons:,})", "")
        for name, size in kmnc.layer_sizes.items():
            self.layer_box.addItem(f"{name} ({size:,})", name)
        self.layer_box.setCurrentIndex(([""] + layers).index(shown))
        self.layer_box.blockSignals(False)
        self._paint_rows(shown)

    def _on_layer_chosen(self, _index: int) -> None:
        self.chosen_layer = self.layer_box.currentData()
        if self.a is not None:
            self._paint_rows(self.chosen_layer)
            self.rows_changed.emit()

    def _paint_rows(self, layer: str) -> None:
        kmnc = self.a.criterion
        sizes = kmnc.layer_sizes if not layer else {layer: kmnc.layer_sizes[layer]}
        names = list(kmnc.layer_sizes)
        self.offset = sum(kmnc.layer_sizes[name] for name in names[:names.index(layer)]) if layer else 0
        rows = slice(self.offset, self.offset + sum(sizes.values()))
        self.counts_a = self.full_a[rows]
        self.counts_b = self.full_b[rows] if self.full_b is not None else None
        self.matrix.set_layers(sizes, kmnc.k)
        never = [int(n) - self.offset for n in kmnc.never_coverable if rows.start <= n < rows.stop]
        extra = [(NEVER_COVERABLE, (f"never coverable: constant on the training data "
                                   f"({plural(len(never), 'neuron')})"), True)] if never else []
        self.matrix.set_unavailable_rows(never, self.counts_a.shape[1])
        self._paint(self.log, "inputs per cell", extra)
        where = f"of {layer} " if layer else ""
        self.caption.setText(
            f"{len(self.counts_a):,} neurons {where}× {kmnc.k:,} sections: each neuron's range on the training data "
            f"split into {kmnc.k:,} equal sections; a cell counts the inputs whose value falls in it. Scroll to "
            "zoom, drag to pan.")

    def _never_cells(self) -> int:
        return len(self.matrix.unavailable_rows) * self.counts_a.shape[1] if self.a is not None else 0

    def bounds(self, row: int, col: int) -> tuple[float, float]:
        kmnc = self.a.criterion
        low, high = float(kmnc.low[self.offset + row]), float(kmnc.high[self.offset + row])
        step = (high - low) / kmnc.k
        return low + col * step, low + (col + 1) * step

    def inputs_in(self, row: int, col: int, sections: np.ndarray) -> np.ndarray:
        """Positions (in measuring order) of the inputs whose neuron in `row` falls in section `col`."""
        return np.flatnonzero(sections[:, self.offset + row] == col)

    def neuron_name(self, row: int) -> str:
        found = self.matrix.neuron_of(row)
        return f"{found[0]}[{found[1]}]" if found else f"neuron {row}"

    def _describe_cell(self, row: int, col: int) -> str:
        if self.a is None:
            return ""
        kmnc = self.a.criterion
        name = self.neuron_name(row)
        if row in self.matrix.unavailable_rows:
            return (f"<b>{name}</b> was constant ({float(kmnc.low[self.offset + row]):.4g}) on every training "
                    "input: its sections can never be covered")
        low, high = self.bounds(row, col)
        return (f"<b>{name}</b> · section {col + 1:,} of {kmnc.k:,} (values {low:.4g} – {high:.4g}): "
                f"{self.who_covers(row, col)}")

    def rows(self) -> tuple[list[str], list[list]]:
        """CSV: the covered cells of the whole matrix, every layer (258,000 cells are mostly empty) —
        neuron, section, the section's value range, and the inputs of each shown set."""
        kmnc = self.a.criterion
        sets = [s for s in (self.a, self.b) if s is not None]
        matrices = [self.full_a] + ([self.full_b] if self.b is not None else [])
        labels = kmnc.neuron_labels()
        step = (kmnc.high - kmnc.low) / kmnc.k
        rows = []
        for r, c in np.argwhere(np.any([m > 0 for m in matrices], axis=0)).tolist():
            low = float(kmnc.low[r] + c * step[r])
            rows.append([labels[r], c + 1, low, float(low + step[r])] + [int(m[r, c]) for m in matrices])
        return ["neuron", "section", "low", "high"] + [f"inputs_{s.title}" for s in sets], rows

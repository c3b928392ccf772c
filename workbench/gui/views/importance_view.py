"""The Importance view: which neurons of a layer matter, for which class, and on which images.

It follows the shared selection (model, dataset, layer, neuron, input) and computes only while it
is on screen. Every computation is a job: the layer's relevance per class and neuron (stored in the
project by the session and reused), the selected neuron's gallery, the inspected image's
explanation, and the ablation check of the top-m neurons. The bars fill in batch by batch while the
relevance is summed; each panel says what it is waiting for, or what went wrong, on its own.
"""

from __future__ import annotations

from typing import Callable

import numpy as np
from PySide6.QtCore import Qt, QTimer
from PySide6.QtWidgets import (
    QCheckBox,
    QHBoxLayout,
    QLabel,
    QMenu,
    QPushButton,
    QSlider,
    QSpinBox,
    QSplitter,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from workbench.core.errors import WorkbenchError
from workbench.core.importance.ablation import ablation_check
from workbench.core.importance.gallery import explain, kept_items, neuron_gallery
from workbench.gui.plotting.staged_paint import StagedPaint
from workbench.gui.session.jobs import INTERACTIVE, Job
from workbench.gui.session.keyed_jobs import KeyedJobs
from workbench.gui.session.selection import Selection
from workbench.gui.session.session import Session
from workbench.gui.views.analysis_view import AnalysisView
from workbench.gui.views.model_view import section_label
from workbench.gui.views.view_inputs import error_text, fitted_on
from workbench.gui.widgets.ablation_panel import AblationPanel
from workbench.gui.widgets.empty_state import MessageOrContent, view_frame
from workbench.gui.widgets.error_dialog import report_error
from workbench.gui.widgets.export import announce_export, export_csv, export_png, save_as
from workbench.gui.widgets.gallery_strip import GalleryPanel, Tile
from workbench.gui.widgets.input_inspector import InputInspector
from workbench.gui.widgets.relevance_heatmap import RelevanceHeatmap

DEFAULT_M = 6  # IDC's default number of important neurons (docs/methods/idc.md#important-neurons)
GALLERY_SIZE = 9  # images per ranking: a 3×3 grid
GALLERY_SAMPLE = 10_000  # training images a gallery ranks when the relevance result kept none (stored before)
ABLATION_DRAWS = 5
M_DEBOUNCE_MS = 300  # the ablation waits for the m spin box to rest
PARTIAL_REDRAW_MS = 250  # running relevance totals are redrawn at most this often
# The heatmap's colour-bar titles; word joiners keep "|relevance|" on one line when the title wraps.
RAW_UNITS = "relevance (sum over images)"
NORMALISED_UNITS = "relevance ÷ the class's largest |\u2060relevance\u2060|"


def number(value: float) -> str:
    """A relevance value for people: three significant digits, or one decimal from 10 up (thousands separated)."""
    if not np.isfinite(value):
        return "NaN"
    if abs(value) >= 10:
        return f"{value:,.1f}"
    return f"{value:.2f}" if abs(value) >= 1 else f"{value:.3g}"


def rule_text(rule) -> str:
    """'LRP-0', or 'conv z+, dense ε' where a composite uses different rules."""
    if not isinstance(rule, dict):
        return str(rule)
    names = {part: rule[part].get("name", "") for part in ("conv", "dense") if isinstance(rule.get(part), dict)}
    pretty = {"lrp-0": "LRP-0", "epsilon": "LRP-ε", "z+": "LRP-z⁺", "alpha-beta": "LRP-αβ"}
    texts = {part: pretty.get(name, name) for part, name in names.items()}
    if len(set(texts.values())) == 1:
        return next(iter(texts.values()))
    return ", ".join(f"{part} {text}" for part, text in texts.items()) or rule.get("name", "LRP")


class ImportanceView(AnalysisView):
    purpose = "its neurons are ranked here"
    no_dataset_title = "No dataset to rank neurons on"
    layer_verb = "rank"
    layer_picker_name = "layerPicker"
    layer_tip = "The layer whose neurons are ranked (the catalogue of the selected model)"
    layer_width = 230
    remembered = ("m_box", "normalise", "opacity")  # kept in the project (gui/session/view_settings.py)

    def __init__(self, session: Session, selection: Selection, parent: QWidget | None = None):
        super().__init__(session, selection, parent)
        self.setObjectName("importanceView")
        self.jobs = KeyedJobs(session.runner, self)  # keys: (panel, key); a panel's newer key supersedes
        self.jobs.ended.connect(self._on_panel_job_ended)
        self.result = None  # the ImportanceResult on screen
        self.shown_key: tuple | None = None
        self.partial = None  # (key, running totals) while the relevance is summed

        self.m_box = QSpinBox()
        self.m_box.setObjectName("topMBox")
        self.m_box.setRange(1, DEFAULT_M)
        self.m_box.setValue(DEFAULT_M)
        self.m_box.setToolTip("How many of the most relevant neurons count as important (IDC's m)")
        self.m_box.valueChanged.connect(self._on_m_changed)
        self.normalise = QCheckBox("Normalise per class")
        self.normalise.setToolTip("Divide each class's row by its largest |relevance|: classes have different "
                                  "totals, and this compares their patterns")
        self.normalise.setChecked(True)  # raw class totals differ by far more than the patterns within a class
        self.normalise.toggled.connect(lambda _: self._show_result())
        self.opacity = QSlider(Qt.Orientation.Horizontal)
        self.opacity.setRange(0, 100)
        self.opacity.setValue(60)
        self.opacity.setFixedWidth(90)
        self.opacity.setToolTip("Opacity of the relevance drawn over the images")
        self.opacity.valueChanged.connect(self._on_opacity)
        self.recompute_button = QPushButton("Compute again")
        self.recompute_button.setToolTip("Sum the relevance over the training images again instead of reading "
                                          "the stored result")
        self.recompute_button.clicked.connect(lambda: self.compute(force=True))
        self.export_button = QToolButton()
        self.export_button.setText("Export")
        self.export_button.setPopupMode(QToolButton.ToolButtonPopupMode.InstantPopup)
        menu = QMenu(self.export_button)
        self.export_actions = {
            "heatmap_png": menu.addAction("Heatmap and bars as PNG (2×)…", lambda: self._export(
                "PNG image (*.png)", ".png", "relevance", self.export_heatmap_png)),
            "gallery_png": menu.addAction("Gallery as PNG (2×)…", lambda: self._export(
                "PNG image (*.png)", ".png", "gallery", self.export_gallery_png)),
            "relevance_csv": menu.addAction("Relevance per class and neuron as CSV…", lambda: self._export(
                "CSV table (*.csv)", ".csv", "relevance", lambda p: export_csv(self.relevance_rows, p))),
            "gallery_csv": menu.addAction("Gallery as CSV…", lambda: self._export(
                "CSV table (*.csv)", ".csv", "gallery", lambda p: export_csv(self.gallery_rows, p))),
            "ablation_csv": menu.addAction("Ablation check as CSV…", lambda: self._export(
                "CSV table (*.csv)", ".csv", "ablation", lambda p: export_csv(self.ablation.rows, p))),
        }
        self.export_button.setMenu(menu)
        menu.aboutToShow.connect(self._update_export_actions)

        controls = QHBoxLayout()
        for text, widget in (("Layer", self.layer_box), ("Top m", self.m_box)):
            label = QLabel(text)
            label.setBuddy(widget)
            controls.addWidget(label)
            controls.addWidget(widget)
            controls.addSpacing(8)
        controls.addWidget(self.normalise)
        controls.addSpacing(8)
        controls.addWidget(QLabel("Overlay"))
        controls.addWidget(self.opacity)
        controls.addStretch(1)
        controls.addWidget(self.recompute_button)
        controls.addWidget(self.export_button)
        self.summary = QLabel()
        self.summary.setObjectName("importanceSummary")
        self.summary.setWordWrap(True)
        self.summary.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)

        self.heatmap = RelevanceHeatmap(describe_cell=self._describe_cell, describe_bar=self._describe_bar)
        self.heatmap.setObjectName("relevanceHeatmap")
        self.heatmap.setMinimumSize(420, 260)
        self.heatmap.neuron_clicked.connect(self.selection.set_neuron)
        self.heatmap_stack = MessageOrContent(self.heatmap)
        self.ablation = AblationPanel()
        self.ablation.setMinimumHeight(110)
        self.ablation_draws = ABLATION_DRAWS  # more when the user asks for a firmer answer
        self.ablation.more_draws_requested.connect(self._ablation_with_draws)
        self.gallery = GalleryPanel(capacity=GALLERY_SIZE)
        self.gallery.activated.connect(lambda index: self.selection.set_input("train", index))
        self.inspector = InputInspector()
        self.inspector.input_chosen.connect(self.selection.set_input)
        self.inspector.mode_changed.connect(self._request_explanation)
        self.inspector.neuron_clicked.connect(self.selection.set_neuron)
        self.staged = StagedPaint(self)  # a result's panels paint one per turn, the heatmap first

        left = QSplitter(Qt.Orientation.Vertical)
        left.addWidget(self._section("Relevance per class and neuron", self.heatmap_stack))
        left.addWidget(self._section("Ablation check", self.ablation))
        left.setStretchFactor(0, 4)
        left.setStretchFactor(1, 1)
        left.setSizes([480, 170])
        right = QSplitter(Qt.Orientation.Vertical)
        right.addWidget(self._section("", self.gallery))
        right.addWidget(self._section("Input inspector", self.inspector))
        right.setStretchFactor(1, 1)  # height to spare goes to the inspector: the gallery's tiles have a fixed size
        right.setSizes([300, 350])
        body = QSplitter()
        body.addWidget(left)
        body.addWidget(right)
        body.setStretchFactor(0, 3)
        body.setStretchFactor(1, 2)
        body.setSizes([620, 560])
        self.stack = view_frame(self, controls, self.summary, body)
        self.empty = self.stack.empty

        self.m_timer = QTimer(self)
        self.m_timer.setSingleShot(True)
        self.m_timer.setInterval(M_DEBOUNCE_MS)
        self.m_timer.timeout.connect(self._request_ablation)

        self._partial_timer = QTimer(self)
        self._partial_timer.setSingleShot(True)
        self._partial_timer.setInterval(PARTIAL_REDRAW_MS)
        self._partial_timer.timeout.connect(self._on_partial_timer)
        self._partial_drawn: object = None  # the partial result drawn last
        session.importance_progress.connect(self._on_progress)
        session.importance_ready.connect(lambda key: key == self.key() and self.refresh())
        session.importance_failed.connect(lambda key: key == self.key() and self.refresh())
        session.testset_loaded.connect(lambda key: self.selection.input is not None and tuple(key) == (
            self.selection.dataset, self.selection.input[0]) and self._request_explanation())
        self.refresh()

    @staticmethod
    def _section(title: str, widget: QWidget) -> QWidget:
        box = QWidget()
        layout = QVBoxLayout(box)
        layout.setContentsMargins(0, 0, 0, 0)
        if title:
            layout.addWidget(section_label(title))
        layout.addWidget(widget, 1)
        return box

    # --- following the selection ------------------------------------------------------------------

    def key(self) -> tuple:
        return self.selection.model, self.selection.dataset, self.selection.layer

    def show_neuron(self) -> None:
        self._show_neuron()

    def show_input(self) -> None:
        self._request_explanation()

    def show_inputs(self, bundle, data) -> None:
        """The relevance of the selected layer (computed when missing) and the inspected input."""
        sizes = {s: len(data.splits[s]) for s in ("test", "train") if s in data.splits and len(data.splits[s])}
        sizes.update({info.name: info.size for info in self.session.stored_testsets(self.selection.dataset)
                      if info.size})  # any stored test set's inputs can be inspected too
        self.inspector.set_splits(sizes)
        if self.selection.input is None and self.inspector.splits:
            split = next(iter(self.inspector.splits))
            self.selection.set_input(split, 0)  # comes back through `changed` and explains it
        else:
            self._request_explanation()
        key = self.key()
        result = self.session.importance(*key)
        if result is not None:
            if self.result is not result or self.shown_key != key:
                self.result, self.shown_key, self.partial = result, key, None
                self._show_result()
            return
        self.result = None
        self._show_pending(key)

    # --- the relevance -----------------------------------------------------------------------------

    def compute(self, force: bool = False) -> Job | None:
        model, spec, layer = self.key()
        if None in (model, spec, layer) or model not in self.session.models or spec not in self.session.datasets:
            return None
        job = self.session.compute_importance(model, spec, layer, force=force)
        if force:
            self.result, self.partial = None, None
            self._show_pending(self.key())
        return job

    def _show_pending(self, key: tuple) -> None:
        _, spec, layer = key
        error = self.session.importance_errors.get(key)
        self._clear_neuron_panels("The layer's relevance could not be computed." if error is not None
                                  else "Appears once the relevance of the layer is known.")
        self.recompute_button.setEnabled(False)
        if error is not None:
            details = self.session.importance_details.get(key, "")
            actions = [("Compute again", lambda: self.compute(force=True))]
            if details:
                actions.append(("Details…", lambda: report_error(self, error, details,
                                                                  title="Relevance could not be computed")))
            self.summary.setText("")
            self.heatmap_stack.show_message(f"No relevance for layer {layer}", error_text(error), actions)
            return
        self.compute()
        data = self.session.datasets[spec]
        if self.partial is None or self.partial[0] != key:
            self.heatmap_stack.show_message(f"Computing the relevance of {layer}…",
                                            "LRP relevance of every neuron, summed over the correctly classified "
                                            f"{fitted_on(data)}; the bars fill in batch by batch (see Jobs).", busy=True)
        self.summary.setText(f"Summing the relevance of {layer}'s neurons over the {fitted_on(data)} of "
                             f"{self.session.dataset_title(spec)}…")

    def _on_progress(self, key: tuple, progress) -> None:
        if key != self.key() or not self.isVisible():
            return
        if self.partial is None or self.partial[0] != key:
            self.heatmap.set_selected(None)
            self.heatmap.set_marks([], [])
            self.heatmap_stack.show_content()
            self.staged.stage(self.heatmap_stack)  # the first totals paint in a turn of their own
            self._partial_timer.stop()  # and are drawn now, whatever the last computation left waiting
        self.partial = (key, progress)
        # Running totals arrive per batch: the first is drawn at once, then the latest a few times a second
        # (a batch arriving as the timer ends waits for the next one, not drawn twice in one period).
        if not self._partial_timer.isActive():
            self._on_partial_timer()

    def _on_partial_timer(self) -> None:
        if self.partial is not self._partial_drawn:
            self._partial_drawn = self.partial
            self._draw_partial()
            self._partial_timer.start()

    def _draw_partial(self) -> None:
        if self.partial is None or self.partial[0] != self.key() or self.result is not None:
            return
        key, progress = self.partial
        # Per-class sums arrive only with the result: until then one row holds the running totals.
        totals = np.asarray(progress.totals, dtype=np.float64)
        self.heatmap.set_matrix(totals[None, :], ["all classes, so far"], units=RAW_UNITS,
                                neuron_title=f"Neuron of {key[2]}")
        self.heatmap.bars.set_values(totals)
        words = fitted_on(self.session.datasets[key[1]]) if key[1] in self.session.datasets else "images"
        self.summary.setText(f"Summing the relevance of {key[2]}'s neurons: {progress.done:,} of {progress.total:,} "
                             f"{words}, {int(np.sum(progress.counts)):,} of them correctly classified so far…")

    def _show_result(self) -> None:
        result = self.result
        if result is None:
            return
        model, spec, layer = self.shown_key
        data = self.session.datasets[spec]
        names = list(result.class_names or data.class_names)
        self.staged.stage(self.heatmap_stack, self.inspector, self.gallery, self.ablation)
        self.m_box.blockSignals(True)
        self.m_box.setRange(1, max(1, result.neurons))
        self.m_box.blockSignals(False)
        per_class = result.per_class if result.per_class is not None else result.totals[None, :]
        values = np.array(per_class, dtype=np.float64)
        if self.normalise.isChecked():
            scale = np.nanmax(np.abs(values), axis=1, keepdims=True)
            values = np.divide(values, scale, out=np.zeros_like(values), where=scale > 0)
            units = NORMALISED_UNITS
        else:
            units = RAW_UNITS
        rows = names if result.per_class is not None else ["all classes"]
        empty = result.empty_classes if result.per_class is not None else []
        self.heatmap.set_matrix(values, rows, empty, units=units, neuron_title=f"Neuron of {layer}")
        self.heatmap_stack.show_content()
        self.recompute_button.setEnabled(True)
        stored = " · stored result, reused" if result.reused else (" · saved in the project" if result.artifact else "")
        nan = np.isnan(result.totals).any() or (result.per_class is not None and np.isnan(result.per_class).any())
        empty_note = (f" · no correctly classified images for {', '.join(names[c] for c in empty)} (hatched)"
                      if empty else "")
        self.summary.setText(
            f"{rule_text(result.rule)} relevance of the {result.neurons:,} neurons of <b>{layer}</b> in {model}, "
            f"summed over the {result.correct:,} correctly classified of {result.inputs:,} {data.name} "
            f"{fitted_on(data)}{stored}{empty_note}"
            + (" · <span style='color:#d62728'>some values are NaN (hatched)</span>" if nan else ""))
        self._show_marks()
        if self.selection.neuron is None or not 0 <= self.selection.neuron < result.neurons:
            self.selection.set_neuron(int(result.ranking[0]))  # comes back through `changed`
        else:
            self._show_neuron()
        self._request_ablation()

    def top(self) -> np.ndarray:
        """The top-m neurons over all classes; a refused m is said in the summary, not raised."""
        try:
            return self.result.top(self.m_box.value())
        except WorkbenchError as exc:
            self.summary.setText(f"<span style='color:#d62728'>{exc.message}</span> {exc.hint}")
            return np.zeros(0, np.int64)

    def _show_marks(self) -> None:
        result = self.result
        top = self.top()
        class_top = []
        if result.per_class is not None:
            m = len(top)
            class_top = [result.top(m, cls=c) if m else [] for c in range(len(result.counts))]
        self.heatmap.set_marks(top, class_top)
        self.heatmap.bars.set_values(result.totals, top, self.selection.neuron)
        self.inspector.set_marks(top, self.selection.neuron)

    def _on_m_changed(self, _value: int) -> None:
        if self.result is None:
            return
        self._show_marks()
        self.m_timer.start()

    # --- the selected neuron: gallery --------------------------------------------------------------

    def _show_neuron(self) -> None:
        neuron = self.selection.neuron
        self.heatmap.set_selected(neuron)
        self.inspector.set_marks(self.heatmap.top_columns, neuron)
        if self.inspector.mode() == "neuron":
            self._request_explanation()
        self._request_gallery()

    def _model_key(self) -> tuple | None:
        model, spec, layer = self.key()
        bundle = self.session.models.get(model)
        if bundle is None or spec not in self.session.datasets or layer not in self._layers:
            return None
        return model, bundle.fingerprint, spec, layer

    def gallery_key(self) -> tuple | None:
        base = self._model_key()
        if base is None or self.result is None or self.selection.neuron is None:
            return None
        # A result that kept each neuron's inputs gives another (complete) gallery than a sampled pass.
        return base + (self.selection.neuron, self._kept_inputs() is not None)

    def _kept_inputs(self):
        """The inputs the relevance result kept per neuron, if it is this layer's and kept them."""
        result = self.result
        if result is None or result.top_inputs is None or self.shown_key != self.key():
            return None
        return result.top_inputs

    def _request_gallery(self) -> None:
        if not self.isVisible():
            return
        key = self.gallery_key()
        if key is None:
            return
        model, _, spec, layer, neuron, _ = key
        self.gallery.title.setText(f"Neuron {neuron} of {layer}")
        if self.jobs.result(("gallery", key)) is not None:
            self._show_gallery(key)
            return
        if self.jobs.error(("gallery", key)) is None:
            kept = self._kept_inputs()
            # With the kept inputs the job explains just those 2k images; without (a result stored before
            # they were kept) it ranks a seeded sample of the training split.
            where = {"kept": kept.neuron(neuron)} if kept is not None else {"max_inputs": GALLERY_SAMPLE}
            self.jobs.run(("gallery", key), f"Gallery of neuron {neuron} of {layer} in {model}", neuron_gallery,
                          self.session.models[model].model, self.session.datasets[spec], layer, neuron, k=GALLERY_SIZE,
                          split=self.session.datasets[spec].fit_split, **where, group="gallery", lane=INTERACTIVE,
                          view="importance", portable=True)
        self._show_gallery(key)

    def _show_gallery(self, key: tuple) -> None:
        if key != self.gallery_key():
            return
        gallery = self.jobs.result(("gallery", key))
        error = self.jobs.error(("gallery", key))
        neuron = key[4]
        if gallery is not None:
            data = self.session.datasets[key[2]]
            split = data.split(gallery.split)
            names = list(data.class_names)
            note = (f"From a seeded sample of {gallery.inputs:,} {fitted_on(data)}."
                    if gallery.inputs < len(split) else "")
            self.staged.stage(self.gallery.by_relevance, self.gallery.by_activation)
            self.gallery.set_tiles(self._tiles(gallery.by_relevance, split, names),
                                   self._tiles(gallery.by_activation, split, names), note)
            self.gallery.set_opacity(self.opacity.value() / 100)
        elif error is not None:
            exc, details = error, self.jobs.details.get(("gallery", key), "")
            actions = [("Try again", lambda: (self.jobs.errors.pop(("gallery", key), None), self._request_gallery()))]
            if details:
                actions.append(("Details…", lambda: report_error(self, exc, details, title="Gallery failed")))
            self.gallery.stack.show_message(f"No gallery for neuron {neuron}", error_text(exc), actions)
        elif self.jobs.running(("gallery", key)) and self._kept_inputs() is not None:
            # The kept lists are a lookup: the images show at once, their relevance drawn when the job has
            # computed it (it may wait for another click's job in the interactive lane).
            data = self.session.datasets[key[2]]
            split = data.split(data.fit_split)
            names = list(data.class_names)
            by_relevance, by_activation = kept_items(self._kept_inputs().neuron(neuron), split.labels, GALLERY_SIZE)
            self.staged.stage(self.gallery.by_relevance, self.gallery.by_activation)
            self.gallery.set_tiles(self._tiles(by_relevance, split, names), self._tiles(by_activation, split, names),
                                   "Drawing where in each image the relevance lies…")
        elif self.jobs.running(("gallery", key)):
            self.gallery.stack.show_message(f"Finding the images of neuron {neuron}…",
                                            "The training images that make it most relevant and most active.",
                                            busy=True)
        else:
            self.gallery.stack.show_message(f"The gallery of neuron {neuron} was cancelled", "",
                                            [("Try again", self._request_gallery)])

    @staticmethod
    def _tiles(items, split, names: list[str]) -> list[Tile]:
        if not items:
            return []
        indices = np.array([item.index for item in items], dtype=np.int64)
        order = np.argsort(indices, kind="stable")  # lazily read files want increasing indices
        pixels = np.empty((len(items),) + split.image_shape[1:] + split.image_shape[:1], np.uint8)
        pixels[order] = split.thumbnails(indices[order])

        def name(k: int) -> str:
            return names[k] if 0 <= k < len(names) else str(k)

        return [Tile(int(item.index), pixels[i], item.heatmap, int(item.label), int(item.prediction),
                     float(item.score), number(float(item.score)), name(int(item.label)), name(int(item.prediction)))
                for i, item in enumerate(items)]

    # --- the inspected input -----------------------------------------------------------------------

    def explanation_key(self) -> tuple | None:
        base = self._model_key()
        chosen = self.selection.input
        if base is None or chosen is None:
            return None
        neuron = self.selection.neuron if self.inspector.mode() == "neuron" else None
        return base + (chosen[0], chosen[1], neuron)

    def _request_explanation(self) -> None:
        if not self.isVisible():
            return
        key = self.explanation_key()
        if key is None:
            return
        model, _, spec, layer, split, index, neuron = key
        data = self.session.datasets[spec]
        inputs = self.session.inputs(spec, split)
        if inputs is None:  # a stored test set being read; `testset_loaded` comes back here
            error = self.session.testset_errors.get((spec, split))
            self.inspector.stack.show_message(f"Test set {split} could not be read" if error else
                                              f"Reading test set {split}…", error_text(error) if error else "",
                                              busy=error is None)
            return
        if not 0 <= index < len(inputs):
            self.inspector.stack.show_message(f"There is no {split} image #{index:,}",
                                              f"Choose an index below {len(inputs):,}.")
            return
        self.inspector.show_choice(split, index)
        if self.inspector.mode() == "neuron" and neuron is None:
            self.inspector.stack.show_message("No neuron selected", "Click a neuron in the heatmap or the bars.")
            return
        if self.jobs.result(("explanation", key)) is None and self.jobs.error(("explanation", key)) is None:
            what = f" for neuron {neuron}" if neuron is not None else ""
            self.jobs.run(("explanation", key), f"Explain {split} image #{index:,} at {layer}{what}", explain,
                          self.session.models[model].model, data, split if split in data.splits else inputs, index,
                          layer, neuron, group="explanation", lane=INTERACTIVE, view="importance", portable=True)
        self._show_explanation(key)

    def _show_explanation(self, key: tuple) -> None:
        if key != self.explanation_key():
            return
        _, _, spec, layer, split, index, neuron = key
        explanation = self.jobs.result(("explanation", key))
        error = self.jobs.error(("explanation", key))
        if explanation is not None:
            data = self.session.datasets[spec]
            pixels = self.session.inputs(spec, split).thumbnails(np.array([index]))[0]
            what = (f"Heatmap: relevance that flows through neuron {neuron} of {layer}." if neuron is not None
                    else "Heatmap: relevance for the predicted class.")
            self.staged.stage(self.inspector)
            self.inspector.show_explanation(explanation, pixels, split, list(data.class_names),
                                            self.heatmap.top_columns, self.selection.neuron, what)
            self.inspector.set_opacity(self.opacity.value() / 100)
        elif error is not None:
            exc, details = error, self.jobs.details.get(("explanation", key), "")
            actions = [("Details…", lambda: report_error(self, exc, details, title="Explanation failed"))] \
                if details else []
            self.inspector.stack.show_message(f"{split.capitalize()} image #{index:,} could not be explained",
                                              error_text(exc), actions)
        elif self.jobs.running(("explanation", key)):
            if self.inspector.explanation is None:
                self.inspector.stack.show_message(f"Explaining {split} image #{index:,}…", busy=True)
        else:
            self.inspector.stack.show_message(f"Explaining {split} image #{index:,} was cancelled", "",
                                              [("Try again", self._request_explanation)])

    # --- the ablation check ------------------------------------------------------------------------

    def ablation_key(self) -> tuple | None:
        base = self._model_key()
        if base is None or self.result is None or self.shown_key != self.key():
            return None
        top = self.top()
        return base + (tuple(int(n) for n in top),) if len(top) else None

    def _request_ablation(self) -> None:
        if not self.isVisible():
            return
        key = self.ablation_key()
        if key is None:
            return
        model, _, spec, layer, top = key
        if self.jobs.result(("ablation", key)) is None and self.jobs.error(("ablation", key)) is None:
            self.jobs.run(("ablation", key), f"Ablation check of the top {len(top)} neurons of {layer} in {model}",
                          ablation_check, self.session.models[model].model, self.session.datasets[spec], layer,
                          [int(n) for n in top], draws=self.ablation_draws, split="test", group="ablation",
                          lane=INTERACTIVE, project=self.session.project, view="importance", portable=True)
        self._show_ablation(key)

    def _ablation_with_draws(self, draws: int) -> None:
        """Check again with `draws` random sets (and keep that many for the next checks)."""
        key = self.ablation_key()
        self.ablation_draws = max(self.ablation_draws, int(draws))
        self.jobs.forget(lambda k: not (isinstance(k, tuple) and k[:1] == ("ablation",)))
        if key is not None:
            self._request_ablation()

    def _on_panel_job_ended(self, panel_key: tuple) -> None:
        panel, key = panel_key
        {"gallery": self._show_gallery, "explanation": self._show_explanation,
         "ablation": self._show_ablation}[panel](key)

    def _show_ablation(self, key: tuple) -> None:
        if key != self.ablation_key():
            return
        result, error = self.jobs.result(("ablation", key)), self.jobs.error(("ablation", key))
        m = len(key[-1])
        if result is not None:
            self.staged.stage(self.ablation)
            self.ablation.show_result(result, key[3])
        elif error is not None:
            exc, details = error, self.jobs.details.get(("ablation", key), "")
            actions = [("Details…", lambda: report_error(self, exc, details, title="Ablation check failed"))] \
                if details else []
            self.ablation.show_message("The ablation check failed", error_text(exc), actions)
        elif self.jobs.running(("ablation", key)):
            self.ablation.show_message(f"Switching off the top {m} neurons and {self.ablation_draws} random sets of {m}…",
                                       "Test accuracy with each set switched off.", busy=True)
        else:
            self.ablation.show_message("The ablation check was cancelled", "",
                                       [("Try again", self._request_ablation)])

    # --- panels without a neuron -------------------------------------------------------------------

    def _clear_neuron_panels(self, why: str) -> None:
        self.gallery.title.setText("Neuron gallery")
        self.gallery.stack.show_message("No neuron yet", why)
        self.ablation.show_message("No ablation check yet", why)

    def _on_opacity(self, value: int) -> None:
        self.gallery.set_opacity(value / 100)
        self.inspector.set_opacity(value / 100)

    # --- read-outs -----------------------------------------------------------------------------------

    def _class_name(self, row: int) -> str:
        labels = self.heatmap.row_labels
        return labels[row] if 0 <= row < len(labels) else str(row)

    def _describe_cell(self, row: int, col: int, value: float) -> str:
        result = self.result
        if result is None or result.per_class is None:
            return f"Neuron <b>{col}</b>: relevance {number(value)} over the images summed so far"
        name = self._class_name(row)
        if row in result.empty_classes:
            return f"<b>{name}</b>: no correctly classified training image, so no relevance to show"
        raw = float(result.per_class[row, col])
        if not np.isfinite(raw):
            return f"Neuron <b>{col}</b> · class <b>{name}</b>: the relevance is NaN"
        rank = int(np.flatnonzero(result.per_class_ranking[row] == col)[0]) + 1
        total = float(np.nansum(result.per_class[row]))
        share = f" ({100 * raw / total:.1f} % of the class's total)" if total else ""
        scaled = f" · {value:.2f} of the row's largest" if self.normalise.isChecked() else ""
        return (f"Neuron <b>{col}</b> · class <b>{name}</b>: relevance {number(raw)}{share}{scaled} · "
                f"rank {rank} of {result.neurons} for {name}")

    def _describe_bar(self, neuron: int, value: float) -> str:
        result = self.result
        if result is None:
            return f"Neuron <b>{neuron}</b>: relevance {number(value)} over the images summed so far"
        rank = int(np.flatnonzero(result.ranking == neuron)[0]) + 1
        marked = " · one of the top m" if neuron in set(self.heatmap.top_columns.tolist()) else ""
        return (f"Neuron <b>{neuron}</b>: relevance {number(value)} over all classes · rank {rank} of "
                f"{result.neurons}{marked}")

    # --- export --------------------------------------------------------------------------------------

    def _update_export_actions(self) -> None:
        self.export_actions["heatmap_png"].setEnabled(self.result is not None)
        self.export_actions["relevance_csv"].setEnabled(self.result is not None)
        self.export_actions["gallery_png"].setEnabled(self.gallery.has_tiles())
        self.export_actions["gallery_csv"].setEnabled(self.gallery.has_tiles())
        self.export_actions["ablation_csv"].setEnabled(self.ablation.result is not None)

    def _export(self, file_filter: str, suffix: str, what: str, write: Callable[[str], object]) -> None:
        save_as(self, "Export", f"{what}-{self.selection.model}-{self.selection.layer}{suffix}", file_filter, write)

    def export_heatmap_png(self, path: str):
        return export_png(self.heatmap.scene(), path)

    def export_gallery_png(self, path: str) -> None:
        if not self.gallery.grab_png(path):
            raise OSError(f"could not write {path}")
        announce_export(path)

    def relevance_rows(self) -> tuple[list[str], list[list]]:
        """One row per neuron: rank, relevance over all classes, top-m flag, and relevance per class."""
        result = self.result
        names = list(result.class_names) if result.per_class is not None else []
        top = set(self.top().tolist())
        rank = np.empty(result.neurons, np.int64)
        rank[result.ranking] = np.arange(1, result.neurons + 1)
        header = ["neuron", "rank", "relevance_all_classes", f"top_{self.m_box.value()}"] + \
            [f"relevance_{name}" for name in names]
        rows = []
        for n in range(result.neurons):
            row = [n, int(rank[n]), float(result.totals[n]), int(n in top)]
            if result.per_class is not None:
                row += ["" if c in result.empty_classes else float(result.per_class[c, n]) for c in range(len(names))]
            rows.append(row)
        return header, rows

    def gallery_rows(self) -> tuple[list[str], list[list]]:
        rows = []
        for ranking, grid in (("relevance", self.gallery.by_relevance), ("activation", self.gallery.by_activation)):
            for position, tile in enumerate(grid.tiles, start=1):
                rows.append([self.selection.layer, self.selection.neuron, ranking, position, tile.index,
                             tile.label_name, tile.prediction_name, tile.score])
        return ["layer", "neuron", "ranked_by", "position", "train_index", "true_class", "predicted_class",
                "score"], rows

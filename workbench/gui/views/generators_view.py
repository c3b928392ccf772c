"""The Generators view: the generative models a latent search can explore, and training new ones.

*All generators* shows every bundled generator and every one trained into the project
(`generators/`), side by side with its stored sample grid, its seed acceptance and its warnings.
Clicking one shows its card (dataset, size, epochs, losses, latent range, seed acceptance, loss
curve) under *Chosen generator*, with two more tabs: *Samples* (a seeded grid per class, resampled on request), *Latent walk* (one latent
dimension swept across the generator's latent range). *Train a generator* trains a new one of any
kind on a project dataset as a long job: its loss curve and sample grid grow per epoch; Stop keeps
the last finished epoch. What the generators are and how their cards are measured:
docs/methods/generation.md.
"""

from __future__ import annotations

from html import escape
from pathlib import Path

import numpy as np
from PySide6.QtCore import Qt, QTimer
from PySide6.QtWidgets import (QComboBox, QFileDialog, QFormLayout, QFrame, QGroupBox, QHBoxLayout, QLabel,
                               QPushButton, QScrollArea, QSlider, QSpinBox, QTabWidget, QVBoxLayout,
                               QWidget)

from workbench.core.errors import WorkbenchError
from workbench.core.generation import assessment, storage
from workbench.core.generation.registry import generator_kinds
from workbench.core.generation.training import train_with_reference
from workbench.gui.plotting.colors import MISMATCH
from workbench.gui.session.jobs import INTERACTIVE, IO, LONG
from workbench.gui.session.keyed_jobs import KeyedJobs
from workbench.gui.session.selection import Selection
from workbench.gui.session.session import Session
from workbench.gui.views.view_inputs import error_text
from workbench.gui.widgets.empty_state import MessageOrContent, keep_space_when_hidden
from workbench.gui.widgets.error_dialog import report_error
from workbench.gui.widgets.export import save_as, save_pixmap
from workbench.gui.widgets.loss_curves import LossCurves
from workbench.gui.widgets.sample_grid import SampleGrid

WALK_STEPS = 9  # images across the latent range in a walk
TILE_HEIGHT = 440  # an overview tile's samples fit a 900-pixel-high window


def acceptance_text(rate) -> str:
    return "seed acceptance not measured" if rate is None else f"seed acceptance {100 * rate:.1f} %"


class GeneratorTile(QFrame):
    """One generator in the overview: its name, what it is, its stored samples; a click chooses it."""

    def __init__(self, entry: dict, grid, on_click, parent: QWidget | None = None):
        super().__init__(parent)
        self.entry = entry
        self.setFrameShape(QFrame.Shape.StyledPanel)
        self.setCursor(Qt.CursorShape.PointingHandCursor)
        self._on_click = on_click
        title = QLabel(f"<b>{entry['name']}</b>")
        rate = entry.get("seed_acceptance")
        where = "bundled" if entry.get("bundled") else "in this project"
        problem = entry.get("problem", "")
        # the title names the folder: its descriptor's path before the problem would fill a narrow tile
        problem = problem.removeprefix(f"{Path(entry['path']) / 'generator.json'}: ")
        info = QLabel(problem or f"{entry.get('kind')} · {entry.get('dataset')} · "
                                 f"{entry.get('epochs')} epochs · {acceptance_text(rate)} · {where}")
        info.setWordWrap(True)
        if entry.get("problem") or entry.get("warning"):  # the card's own judgement (against the classifier's ceiling)
            info.setStyleSheet(f"color: {MISMATCH.name()}")
            info.setToolTip(entry.get("problem") or entry["warning"])
        self.grid = SampleGrid(zoom=2)
        if grid is not None:
            self.grid.set_grid(grid[:, :5], [], row_labels=False, max_height=TILE_HEIGHT)
        layout = QVBoxLayout(self)
        layout.addWidget(title)
        layout.addWidget(info)
        layout.addWidget(self.grid)
        layout.addStretch(1)
        self.setToolTip(entry["path"])
        self.set_chosen(False)

    def set_chosen(self, chosen: bool) -> None:
        self.setLineWidth(3 if chosen else 1)

    def mousePressEvent(self, event) -> None:
        self._on_click(self.entry)
        super().mousePressEvent(event)


class GeneratorsView(QWidget):
    remembered = ("seed_box", "per_class_box", "walk_dimension_box", "kind_box", "preset_box", "epochs_box")

    def __init__(self, session: Session, selection: Selection, parent: QWidget | None = None):
        super().__init__(parent)
        self.setObjectName("generatorsView")
        self.session, self.selection = session, selection
        self.jobs = KeyedJobs(session.runner, self)
        self.entries: list[dict] = []
        self.tiles: list[GeneratorTile] = []
        self.chosen: dict | None = None  # the chosen entry
        self.generator = None  # the chosen generator, once loaded
        self._loading_images = False  # the chosen generator's dataset is being loaded for its test images

        # --- the overview ------------------------------------------------------------------------
        self.overview = QWidget()
        self.overview_layout = QHBoxLayout(self.overview)
        self.overview_layout.setContentsMargins(0, 0, 0, 0)
        self.overview_layout.addStretch(1)  # the tiles go before it, from the left
        overview_scroll = QScrollArea()
        overview_scroll.setWidgetResizable(True)
        overview_scroll.setWidget(self.overview)
        self.open_button = QPushButton("Open generator folder…")
        self.open_button.clicked.connect(self.open_folder)
        self.refresh_button = QPushButton("Refresh")
        self.refresh_button.clicked.connect(self.refresh)
        top_row = QHBoxLayout()
        top_row.addWidget(QLabel("Generators bundled with the workbench and trained in this project; click one "
                                 "to see its card, sample it and walk its latent space."), 1)
        top_row.addWidget(self.open_button)
        top_row.addWidget(self.refresh_button)
        top = QWidget()
        top_layout = QVBoxLayout(top)
        top_layout.setContentsMargins(0, 0, 0, 0)
        top_layout.addLayout(top_row)
        top_layout.addWidget(overview_scroll, 1)

        # --- the chosen generator ------------------------------------------------------------------
        self.header = QLabel()
        self.header.setWordWrap(True)
        self.warning = keep_space_when_hidden(QLabel())
        self.warning.setWordWrap(True)
        self.warning.setStyleSheet(f"color: {MISMATCH.name()}")
        self.warning.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)  # a hash to copy
        self.card_text = QLabel()
        self.card_text.setWordWrap(True)
        self.card_text.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.card_text.setAlignment(Qt.AlignmentFlag.AlignTop)
        self.loss_curves = LossCurves()
        card_box = QWidget()
        card_layout = QHBoxLayout(card_box)
        card_layout.setContentsMargins(0, 0, 0, 0)
        card_layout.addWidget(self.card_text, 1)
        card_layout.addWidget(self.loss_curves, 1)

        self.tabs = QTabWidget()
        self.tabs.addTab(card_box, "Card")
        self.tabs.addTab(self._samples_tab(), "Samples")
        self.tabs.addTab(self._walk_tab(), "Latent walk")
        detail = QWidget()
        detail_layout = QVBoxLayout(detail)
        detail_layout.setContentsMargins(0, 0, 0, 0)
        detail_layout.addWidget(self.header)
        detail_layout.addWidget(self.warning)
        detail_layout.addWidget(self.tabs, 1)
        self.detail = MessageOrContent(detail)
        self.detail.show_message("No generator chosen", "Click a generator above, or train one in the Train tab.")

        self.main_tabs = QTabWidget()
        self.main_tabs.addTab(top, "All generators")
        self.main_tabs.addTab(self.detail, "Chosen generator")
        self.main_tabs.addTab(self._train_tab(), "Train a generator")
        layout = QVBoxLayout(self)
        layout.setContentsMargins(6, 6, 6, 6)
        layout.addWidget(self.main_tabs)

        self.walk_timer = QTimer(self)  # a dragged slider decodes once it rests a moment
        self.walk_timer.setSingleShot(True)
        self.walk_timer.setInterval(120)
        self.walk_timer.timeout.connect(self.decode_walk_point)
        self.jobs.ended.connect(self._on_ended)
        # a save anywhere changes the project: a hidden view lists again when it is shown (showEvent)
        session.project_changed.connect(lambda: self.isVisible() and self.refresh())
        selection.changed.connect(lambda what: what == "dataset" and self._fill_datasets())

    # --- construction of the tabs ------------------------------------------------------------------

    def _samples_tab(self) -> QWidget:
        self.seed_box = QSpinBox()
        self.seed_box.setRange(0, 2 ** 31 - 1)
        self.per_class_box = QSpinBox()
        self.per_class_box.setRange(1, 16)
        self.per_class_box.setValue(8)
        self.resample_button = QPushButton("Resample")
        self.resample_button.setToolTip("Decode new latents drawn with this seed (the same seed, the same samples)")
        self.resample_button.clicked.connect(self.resample)
        self.export_button = QPushButton("Export PNG…")
        self.export_button.clicked.connect(self.export_samples)
        self.samples_status = keep_space_when_hidden(QLabel())
        self.samples = SampleGrid(zoom=2)
        controls = QHBoxLayout()
        for label, widget in (("Seed", self.seed_box), ("Per class", self.per_class_box)):
            controls.addWidget(QLabel(label))
            controls.addWidget(widget)
        controls.addWidget(self.resample_button)
        controls.addWidget(self.export_button)
        controls.addWidget(self.samples_status, 1)
        scroll = QScrollArea()
        scroll.setWidgetResizable(True)
        scroll.setWidget(self.samples)
        tab = QWidget()
        layout = QVBoxLayout(tab)
        layout.addLayout(controls)
        layout.addWidget(scroll, 1)
        return tab

    def _walk_tab(self) -> QWidget:
        self.walk_class_box = QComboBox()
        self.walk_dimension_box = QSpinBox()
        self.walk_dimension_box.setRange(0, 0)
        self.walk_slider = QSlider(Qt.Orientation.Horizontal)
        self.walk_slider.setRange(0, 1000)
        self.walk_slider.setValue(500)
        self.walk_value = QLabel()
        self.walk_row = SampleGrid(zoom=3)
        self.walk_point = SampleGrid(zoom=6)
        self.walk_status = keep_space_when_hidden(QLabel())
        for control in (self.walk_class_box, self.walk_dimension_box):
            signal = control.currentIndexChanged if isinstance(control, QComboBox) else control.valueChanged
            signal.connect(lambda _: self.walk())
        self.walk_slider.valueChanged.connect(lambda _: (self._show_walk_value(), self.walk_timer.start()))
        controls = QHBoxLayout()
        controls.addWidget(QLabel("Class"))
        controls.addWidget(self.walk_class_box)
        controls.addWidget(QLabel("Latent dimension"))
        controls.addWidget(self.walk_dimension_box)
        controls.addWidget(self.walk_status, 1)
        slider_row = QHBoxLayout()
        slider_row.addWidget(QLabel("Value"))
        slider_row.addWidget(self.walk_slider, 1)
        slider_row.addWidget(self.walk_value)
        tab = QWidget()
        layout = QVBoxLayout(tab)
        layout.addLayout(controls)
        layout.addWidget(QLabel(f"The dimension swept across the latent range in {WALK_STEPS} steps, the other "
                                "coordinates held at one seeded latent:"))
        layout.addWidget(self.walk_row)
        layout.addLayout(slider_row)
        layout.addWidget(self.walk_point)
        layout.addStretch(1)
        return tab

    def _train_tab(self) -> QWidget:
        self.kind_box = QComboBox()
        self.preset_box = QComboBox()
        self.dataset_box = QComboBox()
        self.epochs_box = QSpinBox()
        self.epochs_box.setRange(1, 1000)
        self.epochs_box.setValue(10)
        self.kind_box.currentIndexChanged.connect(lambda _: self._fill_presets())
        self.train_button = QPushButton("Train")
        self.train_button.setObjectName("trainGenerator")
        self.train_button.clicked.connect(self.toggle_training)
        self.train_status = keep_space_when_hidden(QLabel())
        self.train_status.setWordWrap(True)
        form = QFormLayout()
        form.addRow("Kind", self.kind_box)
        form.addRow("Sizes", self.preset_box)
        form.addRow("Dataset", self.dataset_box)
        form.addRow("Epochs", self.epochs_box)
        box = QGroupBox("New generator")
        box_layout = QVBoxLayout(box)
        box_layout.addLayout(form)
        box_layout.addWidget(self.train_button)
        box_layout.addWidget(self.train_status)
        box_layout.addStretch(1)
        box.setFixedWidth(320)
        self.train_curves = LossCurves()
        self.train_samples = SampleGrid(zoom=2)
        right = QVBoxLayout()
        right.addWidget(self.train_curves, 1)
        right.addWidget(self.train_samples)
        tab = QWidget()
        layout = QHBoxLayout(tab)
        layout.addWidget(box)
        layout.addLayout(right, 1)
        self._fill_kinds()
        self.session.ready.connect(self._fill_kinds)  # plugins, with their kinds, load at start-up
        return tab

    def _fill_kinds(self) -> None:
        current = self.kind_box.currentData()
        self.kind_box.blockSignals(True)
        self.kind_box.clear()
        for kind in (k for k in generator_kinds() if k.trainable):  # a pipeline made elsewhere is added, not trained
            self.kind_box.addItem((kind.title or kind.name) + (" (plugin)" if kind.plugin else ""), kind.name)
        position = self.kind_box.findData(current)
        self.kind_box.setCurrentIndex(max(0, position))
        self.kind_box.blockSignals(False)
        self._fill_presets()

    # --- the list --------------------------------------------------------------------------------

    def showEvent(self, event) -> None:
        super().showEvent(event)
        self.refresh()  # a generator trained from the command line meanwhile is listed too

    def refresh(self) -> None:
        """List the bundled generators and the project's, each with its stored samples."""
        chosen = self.chosen["path"] if self.chosen else None
        self.jobs.forget(lambda key: key == "train")  # a folder may have been trained again since it was read
        self.entries = storage.listed_generators(self.session.project.folder / "generators")
        for tile in self.tiles:
            self.overview_layout.removeWidget(tile)
            tile.deleteLater()
        self.tiles = []
        for entry in self.entries:
            grid = None
            if "problem" not in entry:
                try:
                    grid = storage.read_samples(entry["path"])
                except WorkbenchError:
                    grid = None
            tile = GeneratorTile(entry, grid, self.choose)
            self.overview_layout.insertWidget(len(self.tiles), tile)
            self.tiles.append(tile)
        if not self.entries:
            self.detail.show_message("No generators yet", "None is bundled and none was trained in this project: "
                                     "train one in the Train tab.")
        self._fill_datasets()
        again = next((e for e in self.entries if e["path"] == chosen), None)
        if again is not None:
            self.choose(again, show=False)
        elif chosen is not None and not any(t.entry["path"] == chosen for t in self.tiles):
            self.chosen = self.generator = None  # its folder is gone
            self.detail.show_message("No generator chosen", "Click a generator in All generators.")

    def open_folder(self) -> None:
        folder = QFileDialog.getExistingDirectory(self, "Open a generator folder")
        if folder:
            entry = {"name": Path(folder).name, "path": folder, "bundled": False}
            self.choose(entry)

    def choose(self, entry: dict, show: bool = True) -> None:
        """Read the chosen generator (checked whole: files, weights' hash) and show its card."""
        self.chosen = entry
        if show:
            self.main_tabs.setCurrentWidget(self.detail)
        for tile in self.tiles:
            tile.set_chosen(tile.entry["path"] == entry["path"])
        if "problem" in entry:
            self.detail.show_message(f"{entry['name']} cannot be read",
                                     " ".join(filter(None, (entry["problem"], entry.get("hint")))))
            return
        path = entry["path"]
        self.detail.show_message(f"Reading {entry['name']}…", busy=True)
        self.jobs.run(("load", path), f"Read generator {entry['name']}", storage.load_generator_job, path,
                      uses_device=False, lane=IO, view="generators", cached=True,
                      then=lambda generator, path=path: self._show_generator(path, generator))

    def _on_ended(self, key) -> None:
        error = self.jobs.error(key)
        if error is None:
            return
        if key[0] == "load" and self.chosen and key[1] == self.chosen["path"]:
            self.detail.show_message(f"{self.chosen['name']} cannot be read", error_text(error))
        elif key[0] == "grid":
            self.samples_status.setText(f"Sampling failed: {error_text(error)}")
        elif key[0] in ("walk", "walk-point"):
            self.walk_status.setText(f"Decoding failed: {error_text(error)}")

    def _show_generator(self, path: str, generator) -> None:
        if not self.chosen or self.chosen["path"] != path:
            return
        self.generator = generator
        card = generator.card
        trained = bool(card.epochs_planned)  # a pretrained pipeline (Stable Diffusion) was not trained here
        made = (f"{card.epochs} epochs on {card.dataset} ({card.seconds_per_epoch:.0f} s per epoch on "
                f"{card.device or '?'})" if trained else f"a pretrained pipeline, searching the classes of {card.dataset}")
        self.header.setText(f"<b>{self.chosen['name']}</b>: {card.title or card.kind} — {card.parameters / 1e6:.2f} M "
                            f"parameters, {generator.latent_dim}-dimensional latent, {made}")
        # an unfinished run, a seed acceptance far below the benchmark's, weights no recorded hash checked
        warnings = card.warnings() + generator.load_warnings
        self.warning.setText(" ".join(warnings))
        self.warning.setVisible(bool(warnings))
        lines = [("Kind", f"{card.kind} ({card.preset or 'default'} sizes: "
                          + ", ".join(f"{k} {v}" for k, v in card.config.items()) + ")"),
                 ("Dataset", f"{card.dataset or 'not recorded'}, {generator.num_classes} classes"),
                 ("Training", f"{card.epochs} of {card.epochs_planned} epochs, batch {card.batch_size}, "
                              f"lr {card.lr:g}, seed {card.seed}, {card.seconds / 60:.1f} min") if trained else
                 ("Made", " ".join(card.notes) or "from a pretrained pipeline"),
                 *card.summary()]
        self.card_text.setText("<table>" + "".join(f"<tr><td><b>{escape(label)}</b>&nbsp;&nbsp;</td>"
                                                   f"<td>{escape(text)}</td></tr>" for label, text in lines)
                               + "</table>")
        self.loss_curves.set_curve(card.loss_curve)
        self.loss_curves.setVisible(trained)
        try:
            grid = storage.read_samples(path)
        except WorkbenchError as exc:
            grid, problem = None, exc.message
        else:
            problem = "The folder holds no samples; Resample draws them."
        if grid is not None:
            self.samples.set_grid(grid, card.class_names)
            self.samples_status.setText(f"The card's samples (seed {card.seed}); Resample draws others.")
        else:
            self.samples.clear()
            self.samples.grid = None
            self.samples_status.setText(problem)
        self.walk_class_box.blockSignals(True)
        self.walk_class_box.clear()
        for k, name in enumerate(card.class_names or [str(k) for k in range(generator.num_classes)]):
            self.walk_class_box.addItem(name, k)
        self.walk_class_box.blockSignals(False)
        self.walk_dimension_box.setRange(0, generator.latent_dim - 1)
        self.detail.show_content()
        self.walk()

    # --- samples and walks -----------------------------------------------------------------------

    def _images(self):
        """The test images of the generator's dataset when it is loaded (a VAE samples by encoding them)."""
        if self.generator is None or not self.generator.can_encode:
            return None
        data = self.session.datasets.get(self.generator.card.dataset)
        if data is None:
            if not self._loading_images:  # asked once; what waited for it runs when it is there
                self._loading_images = True
                self.session.load_dataset(self.generator.card.dataset, then=self._images_loaded)
            return None
        test = data.splits.get("test")
        return test if test is not None and len(test) else data.split("train")

    def _images_loaded(self, _dataset) -> None:
        self._loading_images = False
        self.resample()
        self.walk()

    def _ready(self, status: QLabel | None = None):
        """(whether the chosen generator can decode now, the test images it needs); while the dataset of
        a VAE loads, `status` says so."""
        if self.generator is None:
            return False, None
        images = self._images()
        if self.generator.can_encode and images is None:
            if status is not None:
                status.setText(f"Loading {self.generator.card.dataset} to encode its test images…")
            return False, None
        return True, images

    def resample(self) -> None:
        ready, images = self._ready(self.samples_status)
        if not ready:
            return
        seed, per_class, path = self.seed_box.value(), self.per_class_box.value(), self.chosen["path"]
        self.samples_status.setText(f"Sampling with seed {seed}…")
        self.jobs.run(("grid", path, seed, per_class), f"Sample {self.chosen['name']} (seed {seed})",
                      assessment.sample_grid, self.generator, per_class, seed, images, lane=INTERACTIVE,
                      view="generators", group="grid", cached=True,
                      then=lambda grid, path=path, seed=seed: self._show_samples(path, grid, seed))

    def _show_samples(self, path: str, grid, seed: int) -> None:
        if self.chosen and self.chosen["path"] == path and self.generator is not None:
            self.samples.set_grid(grid, self.generator.card.class_names)
            self.samples_status.setText(f"Seed {seed}: {grid.shape[1]} samples per class")

    def export_samples(self) -> None:
        if self.samples.pixmap() is None or self.samples.pixmap().isNull():
            return
        name = self.chosen["name"] if self.chosen else "samples"
        save_as(self, "Export samples", f"{name}-samples.png", "PNG (*.png)",
                lambda path: save_pixmap(self.samples.picture(), path))

    def _walk_values(self) -> np.ndarray:
        card = self.generator.card
        low, high = (card.latent_range["low"], card.latent_range["high"]) if card.latent_range else (-3.0, 3.0)
        return np.linspace(low, high, WALK_STEPS, dtype=np.float32)

    def _slider_value(self) -> float:
        values = self._walk_values()
        return float(values[0] + (values[-1] - values[0]) * self.walk_slider.value() / 1000.0)

    def _show_walk_value(self) -> None:
        if self.generator is not None:
            self.walk_value.setText(f"{self._slider_value():+.3f}")

    def walk(self) -> None:
        """The chosen dimension swept across the latent range (and the slider's point decoded)."""
        ready, images = self._ready(self.walk_status)
        if not ready:
            return
        path = self.chosen["path"]
        self.walk_status.setText(f"Decoding dimension {self.walk_dimension_box.value()}…")
        self._decode_walk("walk", self._walk_values(), images, lambda row, path=path: self._show_walk(path, row))
        self._show_walk_value()
        self.decode_walk_point()

    def _show_walk(self, path: str, row) -> None:
        if self.chosen and self.chosen["path"] == path:
            self.walk_row.set_grid(np.asarray(row)[None], [], row_labels=False)
            values = self._walk_values()
            self.walk_status.setText(f"From {values[0]:+.3g} to {values[-1]:+.3g}")

    def decode_walk_point(self) -> None:
        ready, images = self._ready()
        if not ready:
            return
        path = self.chosen["path"]
        self._decode_walk("walk-point", [self._slider_value()], images,
                          lambda image, path=path: self.chosen and self.chosen["path"] == path
                          and self.walk_point.set_grid(np.asarray(image)[None], [], row_labels=False))

    def _decode_walk(self, what: str, values, images, then) -> None:
        """Decode the chosen dimension at `values` (the sweep, or the slider's point) as an interactive job."""
        dimension, label = self.walk_dimension_box.value(), self.walk_class_box.currentData()
        key = (what, self.chosen["path"], dimension, label, tuple(round(float(v), 4) for v in values))
        self.jobs.run(key, f"Decode latent dimension {dimension} of {self.chosen['name']}", assessment.latent_walk,
                      self.generator, dimension, values, label, 0, images, lane=INTERACTIVE, view="generators",
                      group=what, cached=True, then=then)

    # --- training ----------------------------------------------------------------------------------

    def _fill_presets(self) -> None:
        kind = next((k for k in generator_kinds() if k.name == self.kind_box.currentData()), None)
        self.preset_box.clear()
        for preset in (kind.presets if kind else ["default"]):
            self.preset_box.addItem(preset, preset)

    def _fill_datasets(self) -> None:
        current = self.dataset_box.currentData() or self.selection.dataset
        self.dataset_box.clear()
        for spec in self.session.project.datasets:
            self.dataset_box.addItem(self.session.dataset_title(spec), spec)
        position = self.dataset_box.findData(current)
        if position >= 0:
            self.dataset_box.setCurrentIndex(position)

    def toggle_training(self) -> None:
        if self.jobs.running("train"):
            self.jobs.cancel("train")
            self.train_status.setText("Stopping after the current batch; the last finished epoch is kept…")
            return
        spec = self.dataset_box.currentData()
        if spec is None:
            report_error(self, WorkbenchError("The project has no dataset to train on.", "Add a dataset first."),
                         title="Cannot train")
            return
        data = self.session.datasets.get(spec)
        if data is None:
            self.train_status.setText(f"Loading {self.session.dataset_title(spec)}…")
            self.session.load_dataset(spec, then=lambda _: self.toggle_training())
            return
        kind, preset, epochs = self.kind_box.currentData(), self.preset_box.currentData(), self.epochs_box.value()
        folder = self._new_folder(f"{kind}-{data.name}")
        self.train_curves.set_curve([])
        self.train_status.setText(f"Training {kind} on {data.name} into {folder}…")
        self.train_button.setText("Stop")
        job = self.jobs.run("train", f"Train a {kind} generator on {data.name}", train_with_reference, kind, data,
                            str(folder), epochs=epochs, preset=preset,
                            command=f"the Generators view: {kind}, {preset} sizes, {epochs} epochs",
                            lane=LONG, view="generators", group="train")
        record = job.record
        job.partial.connect(lambda report, id=record.id: self.jobs.is_current("train", id) and self._on_epoch(report))
        job.progress.connect(lambda done, total, message: self.train_status.setText(message))
        job.finished.connect(lambda result: self._training_ended(result, None))
        job.failed.connect(lambda exc: self._training_ended(None, exc))
        job.cancelled.connect(lambda: self._training_ended(None, None))

    def _new_folder(self, base: str) -> Path:
        root = self.session.project.folder / "generators"
        taken = {entry["name"] for entry in self.entries}  # a bundled generator's name too: one name, one generator
        folder, n = root / base, 2
        while folder.exists() or folder.name in taken:
            folder, n = root / f"{base}-{n}", n + 1
        return folder

    def _on_epoch(self, report) -> None:
        self.train_curves.set_curve(report.loss_curve)
        self.train_samples.set_grid(report.grid, report.class_names)

    def _training_ended(self, result, exc) -> None:
        self.train_button.setText("Train")
        if result is not None:
            self.train_status.setText(f"Trained {result.card.epochs} epochs in {result.card.seconds / 60:.1f} min; "
                                      f"{acceptance_text((result.card.seed_acceptance or {}).get('rate'))}.")
        elif exc is not None:
            self.train_status.setText(f"Stopped: {error_text(exc)}")
        else:
            self.train_status.setText("Stopped; the last finished epoch is kept (its folder is listed above).")
        self.refresh()


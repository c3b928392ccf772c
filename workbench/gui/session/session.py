"""The open project and everything loaded from it, fetched through jobs.

Views ask the session for a dataset, a model, an evaluation or a layer's neuron importance; the
session starts the job (once, however many views ask, through `KeyedJobs`), keeps the result and
announces it with a signal. Jobs that store results save through the runner's staged project, on
their own thread, and commit when they finish; the session re-announces the project then.
Evaluations and importance results are reused when the same weights meet the same data again.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Callable

from PySide6.QtCore import QFileSystemWatcher, QObject, QTimer, Signal

from workbench.core.data.dataset import Dataset
from workbench.core.errors import WorkbenchError
from workbench.core.models.evaluation import evaluation_name
from workbench.core.models.model_io import ModelBundle
from workbench.core.project.folder import Project
from workbench.gui.session import ui_gc
from workbench.gui.session.jobs import INTERACTIVE, IO, LONG, Job, JobRunner
from workbench.gui.session.keyed_jobs import KeyedJobs

EvaluationKey = tuple  # (model name, dataset spec, split)
RELOAD_DELAY_MS = 300  # a burst of writes by another process is read once
ImportanceKey = tuple  # (model name, dataset spec, layer)


def _cancelled(what: str) -> WorkbenchError:
    """Recorded in place of a result the user cancelled, so views say so instead of retrying."""
    return WorkbenchError(f"{what} was cancelled.", "Press Try again to run it again.")


class Session(QObject):
    """Loaded datasets, models and evaluations of one project, plus the jobs that fetch them."""

    ready = Signal()  # PyTorch imported, device known, plugins loaded
    project_changed = Signal()  # datasets, models or results were added or removed
    dataset_loaded = Signal(str)
    dataset_failed = Signal(str)
    model_loaded = Signal(str)
    model_failed = Signal(str)
    evaluation_ready = Signal(object)  # EvaluationKey
    evaluation_failed = Signal(object)
    importance_progress = Signal(object, object)  # ImportanceKey, core ImportanceProgress (running totals)
    importance_ready = Signal(object)  # ImportanceKey
    importance_failed = Signal(object)
    testset_loaded = Signal(object)  # (dataset spec, test set name) of a stored test set read in
    dataset_added = Signal(str)  # a dataset the user opened joined the project
    model_added = Signal(str)  # a model file the user opened joined the project
    message = Signal(str)  # a short note for the status bar
    error = Signal(object)  # a WorkbenchError from an action the user asked for

    def __init__(self, project: Project, runner: JobRunner, parent: QObject | None = None):
        super().__init__(parent)
        self.project = project
        self.runner = runner
        self.is_ready = False
        self.device = ""
        self.plugin_reports: list = []
        self._datasets = self._keyed(lambda _: _cancelled("Loading the dataset"), self.dataset_loaded,
                                     self.dataset_failed)
        self._models = self._keyed(lambda _: _cancelled("Loading the model"), self.model_loaded, self.model_failed)
        self._evaluations = self._keyed(lambda _: _cancelled("The evaluation"), self.evaluation_ready,
                                        self.evaluation_failed)
        self._importances = self._keyed(lambda _: _cancelled("The relevance computation"), self.importance_ready,
                                        self.importance_failed)
        # The caches views read: each key's result, or the error that stopped it.
        self.datasets: dict[str, Dataset] = self._datasets.results
        self.dataset_errors: dict[str, BaseException] = self._datasets.errors
        self.models: dict[str, ModelBundle] = self._models.results
        self.model_errors: dict[str, BaseException] = self._models.errors
        self.evaluations: dict[EvaluationKey, dict] = self._evaluations.results
        self.evaluation_errors: dict[EvaluationKey, BaseException] = self._evaluations.errors
        self.importances: dict[ImportanceKey, object] = self._importances.results  # core ImportanceResult
        self.importance_errors: dict[ImportanceKey, BaseException] = self._importances.errors
        self.importance_jobs: dict[ImportanceKey, Job] = self._importances.jobs  # the running job per key
        self.importance_details: dict[ImportanceKey, str] = self._importances.details  # tracebacks of failures
        self._testsets = self._keyed(None, self.testset_loaded, self.testset_loaded)
        self.testset_errors = self._testsets.errors  # (spec, name) → why a stored test set cannot be read
        runner.project_saved.connect(self._on_saved)
        # Another process (a CLI run, a second window) may write the project: its results show up here.
        self._watcher = QFileSystemWatcher([str(project.folder)], self)
        self._reload_timer = QTimer(self)
        self._reload_timer.setSingleShot(True)
        self._reload_timer.setInterval(RELOAD_DELAY_MS)
        self._reload_timer.timeout.connect(self._reload_project)
        self._watcher.directoryChanged.connect(lambda _: self._reload_timer.start())
        self._when_ready: list[Callable[[], None]] = []
        self._infos: list = []
        self._infos_of: dict | None = None  # the settings `_infos` were listed from
        self._trusted: set[str] = set()  # model files the user trusted in this session

    def _keyed(self, cancelled: Callable | None, ready: Signal, failed: Signal) -> KeyedJobs:
        """Jobs by key whose end is announced as `ready(key)` or `failed(key)`."""
        jobs = KeyedJobs(self.runner, self, cancelled_error=cancelled)
        jobs.ended.connect(lambda key: (failed if key in jobs.errors else ready).emit(key))
        return jobs

    def _reload_project(self) -> None:
        try:
            changed = self.project.reload()
        except WorkbenchError as exc:  # a damaged project.json: what was read before stays
            self.message.emit(f"The project file could not be read again: {exc.message}")
            return
        if changed:
            self.project_changed.emit()

    def _on_saved(self, job: Job) -> None:
        """A job committed results to the project: views and the project panel show them. A stored test
        set it replaced is read again when next asked for."""
        self._forget_testsets(set(job.record.saved))
        self.project_changed.emit()

    def _forget_testsets(self, names: set[str]) -> None:
        if names:
            self._testsets.forget(lambda key: key[1] not in names)
            self._evaluations.forget(lambda key: key[2] not in names)

    # --- start-up ----------------------------------------------------------------------------------

    def start(self) -> Job:
        """Import PyTorch and load plugins in the background; deferred requests run afterwards."""
        from workbench.core.plugins import warm_up

        job = self.runner.submit("Start-up: PyTorch, device and plugins", warm_up, lane=INTERACTIVE)
        job.finished.connect(self._on_warmed_up)
        job.failed.connect(lambda exc: self._on_warmed_up(None))
        return job

    def _on_warmed_up(self, report) -> None:
        if report is not None:
            self.device, self.plugin_reports = report.device, report.plugins
        QTimer.singleShot(0, ui_gc.freeze)  # a turn of its own: the views below refresh in this one
        self.is_ready = True
        self.ready.emit()
        pending, self._when_ready = self._when_ready, []
        for request in pending:
            request()

    def _when_started(self, request: Callable[[], None]) -> bool:
        """Run `request` after start-up; True when it was deferred."""
        if self.is_ready:
            return False
        self._when_ready.append(request)
        return True

    # --- datasets ----------------------------------------------------------------------------------

    def _registered(self, spec: str) -> bool:
        from workbench.core.data.registry import dataset_entries

        return spec in {e.name for e in dataset_entries()} or os.path.exists(spec)

    def load_dataset(self, spec: str, then: Callable[[Dataset], None] | None = None,
                     download: bool = False, report_errors: bool = True) -> Job | None:
        """Load a dataset once; `then(dataset)` runs when it is there (at once if it already is).
        `report_errors=False`: the caller shows a failure itself (the open dialog does)."""
        from workbench.core.data.registry import load_dataset_job

        # A dataset a plugin adds is unknown until plugins are loaded.
        if (spec not in self.datasets and not self._datasets.running(spec) and not self._registered(spec)
                and self._when_started(lambda: self.load_dataset(spec, then, download))):
            return None
        return self._datasets.run(spec, f"{'Download' if download else 'Load'} dataset {spec}", load_dataset_job,
                                  spec, download=download, uses_device=False, lane=IO, then=then, cached=True,
                                  report_errors=report_errors, view="data")

    def dataset_title(self, spec: str) -> str:
        """A short name for a dataset spec: the registry name, or the name a file or folder's dataset
        goes by (the same before it is loaded as after)."""
        from workbench.core.data.readers import dataset_name

        if spec in self.datasets:
            return self.datasets[spec].name
        return dataset_name(spec) if os.sep in spec else spec

    def add_dataset(self, spec: str, download: bool = False, report_errors: bool = True) -> Job | None:
        """Load a dataset (a registry name or a path) and add it to the project when it loads."""
        def added(dataset: Dataset) -> None:
            if spec in self.project.datasets or self._write(lambda: self.project.add_dataset(spec)):
                self.project_changed.emit()
                self.dataset_added.emit(spec)
        return self.load_dataset(spec, then=added, download=download, report_errors=report_errors)

    # --- test sets -----------------------------------------------------------------------------------

    def inputs(self, spec: str, name: str):
        """The inputs of test set `name` (a split of dataset `spec`, or a stored test set labelled with
        its classes): a `Split`, or None while it is read (`testset_loaded((spec, name))` says when,
        `testset_errors` why it could not be)."""
        data = self.datasets.get(spec)
        if data is None:
            return None
        if name in data.splits:
            return data.splits[name]
        key = (spec, name)
        if key in self._testsets.results:
            return self._testsets.results[key]
        if key not in self._testsets.errors:
            from workbench.core.labeling.labelled_sets import load_testset

            self._testsets.run(key, f"Read test set {name}", load_testset, self.project, name, data,
                               uses_device=False, lane=IO, view="data")
        return None

    def dataset_names(self, spec: str) -> set[str]:
        """Every name results record for dataset `spec`: the spec, the dataset's name, its registry key."""
        data = self.datasets.get(spec)
        names = {spec}
        if data is not None:
            names |= {data.name, str(data.recipe.get("name", data.name))}
        return names

    def testset_infos(self) -> list:
        """Every test set the project lists (`TestSetInfo`s), read once per version of its settings:
        the tool bar, the project panel and the views ask on every refresh."""
        from workbench.core.labeling.labelled_sets import list_testsets

        if self._infos_of is not self.project.settings:
            self._infos, self._infos_of = list_testsets(self.project), self.project.settings
        return self._infos

    def relist_testsets(self) -> None:
        """List the test sets again although the settings did not change (a first answer for a set makes its
        human-validated subsets), and tell the views."""
        self._infos_of = None
        self.project_changed.emit()

    def stored_testsets(self, spec: str) -> list:
        """The project's stored test sets that can be measured with dataset `spec` (`TestSetInfo`s)."""
        names = self.dataset_names(spec) | {""}
        return [info for info in self.testset_infos()
                if info.source.kind != "split" and not info.problem and info.source.dataset in names]

    # --- models ------------------------------------------------------------------------------------

    def model_entry(self, name: str) -> dict | None:
        return next((m for m in self.project.models if m["name"] == name), None)

    def load_model(self, name: str, then: Callable[[ModelBundle], None] | None = None) -> Job | None:
        """Load a project model once; `then(bundle)` runs when it is there."""
        from workbench.core.models.model_io import inspect_model

        entry = self.model_entry(name)
        if entry is None and name not in self.models:
            raise WorkbenchError(f"The project has no model named {name!r}.", "Add it with Project → Open model file.")
        if (name not in self.models and not self._models.running(name)
                and self._when_started(lambda: self.load_model(name, then))):
            return None
        if name in self.models or self._models.running(name):
            return self._models.run(name, f"Load model {name}", inspect_model, then=then, cached=True)
        spec = self.project.model_spec(entry)
        return self._models.run(name, f"Load model {name}", inspect_model, spec, arch=entry.get("arch"),
                                trust=spec in self._trusted, fallback_shape=self._fallback_shape(),
                                lane=INTERACTIVE, then=then, cached=True, report_errors=True, view="model")

    def _fallback_shape(self) -> tuple | None:
        """For a model that does not say what it takes: the image shape of the project's datasets."""
        for spec in self.project.datasets:
            if spec in self.datasets:
                return tuple(self.datasets[spec].image_shape)
        return None

    def unique_model_name(self, base: str) -> str:
        taken = {m["name"] for m in self.project.models}
        name, i = base, 2
        while name in taken or (self.project.folder / "models" / f"{name}.pt").exists():
            name, i = f"{base}-{i}", i + 1
        return name

    def add_model_file(self, path: str, arch: str | None = None, trust: bool = False,
                       name: str | None = None, report_errors: bool = True) -> Job:
        """Load a user's model file; it joins the project only once it loaded cleanly (with the
        architecture it was loaded with, inferred or chosen). `report_errors=False`: the caller shows
        a failure itself (the open dialog does)."""
        spec = str(Path(path).resolve()) if os.path.exists(path) else path
        if trust:
            self._trusted.add(spec)
        from workbench.core.models.model_io import inspect_model

        job = self.runner.submit(f"Load model file {Path(path).name}", inspect_model, spec, arch=arch or None,
                                 trust=trust, fallback_shape=self._fallback_shape(), lane=INTERACTIVE, view="model",
                                 report_errors=report_errors)

        def loaded(bundle: ModelBundle) -> None:
            model_name = self.unique_model_name(name or bundle.model.info.name or Path(path).stem)
            if self._write(lambda: self.project.add_model(spec, model_name, arch or bundle.model.info.arch)):
                self.models[model_name] = bundle
                self.project_changed.emit()
                self.model_loaded.emit(model_name)
                self.model_added.emit(model_name)
        job.finished.connect(loaded)
        return job

    def add_bundled_model(self, name: str) -> None:
        if self.model_entry(name) is None and self._write(lambda: self.project.add_model(name, name)):
            self.project_changed.emit()

    # --- evaluations -------------------------------------------------------------------------------

    def evaluation(self, model: str, dataset: str, split: str) -> dict | None:
        return self.evaluations.get((model, dataset, split))

    def is_evaluating(self, model: str, dataset: str, split: str) -> bool:
        return self._evaluations.running((model, dataset, split))

    def compatibility_problem(self, model: str, dataset: str) -> str | None:
        """Why a loaded model cannot run on a loaded dataset, from shapes and class counts alone."""
        from workbench.core.models.training import compatibility_problem

        bundle, data = self.models.get(model), self.datasets.get(dataset)
        if bundle is None or data is None:
            return None
        return compatibility_problem(bundle.model.info, data, model)

    def evaluate(self, model: str, dataset: str, split: str, force: bool = False) -> Job | None:
        """Evaluate a model on a split: reuse a stored evaluation of the same weights, else compute and
        store it (the job saves it; a stored one that cannot be read is computed again)."""
        from workbench.core.models.evaluation import evaluate_stored, find_evaluation, inputs_identity

        key: EvaluationKey = (model, dataset, split)
        if (key in self.evaluations and not force) or self._evaluations.running(key):
            return self._evaluations.jobs.get(key) if self._evaluations.running(key) else None
        if dataset not in self.datasets:
            return self.load_dataset(dataset, then=lambda _: self.evaluate(model, dataset, split, force))
        if model not in self.models:
            return self.load_model(model, then=lambda _: self.evaluate(model, dataset, split, force))
        bundle, data = self.models[model], self.datasets[dataset]
        inputs = split if split in data.splits else self.inputs(dataset, split)
        if inputs is None:  # a stored test set, read first
            if (dataset, split) in self.testset_errors:
                return None
            job = self._testsets.jobs[(dataset, split)]
            job.finished.connect(lambda _: self.evaluate(model, dataset, split, force))
            return job
        identity = "" if split in data.splits else inputs_identity(inputs)
        stored = not force and find_evaluation(self.project, model, bundle.fingerprint, data.name, split,
                                               identity) is not None
        name = f"{'Load evaluation of' if stored else 'Evaluate'} {model} on {data.name}:{split}"
        return self._evaluations.run(key, name, evaluate_stored, bundle.model, data, inputs, model_name=model,
                                     fingerprint=bundle.fingerprint, lane=IO if stored else INTERACTIVE,
                                     portable=not stored,  # a forward pass here holds the window's lock
                                     project=self.project, reuse=not force, view="model", report_errors=True)

    def delete_result(self, name: str) -> None:
        if self._write(lambda: self.project.delete_artifact(name)):
            self._evaluations.forget(lambda k: evaluation_name(k[0], self.dataset_title(k[1]), k[2]) != name)
            self._importances.forget(lambda k: getattr(self.importances.get(k), "artifact", None) != name)
            self._forget_testsets({name})
            self.project_changed.emit()

    # --- neuron importance -------------------------------------------------------------------------

    def importance(self, model: str, dataset: str, layer: str):
        return self.importances.get((model, dataset, layer))

    def is_computing_importance(self, model: str, dataset: str, layer: str) -> bool:
        return self._importances.running((model, dataset, layer))

    def compute_importance(self, model: str, dataset: str, layer: str, force: bool = False) -> Job | None:
        """Relevance of `layer`'s neurons per class over the correctly classified training images.

        The model and dataset must be loaded. The job reuses a stored result made the same way
        (unless `force`) and stores a new one when it has finished, so a cancelled or failed run
        saves nothing.
        """
        from workbench.core.importance.neuron_importance import compute_importance

        key: ImportanceKey = (model, dataset, layer)
        if self._importances.running(key):
            return self._importances.jobs[key]
        if key in self.importances and not force:
            return None
        bundle, data = self.models[model], self.datasets[dataset]
        job = self._importances.run(key, f"Importance of {layer} in {model} ({data.name} {data.fit_split})",
                                    compute_importance, bundle.model, data, layer, per_class=True, batch_size=512,
                                    split=data.fit_split,
                                    project=self.project, reuse=not force, lane=LONG, view="importance",
                                    then=lambda result: self._mark_unsaved(result, job))
        job.partial.connect(lambda progress: self.importance_progress.emit(key, progress))
        return job

    @staticmethod
    def _mark_unsaved(result, job: Job) -> None:
        """A result the project could not store (read-only folder) has no artifact to point at."""
        if getattr(result, "artifact", None) in job.record.unsaved:
            result.artifact = None

    # --- training ----------------------------------------------------------------------------------

    def train(self, arch: str, dataset: str, epochs: int, batch_size: int, lr: float, seed: int,
              name: str) -> Job:
        """Train on a loaded dataset; the checkpoint goes to the project's models/ folder."""
        if self.project.read_only:
            raise WorkbenchError(f"The project folder {self.project.folder} is read-only, so a trained model "
                                 "could not be saved.", "Open or create a project in a folder you can write to.")
        if self.model_entry(name) is not None:
            raise WorkbenchError(f"The project already has a model named {name!r}.", "Choose another name.")
        out = self.project.folder / "models" / f"{name}.pt"
        if out.exists():
            raise WorkbenchError(f"{out} already exists.", "Choose another name, or move the file away.")
        from workbench.core.models.training import train_and_save

        data = self.datasets[dataset]
        job = self.runner.submit(f"Train {arch} on {data.name} ({epochs} epoch{'s' * (epochs != 1)})",
                                 train_and_save, arch, data, out, name, epochs=epochs, batch_size=batch_size, lr=lr,
                                 seed=seed, source="trained in the workbench GUI", lane=LONG, view="training")

        def trained(_result) -> None:
            if self._write(lambda: self.project.add_model(str(out), name)):
                self.project_changed.emit()
                self.load_model(name)
        job.finished.connect(trained)
        return job

    # --- writing -------------------------------------------------------------------------------------

    def _write(self, change: Callable[[], object], asked: bool = True) -> bool:
        """Apply a change to the project; a refusal (read-only folder, full disk) is reported.

        Changes the user asked for report through `error` (a dialog); background bookkeeping, such
        as storing an evaluation, through `message` (the status bar).
        """
        try:
            change()
        except WorkbenchError as exc:
            if asked:
                self.error.emit(exc)
            else:
                self.message.emit(f"Not saved: {exc.message}")
            return False
        return True

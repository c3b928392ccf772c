"""The open project and everything loaded from it, fetched through jobs.

Views ask the session for a dataset, a model, an evaluation or a layer's neuron importance; the
session starts the job (once, however many views ask), keeps the result and announces it with a
signal. It is also the project's only writer, always on the UI thread: evaluations and importance
results are stored as artifacts and reused when the same weights meet the same data again.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Callable

from PySide6.QtCore import QObject, Signal

from workbench.core.data import Dataset
from workbench.core.errors import WorkbenchError
from workbench.core.project import Project
from workbench.gui import tasks
from workbench.gui.jobs import Job, JobRunner

EvaluationKey = tuple  # (model name, dataset spec, split)
ImportanceKey = tuple  # (model name, dataset spec, layer)


def _cancelled(what: str) -> WorkbenchError:
    """Recorded in place of a result the user cancelled, so views say so instead of retrying."""
    return WorkbenchError(f"{what} was cancelled.", "Press Try again to run it again.")


def evaluation_name(model: str, dataset: str, split: str) -> str:
    """The artifact name of an evaluation; the CLI's `evaluate --project` uses the same form."""
    return f"evaluation {model} on {dataset}:{split}"


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
        self.datasets: dict[str, Dataset] = {}
        self.dataset_errors: dict[str, BaseException] = {}
        self.models: dict[str, tasks.ModelBundle] = {}
        self.model_errors: dict[str, BaseException] = {}
        self.evaluations: dict[EvaluationKey, dict] = {}
        self.evaluation_errors: dict[EvaluationKey, BaseException] = {}
        self.importances: dict[ImportanceKey, object] = {}  # core ImportanceResult
        self.importance_errors: dict[ImportanceKey, BaseException] = {}
        self.importance_jobs: dict[ImportanceKey, Job] = {}  # the latest job per key, finished or not
        self._in_flight: dict[tuple, Job] = {}
        self._when_ready: list[Callable[[], None]] = []
        self._trusted: set[str] = set()  # model files the user trusted in this session

    # --- start-up ----------------------------------------------------------------------------------

    def start(self) -> Job:
        """Import PyTorch and load plugins in the background; deferred requests run afterwards."""
        job = self.runner.submit("Start-up: PyTorch, device and plugins", tasks.warm_up)
        job.finished.connect(self._on_warmed_up)
        job.failed.connect(lambda exc: self._on_warmed_up(None))
        return job

    def _on_warmed_up(self, report: tasks.StartupReport | None) -> None:
        if report is not None:
            self.device, self.plugin_reports = report.device, report.plugins
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
        from workbench.core.dataset_registry import dataset_entries

        return spec in {e.name for e in dataset_entries()} or os.path.exists(spec)

    def load_dataset(self, spec: str, then: Callable[[Dataset], None] | None = None,
                     download: bool = False) -> Job | None:
        """Load a dataset once; `then(dataset)` runs when it is there (at once if it already is)."""
        # A dataset a plugin adds is unknown until plugins are loaded.
        if (spec not in self.datasets and ("dataset", spec) not in self._in_flight and not self._registered(spec)
                and self._when_started(lambda: self.load_dataset(spec, then, download))):
            return None
        return self._load_once(
            "dataset", spec, self.datasets, self.dataset_errors, self.dataset_loaded, self.dataset_failed,
            lambda: self.runner.submit(f"{'Download' if download else 'Load'} dataset {spec}", tasks.load_dataset,
                                       spec, download=download, uses_device=False),
            "Loading the dataset", then)

    def _load_once(self, kind: str, key: str, store: dict, errors: dict, loaded: Signal, failed: Signal,
                   submit: Callable[[], Job], what: str, then: Callable | None) -> Job | None:
        """Run `submit()` unless `key` is in `store` or on its way; `then(value)` runs once it is there.

        The value lands in `store` (or the error in `errors`) before `loaded`/`failed` fire, so one job
        serves every view that asks while it runs.
        """
        if key in store:
            if then:
                then(store[key])
            return None
        flight = (kind, key)
        if flight not in self._in_flight:
            errors.pop(key, None)
            job = self._in_flight[flight] = submit()

            def done(value) -> None:
                self._in_flight.pop(flight, None)
                store[key] = value
                loaded.emit(key)

            def fail(exc: BaseException) -> None:
                self._in_flight.pop(flight, None)
                errors[key] = exc
                failed.emit(key)

            job.finished.connect(done)
            job.failed.connect(fail)
            job.cancelled.connect(lambda: fail(_cancelled(what)))
        job = self._in_flight[flight]
        if then:
            job.finished.connect(then)
        return job

    def dataset_title(self, spec: str) -> str:
        """A short name for a dataset spec: the registry name, or a path's file name."""
        if spec in self.datasets:
            return self.datasets[spec].name
        return Path(spec).name if os.sep in spec else spec

    def add_dataset(self, spec: str, download: bool = False) -> Job | None:
        """Load a dataset (a registry name or a path) and add it to the project when it loads."""
        def added(dataset: Dataset) -> None:
            if spec in self.project.datasets or self._write(lambda: self.project.add_dataset(spec)):
                self.project_changed.emit()
                self.dataset_added.emit(spec)
        return self.load_dataset(spec, then=added, download=download)

    # --- models ------------------------------------------------------------------------------------

    def model_entry(self, name: str) -> dict | None:
        return next((m for m in self.project.models if m["name"] == name), None)

    def load_model(self, name: str, then: Callable[[tasks.ModelBundle], None] | None = None) -> Job | None:
        """Load a project model once; `then(bundle)` runs when it is there."""
        entry = self.model_entry(name)
        if entry is None and name not in self.models:
            raise WorkbenchError(f"The project has no model named {name!r}.", "Add it with Project → Open model file.")
        if (name not in self.models and ("model", name) not in self._in_flight
                and self._when_started(lambda: self.load_model(name, then))):
            return None

        def submit() -> Job:
            spec = self.project.model_spec(entry)
            return self.runner.submit(f"Load model {name}", tasks.load_model, spec, arch=entry.get("arch"),
                                      trust=spec in self._trusted, fallback_shape=self._fallback_shape())
        return self._load_once("model", name, self.models, self.model_errors, self.model_loaded, self.model_failed,
                               submit, "Loading the model", then)

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
                       name: str | None = None) -> Job:
        """Load a user's model file; it joins the project only once it loaded cleanly."""
        spec = str(Path(path).resolve()) if os.path.exists(path) else path
        if trust:
            self._trusted.add(spec)
        job = self.runner.submit(f"Load model file {Path(path).name}", tasks.load_model, spec,
                                 arch=arch or None, trust=trust, fallback_shape=self._fallback_shape())

        def loaded(bundle: tasks.ModelBundle) -> None:
            model_name = self.unique_model_name(name or bundle.model.info.name or Path(path).stem)
            if self._write(lambda: self.project.add_model(spec, model_name, arch)):
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
        return ("evaluation", (model, dataset, split)) in self._in_flight

    def compatibility_problem(self, model: str, dataset: str) -> str | None:
        """Why a loaded model cannot run on a loaded dataset, from shapes and class counts alone."""
        bundle, data = self.models.get(model), self.datasets.get(dataset)
        if bundle is None or data is None:
            return None
        info = bundle.model.info
        if info.input_shape and tuple(info.input_shape) != tuple(data.image_shape):
            return (f"{model} takes images of shape {'×'.join(map(str, info.input_shape))}, but {data.name} has "
                    f"{'×'.join(map(str, data.image_shape))}.")
        if info.class_names and len(info.class_names) != data.num_classes:
            return f"{model} has {len(info.class_names)} classes, but {data.name} has {data.num_classes}."
        return None

    def evaluate(self, model: str, dataset: str, split: str, force: bool = False) -> Job | None:
        """Evaluate a model on a split: reuse a stored evaluation of the same weights, else compute it."""
        key: EvaluationKey = (model, dataset, split)
        if (key in self.evaluations and not force) or ("evaluation", key) in self._in_flight:
            return self._in_flight.get(("evaluation", key))
        if dataset not in self.datasets:
            return self.load_dataset(dataset, then=lambda _: self.evaluate(model, dataset, split, force))
        if model not in self.models:
            return self.load_model(model, then=lambda _: self.evaluate(model, dataset, split, force))
        bundle, data = self.models[model], self.datasets[dataset]
        self.evaluation_errors.pop(key, None)
        stored = None if force else self.project.find_artifact(
            "evaluation", model=model, model_fingerprint=bundle.fingerprint, dataset=data.name, split=split)
        if stored is not None:
            path = self.project.folder / self.project.artifacts()[stored]["file"]
            job = self.runner.submit(f"Load evaluation of {model} on {data.name}:{split}", tasks.load_evaluation,
                                     path, list(data.class_names), uses_device=False, report_errors=False)
            # A stored result that cannot be read is simply computed again.
            job.failed.connect(lambda exc: self._recompute(key))
        else:
            job = self.runner.submit(f"Evaluate {model} on {data.name}:{split}", tasks.evaluate, bundle.model,
                                     data, split)
            job.failed.connect(lambda exc: self._on_evaluation_failed(key, exc))
        self._in_flight[("evaluation", key)] = job
        job.finished.connect(lambda result: self._on_evaluation(key, result, bundle.fingerprint, data.name))
        job.cancelled.connect(lambda: self._on_evaluation_failed(key, _cancelled("The evaluation")))
        return job

    def _recompute(self, key: EvaluationKey) -> None:
        self._in_flight.pop(("evaluation", key), None)
        self.evaluate(*key, force=True)

    def _on_evaluation(self, key: EvaluationKey, result: dict, fingerprint: str, dataset_name: str) -> None:
        self._in_flight.pop(("evaluation", key), None)
        self.evaluations[key] = result
        model, _, split = key
        if not result.get("stored") and not self.project.read_only:
            saved = self._write(lambda: self.project.save_artifact(
                "evaluation", evaluation_name(model, dataset_name, split),
                {"confusion": result["confusion"], "predictions": result["predictions"]},
                model=model, model_fingerprint=fingerprint, dataset=dataset_name, split=split,
                accuracy=result["accuracy"], n=result["n"], device=result.get("device", "")), asked=False)
            if saved:
                self.project_changed.emit()
        self.evaluation_ready.emit(key)

    def _on_evaluation_failed(self, key: EvaluationKey, exc: BaseException) -> None:
        self._in_flight.pop(("evaluation", key), None)
        self.evaluation_errors[key] = exc
        self.evaluation_failed.emit(key)

    def delete_result(self, name: str) -> None:
        if self._write(lambda: self.project.delete_artifact(name)):
            self.evaluations = {k: v for k, v in self.evaluations.items()
                                if evaluation_name(k[0], self.dataset_title(k[1]), k[2]) != name}
            self.importances = {k: v for k, v in self.importances.items() if v.artifact != name}
            self.project_changed.emit()

    # --- neuron importance -------------------------------------------------------------------------

    def importance(self, model: str, dataset: str, layer: str):
        return self.importances.get((model, dataset, layer))

    def is_computing_importance(self, model: str, dataset: str, layer: str) -> bool:
        return ("importance", (model, dataset, layer)) in self._in_flight

    def compute_importance(self, model: str, dataset: str, layer: str, force: bool = False) -> Job | None:
        """Relevance of `layer`'s neurons per class over the correctly classified training images.

        The model and dataset must be loaded. The job reuses a stored result made the same way
        (unless `force`); a new result is saved here, on the UI thread, once the job hands it back,
        so a cancelled or failed run saves nothing.
        """
        key: ImportanceKey = (model, dataset, layer)
        flight = ("importance", key)
        if flight in self._in_flight:
            return self._in_flight[flight]
        if key in self.importances and not force:
            return None
        bundle, data = self.models[model], self.datasets[dataset]
        self.importance_errors.pop(key, None)
        job = self.runner.submit(f"Importance of {layer} in {model} ({data.name} train)", tasks.compute_importance,
                                 bundle.model, data, layer, tasks.ProjectSnapshot(self.project, reuse=not force),
                                 report_errors=False)
        self._in_flight[flight] = self.importance_jobs[key] = job
        job.partial.connect(lambda progress: self.importance_progress.emit(key, progress))
        job.finished.connect(lambda run: self._on_importance(key, run))
        job.failed.connect(lambda exc: self._on_importance_failed(key, exc))
        job.cancelled.connect(lambda: self._on_importance_failed(key, _cancelled("The relevance computation")))
        return job

    def _on_importance(self, key: ImportanceKey, run: tasks.StoredRun) -> None:
        self._in_flight.pop(("importance", key), None)
        self.importances[key] = run.result  # before storing: views refreshing on project_changed find it
        self.store(run)
        self.importance_ready.emit(key)

    def store(self, run: tasks.StoredRun) -> None:
        """Write the artifacts a job's `ProjectSnapshot` collected; a result that could not be
        stored (read-only folder, full disk) loses its artifact name but is still shown."""
        if not run.saves:
            return
        if self.project.read_only:
            run.result.artifact = None
            return
        saved = all(self._write(lambda save=save: self.project.save_artifact(save[0], save[1], save[2], **save[3]),
                                asked=False) for save in run.saves)
        if not saved:
            run.result.artifact = None
        self.project_changed.emit()

    def _on_importance_failed(self, key: ImportanceKey, exc: BaseException) -> None:
        self._in_flight.pop(("importance", key), None)
        self.importance_errors[key] = exc
        self.importance_failed.emit(key)

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
        data = self.datasets[dataset]
        job = self.runner.submit(f"Train {arch} on {data.name} ({epochs} epoch{'s' * (epochs != 1)})",
                                 tasks.train_and_save, arch, data, epochs, batch_size, lr, seed, out, name)

        def trained(result: tasks.TrainedModel) -> None:
            if self._write(lambda: self.project.add_model(str(result.path), result.name)):
                self.project_changed.emit()
                self.load_model(result.name)
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

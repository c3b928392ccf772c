"""The job functions the GUI runs: small compositions of core calls, with no Qt in them.

Each takes a `JobContext` first, like every core job, and runs on a worker thread. They return
plain results; the UI thread alone writes to the project (one writer, no locks), so nothing here
writes to `Project`: a core function that stores its result gets a `ProjectSnapshot`, which reads
like the project but hands the writes back for the session to make.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from workbench.core.data import Dataset
from workbench.core.errors import WorkbenchError
from workbench.core.jobs import JobContext, device_description
from workbench.core.model_io import LoadedModel
from workbench.core.project import Project


@dataclass
class StartupReport:
    device: str
    plugins: list = field(default_factory=list)  # PluginReport per plugin


@dataclass
class ModelBundle:
    """A loaded model with what the Model view shows about it."""

    spec: str
    model: LoadedModel
    catalogue: list = field(default_factory=list)  # LayerInfo per leaf layer
    catalogue_error: str = ""
    fingerprint: str = ""
    parameters: int = 0


@dataclass
class TrainedModel:
    path: Path
    name: str
    card: dict
    model: LoadedModel


def warm_up(ctx: JobContext) -> StartupReport:
    """Import PyTorch, pick the device and load plugins, off the UI thread, right after start-up."""
    from workbench.core.plugins import load_plugins

    ctx.progress(0, 2, "loading PyTorch")
    device = device_description(ctx.device)
    _leave_a_core_for_the_ui()
    ctx.progress(1, 2, "loading plugins")
    reports = load_plugins()
    ctx.progress(2, 2, "ready")
    return StartupReport(device, reports)


def _leave_a_core_for_the_ui() -> None:
    """Compute on all cores but one, so the window stays responsive while a job runs.

    Only when the user has not chosen a thread count (OMP_NUM_THREADS) and torch would use them all.
    """
    import torch

    cores = os.cpu_count() or 1
    if "OMP_NUM_THREADS" not in os.environ and cores > 1 and torch.get_num_threads() >= cores:
        torch.set_num_threads(cores - 1)


def load_dataset(ctx: JobContext, spec: str, download: bool = False) -> Dataset:
    """A dataset by registry name or path (the registry caches named ones); `download` only when asked."""
    from workbench.core.dataset_registry import load_dataset as load

    ctx.progress(0, 1, f"reading {spec}")
    dataset = load(spec, download=download)
    ctx.progress(1, 1, "loaded")
    return dataset


def load_model(ctx: JobContext, spec: str, arch: str | None = None, trust: bool = False,
               fallback_shape: tuple | None = None) -> ModelBundle:
    """Load a model and read off its layer catalogue and weight fingerprint."""
    from workbench.core.layers import layer_catalogue
    from workbench.core.model_io import load_model as load

    ctx.progress(0, 3, "reading weights")
    model = load(spec, arch=arch, trust=trust)
    ctx.progress(1, 3, "listing layers")
    bundle = ModelBundle(spec, model, parameters=sum(p.numel() for p in model.module.parameters()))
    shape = model.info.input_shape or fallback_shape
    if shape:
        try:
            bundle.catalogue = layer_catalogue(model.module, tuple(shape))
        except WorkbenchError as exc:
            bundle.catalogue_error = exc.message
    else:
        bundle.catalogue_error = "The model does not say what input shape it takes."
    ctx.progress(2, 3, "fingerprinting weights")
    bundle.fingerprint = model.fingerprint()
    ctx.progress(3, 3, "loaded")
    return bundle


def evaluate(ctx: JobContext, model: LoadedModel, dataset: Dataset, split: str) -> dict:
    """Accuracy, confusion matrix and predictions of `model` on one split (core `evaluate`)."""
    from workbench.core.training import evaluate as run

    result = run(ctx, model, dataset, split)
    result["device"] = str(ctx.device)
    return result


def load_evaluation(ctx: JobContext, path: Path, class_names: list[str]) -> dict:
    """An evaluation stored in the project, rebuilt into the shape `evaluate` returns."""
    from workbench.core.store import read_artifact

    ctx.progress(0, 1, f"reading {path.name}")
    artifact = read_artifact(path)
    confusion = np.asarray(artifact["confusion"], dtype=np.int64)
    predictions = np.asarray(artifact["predictions"], dtype=np.int64)
    k = len(class_names)
    if confusion.shape != (k, k):
        raise WorkbenchError(f"The stored evaluation {path.name} has a {confusion.shape} confusion matrix, "
                             f"but the dataset has {k} classes.", "Evaluate the model again.")
    totals = confusion.sum(axis=1)
    per_class = {name: (float(confusion[i, i] / totals[i]) if totals[i] else None)
                 for i, name in enumerate(class_names)}
    how = artifact.provenance
    n = int(confusion.sum())
    ctx.progress(1, 1, "loaded")
    return {"model": how.get("model"), "dataset": how.get("dataset"), "split": how.get("split"), "n": n,
            "accuracy": float(np.trace(confusion) / n) if n else float("nan"),
            "per_class_accuracy": per_class, "confusion": confusion, "predictions": predictions,
            "device": how.get("device", ""), "stored": True}


def train_and_save(ctx: JobContext, arch: str, dataset: Dataset, epochs: int, batch_size: int, lr: float,
                   seed: int, out: Path, name: str) -> TrainedModel:
    """Train, evaluate and save a checkpoint with its card; a cancelled run leaves no file behind."""
    from workbench.core import training

    model, card = training.train_and_save(ctx, arch, dataset, out, name, epochs=epochs, batch_size=batch_size,
                                          lr=lr, seed=seed, source="trained in the workbench GUI")
    return TrainedModel(out, name, card, model)


# --- neuron importance, galleries, inspection, ablation ------------------------------------------------


class ProjectSnapshot(Project):
    """The project as a job sees it: the artifact index as it was at submission, to find and read
    stored results; the artifacts the job saves are kept in `saves` for the UI thread to write."""

    def __init__(self, project: Project, reuse: bool = True):
        artifacts = dict(project.settings["artifacts"]) if reuse else {}
        super().__init__(project.folder, {**project.settings, "artifacts": artifacts}, [], read_only=True)
        self.saves: list[tuple[str, str, dict, dict]] = []  # (kind, name, arrays, provenance)
        self.writable = not project.read_only  # whether the session will be able to write the saves

    def ensure_writable(self) -> None:
        """A job checking before its work asks about the real project: the snapshot itself only collects."""
        if not self.writable:
            super().ensure_writable()

    def save_artifact(self, kind: str, name: str, arrays: dict[str, np.ndarray], **how) -> dict:
        self.saves.append((kind, name, arrays, how))
        return {"kind": kind, "provenance": how}


@dataclass
class StoredRun:
    """A core result with the artifacts its job asked to save (the session writes them)."""

    result: object
    saves: list = field(default_factory=list)  # (kind, name, arrays, provenance)


def compute_importance(ctx: JobContext, model: LoadedModel, dataset: Dataset, layer: str,
                       snapshot: ProjectSnapshot, batch_size: int = 512) -> StoredRun:
    """Per-class relevance of every neuron of `layer` over the correctly classified training images.

    A stored result made the same way is read back; a new one comes back with its artifact to save.
    """
    from workbench.core.importance import compute_importance as run

    result = run(ctx, model, dataset, layer, per_class=True, batch_size=batch_size, project=snapshot, split="train")
    return StoredRun(result, snapshot.saves)


def neuron_gallery(ctx: JobContext, model: LoadedModel, dataset: Dataset, layer: str, neuron: int, k: int = 9,
                   max_inputs: int | None = None):
    """The training images that make one neuron most relevant and most active (core `neuron_gallery`)."""
    from workbench.core.gallery import neuron_gallery as run

    return run(ctx, model, dataset, layer, neuron, k=k, split="train", max_inputs=max_inputs)


def explain_input(ctx: JobContext, model: LoadedModel, dataset: Dataset, split: str, index: int, layer: str,
                  neuron: int | None = None):
    """One image's input heatmap and its relevance per neuron of `layer` (core `explain_input`)."""
    from workbench.core.gallery import explain_input as run

    ctx.progress(0, 1, f"explaining {split} image #{index}")
    explanation = run(model, dataset, split, index, layer, neuron=neuron, device=ctx.device)
    ctx.progress(1, 1, "explained")
    return explanation


def ablation_check(ctx: JobContext, model: LoadedModel, dataset: Dataset, layer: str, important: list[int],
                   snapshot: ProjectSnapshot, draws: int = 5) -> StoredRun:
    """Test accuracy with the important neurons switched off, against random sets of the same size;
    a stored check made the same way is read back."""
    from workbench.core.ablation import ablation_check as run

    result = run(ctx, model, dataset, layer, [int(n) for n in important], draws=draws, split="test",
                 project=snapshot)
    return StoredRun(result, snapshot.saves)


# --- coverage -----------------------------------------------------------------------------------------


@dataclass
class SetCoverage:
    """Every criterion measured on one test set: results by criterion key, and the criteria that
    could not be measured with the error that stopped them (a group of criteria shares one error)."""

    results: dict = field(default_factory=dict)  # criterion key → core CoverageResult
    errors: dict = field(default_factory=dict)  # criterion key → WorkbenchError
    artifact: str | None = None  # set to None by the session when the results could not be stored


def measure_coverage_set(ctx: JobContext, model: LoadedModel, dataset: Dataset, test_split, test_indices,
                         layer: str, groups: list[tuple[str, ...]], m: int, importance,
                         snapshot: ProjectSnapshot) -> StoredRun:
    """Measure each group of criteria on one test set (core `measure_coverage`), a group at a time.

    Groups fail on their own: an m the layer cannot give stops IDC, a singular density stops surprise
    adequacy, and the other criteria are still measured. Fits and results stored in the project
    are reused; new ones come back as saves. `test_split` is a split name of `dataset` or a `Split`.
    """
    from workbench.core.coverage import measure_coverage

    project = snapshot if snapshot.writable else None  # a read-only project is measured, not stored
    measured = SetCoverage()
    for criteria in groups:
        try:
            measured.results.update(measure_coverage(
                ctx, model, dataset, layer, criteria, test_split=test_split, test_indices=test_indices, m=m,
                importance=importance if "idc" in criteria else None, project=project))
        except WorkbenchError as exc:
            measured.errors.update({name: exc for name in criteria})
    return StoredRun(measured, snapshot.saves)


def kmnc_sections(ctx: JobContext, model: LoadedModel, dataset: Dataset, test_split, test_indices, kmnc,
                  point: str, batch_size: int = 500) -> np.ndarray:
    """(inputs, neurons) the KMNC section each measured input covers at each neuron (−1: none), in the
    order the inputs were measured: which inputs fall in a cell of the neuron × section matrix.

    The activations are captured exactly as the coverage job captured them (whole layer tensors at the
    same activation point), so a cell's inputs are the ones its count was made of.
    """
    from workbench.core.activations import NeuronDefinition, stream_activations
    from workbench.core.layers import layer_catalogue

    split = dataset.split(test_split) if isinstance(test_split, str) else test_split
    shapes = {info.name: tuple(info.output_shape) for info in layer_catalogue(model.module, dataset.image_shape)}
    captures = {name: NeuronDefinition(name, point, "element") for name in kmnc.layers}
    total = len(split) if test_indices is None else len(test_indices)
    sections = np.full((total, kmnc.neurons), -1, dtype=np.int16 if kmnc.k < 32768 else np.int32)
    for start, acts, predictions in stream_activations(ctx, model.module, split, list(captures.values()),
                                                       dataset.image_shape, batch_size, test_indices):
        n = len(predictions)
        layers = {name: acts[d].reshape((n,) + shapes[name]) for name, d in captures.items()}
        sections[start:start + n] = kmnc.profile(layers)
    return sections

"""A model's evaluation on a split, stored in a project and read back: one place for its artifact.

The CLI's `evaluate --project` and the GUI's Model and Data views store and find evaluations here,
under one name (`evaluation_name`) and one set of provenance keys, so each finds the other's.
"""

from __future__ import annotations

import numpy as np

from workbench.core.data.class_order import class_order_check
from workbench.core.errors import WorkbenchError

KIND = "evaluation"


def evaluation_name(model: str, dataset: str, split: str) -> str:
    """The artifact name of an evaluation."""
    return f"evaluation {model} on {dataset}:{split}"


def inputs_identity(data) -> str:
    """What identifies the inputs of a test set that is not a split: a hash of its ids and labels, so a
    stored set made again under the same name is not matched with the old one's predictions."""
    import hashlib

    ids = getattr(data, "ids", None)
    digest = hashlib.sha256(np.asarray(data.labels, dtype=np.int64).tobytes())
    if ids is not None:
        digest.update("\n".join(map(str, ids)).encode())
    return digest.hexdigest()[:16]


def save_evaluation(project, model, dataset, split: str, result: dict, device: str = "", model_name: str = "",
                    inputs: str = "") -> str:
    """Store an `evaluate` result (its confusion matrix and predictions); returns the artifact name.

    `model_name` is the model's name in the project (default: its own); `inputs` identifies a stored
    test set's inputs (see `inputs_identity`)."""
    model_name = model_name or model.name
    name = evaluation_name(model_name, dataset.name, split)
    project.save_artifact(KIND, name, {"confusion": result["confusion"], "predictions": result["predictions"]},
                          model=model_name, model_fingerprint=model.fingerprint(), dataset=dataset.name, split=split,
                          accuracy=result["accuracy"], n=result["n"], device=device,
                          **({"inputs": inputs} if inputs else {}))
    return name


def find_evaluation(project, model: str, fingerprint: str, dataset: str, split: str, inputs: str = "") -> str | None:
    """The stored evaluation of these weights on this split (or these stored inputs), if any."""
    return project.find_artifact(KIND, model=model, model_fingerprint=fingerprint, dataset=dataset, split=split,
                                 **({"inputs": inputs} if inputs else {}))


def load_evaluation(project, name: str, class_names: list[str]) -> dict:
    """A stored evaluation, rebuilt into the shape `training.evaluate` returns (with `stored=True`)."""
    artifact = project.load_artifact(name, KIND)
    confusion = np.asarray(artifact.numbers("confusion", ndim=2), dtype=np.int64)
    k = len(class_names)
    if confusion.shape != (k, k):
        raise WorkbenchError(f"The stored evaluation {name!r} has a {confusion.shape} confusion matrix, "
                             f"but the dataset has {k} classes.", "Evaluate the model again.")
    predictions = np.asarray(artifact.numbers("predictions", ndim=1, length=int(confusion.sum())), dtype=np.int64)
    if (confusion < 0).any() or len(predictions) and not 0 <= predictions.min() <= predictions.max() < k:
        raise artifact.wrong_contents("its counts or predicted classes are out of range")
    totals = confusion.sum(axis=1)
    per_class = {c: (float(confusion[i, i] / totals[i]) if totals[i] else None) for i, c in enumerate(class_names)}
    how = artifact.provenance
    n = int(confusion.sum())
    return {"model": how.get("model"), "dataset": how.get("dataset"), "split": how.get("split"), "n": n,
            "accuracy": float(np.trace(confusion) / n) if n else float("nan"),
            "per_class_accuracy": per_class, "confusion": confusion, "predictions": predictions,
            "device": how.get("device", ""), "stored": True,
            "class_order_warning": class_order_check(confusion, class_names)}


def evaluate_stored(ctx, model, dataset, split="test", project=None, fingerprint: str | None = None,
                    model_name: str = "") -> dict:
    """The evaluation of `model` (called `model_name` in the project) on a split, or on a `TestSet`
    stored under its name: read back when the project holds one of these weights on these inputs (a
    damaged one is computed again), else computed and saved to `project`."""
    from workbench.core.models.training import evaluate

    fingerprint = fingerprint or model.fingerprint()
    model_name = model_name or model.name
    data, split = split, split if isinstance(split, str) else split.name
    inputs = "" if isinstance(data, str) else inputs_identity(data)
    if project is not None:
        found = find_evaluation(project, model_name, fingerprint, dataset.name, split, inputs)
        if found is not None:
            try:
                ctx.progress(0, 1, f"reading {found}")
                return load_evaluation(project, found, list(dataset.class_names))
            except WorkbenchError as exc:  # unreadable: evaluate again, replacing it
                ctx.notice(f"{exc.message} The model is evaluated again.")
    result = evaluate(ctx, model, dataset, data)
    result["device"] = str(ctx.device)
    if project is not None and not project.read_only:
        save_evaluation(project, model, dataset, split, result, result["device"], model_name, inputs)
    return result

"""The demo project the GUI opens when it is started without a project: no set-up needed.

It lives in the user data folder (or `WORKBENCH_DEMO_DIR`) and holds Fashion-MNIST with the bundled
LeNet-5. Where Fashion-MNIST is not installed it falls back to the MNIST subset and its LeNet-5,
and says so, with the line that installs Fashion-MNIST.
"""

from __future__ import annotations

import os
from pathlib import Path

from workbench.core.errors import WorkbenchError
from workbench.core.project.folder import SETTINGS, Project

DEMO_CHOICES = (("fashion-mnist", "lenet5-fashion"), ("mnist-5k", "lenet5-mnist5k"), ("digits", None))


def demo_folder() -> Path:
    override = os.environ.get("WORKBENCH_DEMO_DIR")
    if override:
        return Path(override)
    import platformdirs

    return Path(platformdirs.user_data_dir("dl-workbench")) / "demo"


def _available_datasets() -> dict[str, dict]:
    from workbench.core.data.registry import dataset_status

    return {s["name"]: s for s in dataset_status()}


def _available_models() -> set[str]:
    from workbench.core.models.model_io import bundled_models

    return {c["name"] for c in bundled_models() if c["available"]}


def open_demo_project(folder: Path | None = None) -> tuple[Project, list[tuple[str, str]]]:
    """Open (creating on first use) the demo project; returns it with notices (text, level) to show."""
    folder = folder or demo_folder()
    datasets = _available_datasets()
    fashion = datasets.get("fashion-mnist", {})
    install = fashion.get("install") or "sudo apt-get install dataset-fashion-mnist"
    if (folder / SETTINGS).exists():
        project = Project.open(folder)
        if project.datasets and datasets.get(project.datasets[0], {}).get("available", True):
            return project, []
        # The demo was made where a dataset existed that is gone now: use a fresh one beside it.
        folder = folder.with_name(folder.name + "-fallback")
        if (folder / SETTINGS).exists():
            project = Project.open(folder)
            return project, [_fallback_notice(project.datasets[0], datasets, install)]
    models = _available_models()
    for dataset, model in DEMO_CHOICES:
        if not datasets.get(dataset, {}).get("available"):
            continue
        notices = [] if dataset == "fashion-mnist" else [_fallback_notice(dataset, datasets, install)]
        chosen = [model] if model in models else []
        if model and not chosen:
            notices.append((f"The bundled model {model} is not available here, so the demo opens without a "
                            "model; train one in the Training view.", "warning"))
        return Project.create(folder, dataset, chosen), notices
    raise WorkbenchError("No dataset is available for the demo project.",
                         f"Install Fashion-MNIST with “{install}”.")


def _fallback_notice(dataset: str, datasets: dict, install: str) -> tuple[str, str]:
    title = datasets.get(dataset, {}).get("title", dataset)
    return (f"Fashion-MNIST is not installed here, so the demo uses {title} instead. "
            f"Install Fashion-MNIST with “{install}”.", "warning")

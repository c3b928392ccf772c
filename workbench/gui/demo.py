"""The demo project the GUI opens when it is started without a project: no set-up needed.

It lives in the user data folder (or `WORKBENCH_DEMO_DIR`) and holds Fashion-MNIST with the bundled
LeNet-5. Where Fashion-MNIST is not installed it falls back to the MNIST subset and its LeNet-5,
and says so, with the line that installs Fashion-MNIST.
"""

from __future__ import annotations

import os
from pathlib import Path

from workbench.core.project import SETTINGS, Project

DEMO_CHOICES = (("fashion-mnist", "lenet5-fashion"), ("mnist-5k", "lenet5-mnist5k"), ("digits", None))


def demo_folder() -> Path:
    override = os.environ.get("WORKBENCH_DEMO_DIR")
    if override:
        return Path(override)
    import platformdirs

    return Path(platformdirs.user_data_dir("dl-workbench")) / "demo"


def _available_datasets() -> dict[str, dict]:
    from workbench.core.dataset_registry import dataset_status

    return {s["name"]: s for s in dataset_status()}


def _available_models() -> set[str]:
    from workbench.core.model_io import bundled_models

    return {c["name"] for c in bundled_models() if c["available"]}


def open_demo_project(folder: Path | None = None) -> tuple[Project, list[tuple[str, str]]]:
    """Open (creating on first use) the demo project; returns it with notices (text, level) to show."""
    folder = folder or demo_folder()
    datasets = _available_datasets()
    notices: list[tuple[str, str]] = []
    fashion = datasets.get("fashion-mnist", {})
    if not fashion.get("available"):
        notices.append((f"Fashion-MNIST is not installed ({fashion.get('reason', 'not found')}). Install it with "
                        f"“{fashion.get('install') or 'sudo apt-get install dataset-fashion-mnist'}”; until then "
                        "the demo uses another dataset.", "warning"))
    if (folder / SETTINGS).exists():
        project = Project.open(folder)
        if project.datasets and datasets.get(project.datasets[0], {}).get("available", True):
            return project, notices
        # The demo was created where a dataset existed that is gone now: make a fresh one beside it.
        folder = folder.with_name(folder.name + "-fallback")
        if (folder / SETTINGS).exists():
            return Project.open(folder), notices
    models = _available_models()
    for dataset, model in DEMO_CHOICES:
        if datasets.get(dataset, {}).get("available"):
            chosen = [model] if model in models else []
            if model and not chosen:
                notices.append((f"The bundled model {model} is not available here; the demo opens without a model. "
                                "Train one in the Training view.", "warning"))
            return Project.create(folder, dataset, chosen), notices
    return Project.create(folder, "digits", []), notices

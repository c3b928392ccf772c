"""Generator folders: what a trained generator is on disk, written atomically and checked when read.

A generator folder holds

- `generator.json`: the kind (which says how to read the rest), class count, image shape, the
  kind's settings, the SHA-256 of the weights, the list of weight files and the card;
- the weights: `weights.safetensors`, or for the diffusion model diffusers' own `config.json`,
  `diffusion_pytorch_model.safetensors` and `scheduler_config.json`;
- `samples.npy`: the card's sample grid, uint8 (classes × per class × H × W);
- `training_state.pt` while it can be trained on: the optimisers' state and the epoch reached, for
  `--resume` (plain data and tensors, read with `torch.load(weights_only=True)`).

The whole folder is written under a temporary name and swapped into place (`store.atomic_folder`),
so a crash, a full disk or a cancelled job leaves the previous version whole. Nothing is unpickled
and nothing is fetched from a hub. Bundled generators are folders under `resources/generators/`.
See docs/methods/generation.md#the-generator-folder.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from workbench.core.errors import WorkbenchError
from workbench.core.generation.protocol import Generator, GeneratorCard
from workbench.core.generation.registry import create_generator, get_generator_kind
from workbench.core.model_io import weights_digest
from workbench.core.resources import resources_dir
from workbench.core.store import atomic_folder, write_json

DESCRIPTOR = "generator.json"
SAMPLES = "samples.npy"
TRAINING_STATE = "training_state.pt"
FORMAT = "workbench-generator"
VERSION = 1


def is_generator_folder(path) -> bool:
    return (Path(path) / DESCRIPTOR).is_file()


def save_generator(generator: Generator, folder, card: GeneratorCard, grid: np.ndarray | None = None,
                   training_state: dict | None = None) -> Path:
    """Write `generator` with its card (and sample grid, and training state for resuming) as the folder
    `folder`, replacing the version there atomically."""
    import torch

    folder = Path(folder)
    if folder.exists() and not folder.is_dir():
        raise WorkbenchError(f"{folder} is a file, not a folder.", "Choose a folder for the generator (--out DIR).")
    if folder.is_dir() and any(folder.iterdir()) and not is_generator_folder(folder):
        raise WorkbenchError(f"{folder} holds other files and is not a generator folder; they are left alone.",
                             "Choose a new or empty folder for the generator (--out DIR).")
    with atomic_folder(folder) as tmp:
        generator.save_weights(tmp)
        files = [f for f in generator.weight_files if (tmp / f).is_file()]
        missing = sorted(set(generator.weight_files) - set(files))
        if missing:
            raise WorkbenchError(f"The {generator.title or generator.kind} generator did not write {', '.join(missing)}.",
                                 "Fix the generator's save_weights.")
        if grid is not None:
            grid8 = np.clip(np.rint(np.asarray(grid, dtype=np.float32) * 255.0), 0, 255).astype(np.uint8)
            np.save(tmp / SAMPLES, grid8, allow_pickle=False)
            card.sample_grid = SAMPLES
        else:
            card.sample_grid = ""
        if training_state is not None:
            torch.save(training_state, tmp / TRAINING_STATE)
        write_json(tmp / DESCRIPTOR, {
            "format": FORMAT, "version": VERSION, "kind": generator.kind, "num_classes": generator.num_classes,
            "image_shape": list(generator.image_shape), "config": generator.config,
            "weights_sha256": weights_digest(generator.state_dict()), "files": files, "card": card.to_dict()},
            backup=False)
    generator.card, generator.folder = card, folder
    return folder


def write_samples(folder, grid: np.ndarray) -> None:
    """Replace the sample grid of a saved generator folder (atomically) and name it on the card."""
    from workbench.core.store import atomic_path

    folder = Path(folder)
    data = read_descriptor(folder)
    grid8 = np.clip(np.rint(np.asarray(grid, dtype=np.float32) * 255.0), 0, 255).astype(np.uint8)
    with atomic_path(folder / SAMPLES) as tmp:
        with open(tmp, "wb") as f:
            np.save(f, grid8, allow_pickle=False)
    card = data.get("card") or {}
    if card.get("sample_grid") != SAMPLES:
        card["sample_grid"] = SAMPLES
        write_json(folder / DESCRIPTOR, {**data, "card": card}, backup=False)


def bundled_generators() -> list[dict]:
    """The cards of the generators bundled under resources/generators/, with their paths."""
    root = resources_dir() / "generators"
    found = []
    for descriptor in sorted(root.glob(f"*/{DESCRIPTOR}")) if root.is_dir() else []:
        try:
            data = json.loads(descriptor.read_text())
            card = data.get("card") or {}
        except (OSError, ValueError, AttributeError):
            continue
        found.append({"name": descriptor.parent.name, "kind": data.get("kind"), "path": str(descriptor.parent),
                      "dataset": card.get("dataset"), "title": card.get("title"), "epochs": card.get("epochs"),
                      "seed_acceptance": (card.get("seed_acceptance") or {}).get("rate")})
    return found


def resolve_generator(spec) -> Path:
    """A bundled generator's name or a folder → the folder (a `Path` is always taken as a folder)."""
    text = str(spec).strip()
    if not text:
        raise WorkbenchError("No generator was named.", "Give a generator folder (made by train-generator).")
    for entry in [] if isinstance(spec, Path) else bundled_generators():
        if entry["name"] == text:
            return Path(entry["path"])
    path = Path(text)
    if not path.exists():
        names = ", ".join(e["name"] for e in bundled_generators()) or "none"
        raise WorkbenchError(f"No generator folder {text!r}.",
                             f"Give a folder made by `workbench train-generator`, or a bundled one ({names}).")
    if not path.is_dir():
        raise WorkbenchError(f"{path} is a file, not a generator folder.",
                             "Give the folder `workbench train-generator` wrote (it holds generator.json).")
    return path


def read_descriptor(folder: Path) -> dict:
    """The folder's generator.json, checked to be one this workbench reads."""
    path = Path(folder) / DESCRIPTOR
    if not path.is_file():
        raise WorkbenchError(f"{folder} is not a generator folder: it has no {DESCRIPTOR}.",
                             "Give the folder `workbench train-generator` wrote.")
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise WorkbenchError(f"{path} is damaged: it is not readable JSON.", "Train the generator again.",
                             details=str(exc)) from exc
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise WorkbenchError(f"{path} is not a workbench generator descriptor.", "Train the generator again.")
    version = data.get("version")
    if not isinstance(version, int) or isinstance(version, bool) or not 1 <= version <= VERSION:
        raise WorkbenchError(f"{path} has generator format {version!r}; this workbench reads 1 to {VERSION}.",
                             "Update the workbench to read it.")
    shape = data.get("image_shape")
    classes = data.get("num_classes")
    if not (isinstance(shape, list) and len(shape) == 3 and all(isinstance(s, int) and s > 0 for s in shape)) \
            or isinstance(classes, bool) or not isinstance(classes, int) or classes < 1 \
            or not isinstance(data.get("config"), dict) or not isinstance(data.get("kind"), str):
        raise WorkbenchError(f"{path} is damaged: its kind, class count, image shape or settings are missing.",
                             "Train the generator again.")
    return data


def load_generator(spec, num_classes: int | None = None, device=None) -> Generator:
    """Read a generator folder (or a bundled generator by name), checked whole: its files present, its
    weights matching the recorded hash, its classes `num_classes` when given. On the CPU unless `device`."""
    folder = resolve_generator(spec)
    data = read_descriptor(folder)
    try:
        kind = get_generator_kind(data["kind"])
    except WorkbenchError as exc:
        raise WorkbenchError(f"The generator in {folder} is of kind {data['kind']!r}, which this workbench does not "
                             "have.", f"Install the plugin that adds it. {exc.hint}") from exc
    expected = data.get("files") or list(getattr(kind.factory, "weight_files", ()))
    missing = [f for f in expected if not (folder / str(f)).is_file()]
    if missing:
        raise WorkbenchError(f"The generator folder {folder} is missing {', '.join(map(str, missing))}.",
                             "Copy the whole folder again, or train the generator again.")
    if num_classes is not None and data["num_classes"] != num_classes:
        raise WorkbenchError(f"The generator in {folder} has {data['num_classes']} classes, but {num_classes} "
                             "are needed here.", "Choose a generator trained on this dataset.")
    generator = create_generator(data["kind"], data["num_classes"], tuple(data["image_shape"]), **data["config"])
    generator.load_weights(folder)
    recorded = data.get("weights_sha256")
    if recorded and weights_digest(generator.state_dict()) != recorded:
        raise WorkbenchError(f"The generator in {folder} is damaged: its weights do not match the hash recorded "
                             "when it was saved.", "Restore the folder from a copy, or train the generator again.")
    generator.card = GeneratorCard.from_dict(data.get("card") or {"kind": data["kind"]})
    generator.folder = folder
    if device is not None:
        generator.to(device)
    return generator


def read_samples(folder) -> np.ndarray | None:
    """The card's sample grid as float32 in [0, 1] (classes × per class × H × W), or None."""
    path = Path(folder) / SAMPLES
    if not path.is_file():
        return None
    try:
        grid = np.load(path, allow_pickle=False)
    except (OSError, ValueError) as exc:
        raise WorkbenchError(f"{path} is damaged.", "Train the generator again.", details=str(exc)) from exc
    return np.ascontiguousarray(grid.astype(np.float32) / np.float32(255.0))


def read_training_state(folder) -> dict:
    """What `--resume` continues from: the optimisers' state and the epoch reached."""
    import torch

    path = Path(folder) / TRAINING_STATE
    if not path.is_file():
        raise WorkbenchError(f"{folder} holds no training state to resume from ({TRAINING_STATE} is missing).",
                             "Train a new generator instead (a bundled generator keeps no training state).")
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:
        raise WorkbenchError(f"{path} is damaged and cannot be resumed from.", "Train the generator again.",
                             details=str(exc)) from exc
    if not isinstance(state, dict) or not isinstance(state.get("epoch"), int) or \
            not isinstance(state.get("optimisers"), dict):
        raise WorkbenchError(f"{path} is not a workbench training state.", "Train the generator again.")
    return state

"""Generator folders: what a trained generator is on disk, written atomically and checked when read.

A generator folder holds

- `generator.json`: the kind (which says how to read the rest), class count, image shape, the
  kind's settings, the SHA-256 of the weights, the list of weight files and the card;
- the weights: `weights.safetensors`, or for the diffusion model diffusers' own `config.json`,
  `diffusion_pytorch_model.safetensors` and `scheduler_config.json`;
- `samples.npy`: the card's sample grid, uint8 (classes, per class, C, H, W);
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
from workbench.core.generation.descriptor import (FORMAT, MAX_CLASSES, MAX_VALUES, UNCHECKED, VERSION,
                                                  check_descriptor, check_settings, is_whole)
from workbench.core.generation.protocol import Generator, GeneratorCard
from workbench.core.generation.registry import create_generator, generator_kinds, get_generator_kind
from workbench.core.project.store import atomic_folder, write_json
from workbench.core.resources import resources_dir

DESCRIPTOR = "generator.json"
SAMPLES = "samples.npy"
TRAINING_STATE = "training_state.pt"


def is_generator_folder(path) -> bool:
    return (Path(path) / DESCRIPTOR).is_file()


def save_generator(generator: Generator, folder, card: GeneratorCard, grid: np.ndarray | None = None,
                   training_state: dict | None = None, half: bool = False) -> Path:
    """Write `generator` with its card (and sample grid, and training state for resuming) as the folder
    `folder`, replacing the version there atomically; `half` stores the weights as float16."""
    import torch

    folder = Path(folder)
    if folder.exists() and not folder.is_dir():
        raise WorkbenchError(f"{folder} is a file, not a folder.", "Choose a folder for the generator (--out DIR).")
    if folder.is_dir() and any(folder.iterdir()) and not is_generator_folder(folder):
        raise WorkbenchError(f"{folder} holds other files and is not a generator folder; they are left alone.",
                             "Choose a new or empty folder for the generator (--out DIR).")
    with atomic_folder(folder) as tmp:
        generator.save_weights(tmp, half=half)
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
            "weights_sha256": generator.weights_sha256(), "files": files, "card": card.to_dict()},
            backup=False)
    generator.card, generator.folder = card, folder
    return folder


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
                      "seed_acceptance": (card.get("seed_acceptance") or {}).get("rate"),
                      "warning": (card.get("seed_acceptance") or {}).get("warning") or ""})
    return found


def generator_folders(root) -> list[Path]:
    """The generator folders directly inside `root` (a project's generators/ folder), by name."""
    root = Path(root)
    return sorted(p for p in root.iterdir() if is_generator_folder(p)) if root.is_dir() else []


def listed_generators(*roots) -> list[dict]:
    """The bundled generators, then those in the folders `roots` (a project's generators/), each as
    {"name", "kind", "path", "dataset", "title", "epochs", "seed_acceptance", "warning", "bundled"}; a
    folder whose descriptor cannot be read is listed with a "problem" and a "hint"."""
    found = [{**entry, "bundled": True} for entry in bundled_generators()]
    for root in roots:
        for folder in generator_folders(root):
            try:
                data = read_descriptor(folder)
                card = data["card"]
                GeneratorCard.from_dict(card, str(folder / DESCRIPTOR))  # what the tile shows is checked too
                warnings = [(card.get("seed_acceptance") or {}).get("warning") or "",
                            UNCHECKED if data.get("weights_sha256") is None else ""]
                found.append({"name": folder.name, "kind": data["kind"], "path": str(folder),
                              "dataset": card.get("dataset"), "title": card.get("title"),
                              "epochs": card.get("epochs"), "bundled": False,
                              "seed_acceptance": (card.get("seed_acceptance") or {}).get("rate"),
                              "warning": " ".join(filter(None, warnings))})
            except WorkbenchError as exc:
                found.append({"name": folder.name, "path": str(folder), "bundled": False, "problem": exc.message,
                              "hint": exc.hint})
    return found


def load_generator_job(ctx, spec, num_classes: int | None = None) -> Generator:
    """`load_generator` as a job (the window's I/O lane): reading and hashing the weights."""
    ctx.progress(0, 1, f"reading generator {Path(str(spec)).name}")
    generator = load_generator(spec, num_classes)
    ctx.progress(1, 1, "read")
    return generator


def resolve_generator(spec, dataset: str | None = None) -> Path:
    """A bundled generator's name, a folder, or — with the `dataset` it is for — a generator kind (`vae`, `gan`,
    `diffusion`: that dataset's one bundled generator of the kind) → the folder (a `Path` is always a folder)."""
    text = str(spec).strip()
    if not text:
        raise WorkbenchError("No generator was named.", "Give a generator folder (made by train-generator).")
    path = Path(text)
    if path.is_dir():  # a folder that is there is what was meant, even if a bundled one has its name
        return path
    for entry in [] if isinstance(spec, Path) else bundled_generators():
        if entry["name"] == text:
            return Path(entry["path"])
    if dataset is not None and not isinstance(spec, Path) and text in {k.name for k in generator_kinds()}:
        return bundled_of_kind(text, dataset)
    if not path.exists():
        names = ", ".join(e["name"] for e in bundled_generators()) or "none"
        raise WorkbenchError(f"No generator folder {text!r}.",
                             f"Give a folder made by `workbench train-generator`, or a bundled one ({names}).")
    if not path.is_dir():
        raise WorkbenchError(f"{path} is a file, not a generator folder.",
                             "Give the folder `workbench train-generator` wrote (it holds generator.json).")
    return path


def bundled_of_kind(kind: str, dataset: str) -> Path:
    """The folder of `dataset`'s one bundled generator of `kind`; none or several is a refusal that lists them."""
    bundled = bundled_generators()
    fitting = [e for e in bundled if e["kind"] == kind and e["dataset"] == dataset]
    if len(fitting) == 1:
        return Path(fitting[0]["path"])
    if fitting:
        raise WorkbenchError(f"{dataset} has {len(fitting)} bundled {kind} generators: "
                             f"{', '.join(e['name'] for e in fitting)}.", "Name the one to use.")
    own = [f"{e['name']} ({e['kind']})" for e in bundled if e["dataset"] == dataset]
    raise WorkbenchError(f"{dataset} has no bundled {kind} generator.",
                         (f"Its bundled generators: {', '.join(own)}. " if own else "It has no bundled generator. ")
                         + f"Train one with `workbench train-generator --generator {kind} --data {dataset} --out DIR` "
                           "and name its folder.")


def read_descriptor(folder: Path) -> dict:
    """The folder's generator.json, every field checked (`descriptor.check_descriptor`)."""
    path = Path(folder) / DESCRIPTOR
    if not path.is_file():
        raise WorkbenchError(f"{folder} is not a generator folder: it has no {DESCRIPTOR}.",
                             "Give the folder `workbench train-generator` wrote.")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise WorkbenchError(f"{path} is damaged: it is not readable JSON.", "Train the generator again.",
                             details=str(exc)) from exc
    return check_descriptor(data, path)


def load_generator(spec, num_classes: int | None = None, device=None, dataset: str | None = None) -> Generator:
    """Read a generator folder (or a bundled generator by name, or by kind for `dataset`), checked whole: every
    descriptor field,
    its sizes against the weights' before memory is taken for them, its files present, its weights
    matching the recorded hash (or, with none recorded, their hash computed and said in
    `load_warnings`), its classes `num_classes` when given. On the CPU unless `device`."""
    folder = resolve_generator(spec, dataset)
    data = read_descriptor(folder)
    path = folder / DESCRIPTOR
    try:
        kind = get_generator_kind(data["kind"])
    except WorkbenchError as exc:
        raise WorkbenchError(f"{path}: the generator is of kind {data['kind']!r}, which this workbench does not "
                             "have.", f"Install the plugin that adds it, or correct the kind. {exc.hint}") from exc
    options = getattr(kind.factory, "options", None)
    defaults = {**(options if isinstance(options, dict) else {}), **kind.presets.get("default", {})}
    check_settings(path, kind.title, defaults, data["config"])
    card = GeneratorCard.from_dict(data["card"], str(path))
    expected = data.get("files") or list(getattr(kind.factory, "weight_files", ()))
    missing = [f for f in expected if not (folder / f).is_file()]
    if missing:
        raise WorkbenchError(f"The generator folder {folder} is missing {', '.join(missing)}.",
                             "Copy the whole folder again, or train the generator again.")
    if num_classes is not None and data["num_classes"] != num_classes:
        raise WorkbenchError(f"The generator in {folder} has {data['num_classes']} classes, but {num_classes} "
                             "are needed here.", "Choose a generator trained on this dataset.")
    check_sizes(folder, data)
    generator = create_generator(data["kind"], data["num_classes"], tuple(data["image_shape"]), seed=None,
                                 **data["config"])
    generator.load_weights(folder)
    digest = generator.weights_sha256()
    recorded = data.get("weights_sha256")
    if recorded is None:  # a hand-written card: loaded, and the user told what was not checked
        generator.load_warnings.append(
            f"{DESCRIPTOR} records no weights_sha256, so the weights were not checked against it (their SHA-256, "
            f"computed now: {digest}). Add it to {DESCRIPTOR} as weights_sha256 to have them checked from now on.")
    elif digest != recorded.lower():
        raise WorkbenchError(f"The generator in {folder} is damaged: its weights do not match the hash recorded "
                             f"when it was saved (weights_sha256 in {DESCRIPTOR}).",
                             "Restore the folder from a copy, or train the generator again.",
                             details=f"recorded {recorded}\ncomputed {digest}")
    if not card.class_names:
        card.class_names = [str(k) for k in range(generator.num_classes)]
    generator.card = card
    generator.folder = folder
    if device is not None:
        generator.to(device)
    return generator


def _meta_generator(data: dict, num_classes: int) -> Generator | None:
    """The descriptor's generator built on PyTorch's meta device: its weights' shapes, with no memory
    and no random initialisation behind them; None where the kind cannot be built so (a plugin's
    network that computes while it is built)."""
    import torch

    try:
        with torch.device("meta"), _skip_random_init():
            return create_generator(data["kind"], num_classes, tuple(data["image_shape"]), seed=None,
                                    **data["config"])
    except WorkbenchError:
        raise
    except Exception:
        return None


def check_sizes(folder: Path, data: dict) -> None:
    """Refuse a descriptor whose num_classes, image_shape or config do not fit the stored weights'
    shapes, and a latent of no or absurd length: before the network is built for real, so a card that
    asks for 10¹² classes costs nothing."""
    path = folder / DESCRIPTOR
    try:
        probe = _meta_generator(data, data["num_classes"])
    except WorkbenchError as exc:
        raise WorkbenchError(f"{path}: {exc.message}", exc.hint, details=exc.details) from exc
    if probe is None:
        return
    latent = probe.latent_dim
    if not is_whole(latent) or not 1 <= latent <= MAX_VALUES:
        raise WorkbenchError(f"{path}: its config gives a latent of {latent!r} values; a generator's latent has 1 "
                             f"to {MAX_VALUES:,}.", "Give the settings it was trained with, or train it again.")
    stored = probe.stored_shapes(folder)
    if stored is None:
        return
    own = {k: tuple(v.shape) for k, v in probe.state_dict().items()}
    differ = sorted(k for k in own.keys() | stored.keys() if own.get(k) != stored.get(k))
    if not differ:
        return
    listed = "; ".join(f"{k}: {DESCRIPTOR} gives {own.get(k, 'none')}, the file holds {stored.get(k, 'none')}"
                       for k in differ[:3]) + (f"; and {len(differ) - 3} more" if len(differ) > 3 else "")
    trained = _classes_of_weights(data, own, stored, differ)
    if trained is not None:
        raise WorkbenchError(f"{path}: num_classes is {data['num_classes']}, but the weights were trained for "
                             f"{trained} classes.", f"Set num_classes to {trained} (and list {trained} names in "
                             "card.class_names, or remove it).", details=listed)
    raise WorkbenchError(f"{path}: its num_classes, image_shape or config do not fit the weights stored beside it.",
                         "Give the values the generator was trained with, or train it again.", details=listed)


def _classes_of_weights(data: dict, own: dict, stored: dict, differ: list) -> int | None:
    """The class count the stored weights were trained for, when num_classes is all that differs: a
    count the differing shapes suggest (a size that differs by as much as the counts do: a table of
    classes may hold a row more, as a diffusion model's "no class"), under which the whole network fits."""
    guesses = {b - a + data["num_classes"] for k in differ if k in own and k in stored and len(own[k]) == len(stored[k])
               for a, b in zip(own[k], stored[k]) if a != b}
    for guess in sorted(g for g in guesses if 1 <= g <= MAX_CLASSES)[:8]:
        probe = _meta_generator(data, guess)
        if probe is not None and {k: tuple(v.shape) for k, v in probe.state_dict().items()} == stored:
            return guess
    return None


#: Random fills a meta tensor skips: PyTorch's meta kernels for them import its compiler, seconds of
#: work for a tensor that holds no values.
RANDOM_FILLS = {"normal_", "uniform_", "random_", "bernoulli_", "exponential_", "geometric_", "log_normal_", "cauchy_"}


def _skip_random_init():
    """A torch function mode (per thread: other threads' tensors are untouched) in which initialising
    a meta tensor does nothing."""
    from torch.overrides import TorchFunctionMode

    class SkipRandomInit(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            target = args[0] if args else kwargs.get("tensor")  # torch.nn.init passes it by name
            if getattr(target, "is_meta", False) and (getattr(func, "__module__", "") == "torch.nn.init"
                                                      or getattr(func, "__name__", "") in RANDOM_FILLS):
                return target
            return func(*args, **kwargs)

    return SkipRandomInit()


def read_samples(folder) -> np.ndarray | None:
    """The card's sample grid as float32 in [0, 1] (classes, per class, C, H, W), or None; a grid of
    another shape than the generator's classes and images is refused."""
    path = Path(folder) / SAMPLES
    if not path.is_file():
        return None
    try:
        grid = np.load(path, allow_pickle=False, mmap_mode="r")  # its header is checked before it is read
    except (OSError, ValueError) as exc:
        raise WorkbenchError(f"{path} is damaged.", "Train the generator again.", details=str(exc)) from exc
    data = read_descriptor(folder)
    expected = (data["num_classes"], *data["image_shape"])
    if grid.dtype != np.uint8 or grid.ndim != 5 or (grid.shape[0], *grid.shape[2:]) != expected:
        raise WorkbenchError(f"{path} holds {grid.dtype} samples of shape {grid.shape}, not the uint8 grid of "
                             f"{expected[0]} classes of {'×'.join(map(str, expected[1:]))} images {DESCRIPTOR} "
                             "describes.", "Resample in the Generators view, or train the generator again.")
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


HALF_CHECK_SAMPLES = 200  # latents decoded with both precisions to state what storing in float16 changes


def export_generator(ctx, source, dest, *, half: bool = False, measure: bool = False, dataset=None,
                     classifier=None) -> Path:
    """A copy of generator folder `source` for sharing or bundling, without its training state (resuming
    needs it, a search does not). With `half`, the weights are rounded to float16 and stored so (half
    the size), and its notes say how far the rounding moves the decoded pixels, measured on the same
    latents decoded before and after. With `half` or `measure` the card is measured again on the
    stored weights — latent range, seed acceptance (with `classifier`), sample grid. `dataset` gives
    the test images the VAE and the seed acceptance's real-image ceiling are measured on."""
    import copy

    import torch

    from workbench.core.generation.assessment import (decode_in_batches, encode_in_batches, measure_latent_range,
                                                      sample_grid, seed_acceptance)

    generator = load_generator(source, device=ctx.device)
    card = copy.deepcopy(generator.card)
    dest = Path(dest)
    if dest.resolve() == Path(generator.folder).resolve():
        raise WorkbenchError("The copy would replace the generator it is made from.", "Choose another folder.")
    images = None
    if dataset is not None:
        test = dataset.splits.get("test")
        images = test if test is not None and len(test) else dataset.split("train")
    measure = measure or half
    if generator.can_encode and images is None and measure:
        raise WorkbenchError(f"The {generator.title or generator.kind} generator is measured on encoded test "
                             "images, and no dataset was given.", f"Name its dataset ({card.dataset}).")
    grid = read_samples(generator.folder)
    if half:
        rng = torch.Generator().manual_seed(0)
        z = (encode_in_batches(ctx.quiet(), generator, images.tensor(range(min(HALF_CHECK_SAMPLES, len(images)))))
             if generator.can_encode else generator.sample_latent(HALF_CHECK_SAMPLES, rng))
        y = torch.arange(len(z)) % generator.num_classes if generator.conditional else None
        before = decode_in_batches(ctx.quiet(), generator, z, y)
        generator.round_to_half()
        difference = (decode_in_batches(ctx.quiet(), generator, z, y) - before).abs()
        card.notes = [*card.notes, f"Weights stored as float16 (half the file size): over {len(z)} decoded samples "
                                   f"the pixels (0 to 1) moved by at most {float(difference.max()):.2g}, "
                                   f"{float(difference.mean()):.1g} on average."]
    if measure:
        before_range, before_acceptance = card.latent_range or {}, card.seed_acceptance or {}
        card.latent_range = measure_latent_range(ctx.quiet(), generator, images, before_range.get("n", 1000),
                                                 card.seed, before_range.get("split") or "test").to_dict()
        card.seed_acceptance = None if classifier is None else seed_acceptance(
            ctx.quiet(), generator, classifier, images, before_acceptance.get("n", 500), card.seed).to_dict()
        grid = sample_grid(ctx.quiet(), generator, grid.shape[1] if grid is not None else 8, card.seed, images)
        card.notes = [*card.notes, "The latent range" + (", seed acceptance" if classifier is not None else "")
                      + " and samples were measured again on the stored weights when the folder was exported."]
    ctx.progress(1, 1, "saving")
    return save_generator(generator, dest, card, grid, half=half)

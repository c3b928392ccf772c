"""A generator folder's descriptor, `generator.json`: every field checked before anything is built.

The descriptor sizes what loading allocates (a class embedding of `num_classes` rows, images of
`image_shape`, the kind's `config`) and names the files read, so a hand-written or damaged one must
not be able to ask for a 10¹²-row table or a file outside the folder. Each refusal names the file,
the field, what is wrong and what to do. Whether the sizes fit the weights themselves is checked
when the folder is loaded (`storage.load_generator`), on PyTorch's meta device, before any memory
is taken for them. See docs/methods/generation.md#the-generator-folder.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

from workbench.core.data.dataset import MAX_CLASSES
from workbench.core.errors import WorkbenchError

FORMAT = "workbench-generator"
VERSION = 1
#: Image channels, and pixels along a side, of the images a generator makes.
MAX_CHANNELS = 64
MAX_SIDE = 4096
#: Values in one image, and in one latent vector (the genome a search mutates).
MAX_VALUES = 1 << 22
#: The largest whole number a kind's setting may hold (layer widths, step counts, …).
MAX_SETTING = 1_000_000
#: Settings that are the descriptor's own fields, never a kind's.
RESERVED = ("preset", "seed", "kind", "num_classes", "image_shape")

RETRAIN = "train the generator again (`workbench train-generator`)"
UNCHECKED = "Its generator.json records no weights_sha256: its weights are not checked when it is read."
SHA256 = re.compile(r"[0-9a-fA-F]{64}")


def is_whole(v) -> bool:
    """A JSON whole number (true and false are not numbers here)."""
    return isinstance(v, int) and not isinstance(v, bool)


def is_finite(v) -> bool:
    """A JSON number that is not NaN or infinite (Python's json module reads both)."""
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def shown(v) -> str:
    """A stored value as a refusal quotes it: in JSON's spelling, cut short."""
    try:
        text = json.dumps(v, allow_nan=True, ensure_ascii=False)
    except (TypeError, ValueError):
        text = repr(v)
    return text if len(text) <= 60 else text[:57] + "…"


def _refuse(path: Path, field: str, wrong: str, fix: str) -> WorkbenchError:
    return WorkbenchError(f"{path}: {field} {wrong}.", fix)


def check_descriptor(data, path: Path) -> dict:
    """`data` (read from `path`) if it is a descriptor this workbench reads; otherwise a refusal naming
    the field. The card's copies of kind, image_shape and config are checked against these fields (and
    filled in where missing); its other fields are checked by `GeneratorCard.from_dict`."""
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise WorkbenchError(f"{path} is not a workbench generator descriptor (its format is not {FORMAT!r}).",
                             f"Give the folder `workbench train-generator` wrote, or {RETRAIN}.")
    version = data.get("version")
    if not is_whole(version) or not 1 <= version <= VERSION:
        raise WorkbenchError(f"{path} has generator format {version!r}; this workbench reads 1 to {VERSION}.",
                             "Update the workbench to read it.")
    kind = data.get("kind")
    if not isinstance(kind, str) or not kind.strip():
        raise _refuse(path, "kind", "is missing" if kind is None else f"is {shown(kind)}, not a kind's name",
                      "Give the generator's kind (vae, gan, diffusion, or a plugin's; `workbench generators` lists "
                      f"them), or {RETRAIN}.")
    classes = check_classes(data.get("num_classes"), path)
    shape = check_image_shape(data.get("image_shape"), path)
    config = check_config(data.get("config"), path)
    check_hash(data.get("weights_sha256"), path)
    check_files(data.get("files"), path)
    if data.get("card") is None:  # a hand-written descriptor may leave the card out
        data["card"] = {}
    check_card_fits(data["card"], path, kind, classes, shape, config)
    return data


def check_classes(value, path: Path) -> int:
    fix = ("Set num_classes to the number of classes the generator was trained on (card.class_names lists one "
           f"name per class), or {RETRAIN}.")
    if value is None:
        raise _refuse(path, "num_classes", "is missing", fix)
    if not is_whole(value):
        raise _refuse(path, "num_classes", f"is {shown(value)}, not a whole number", fix)
    if not 1 <= value <= MAX_CLASSES:
        raise _refuse(path, "num_classes", f"is {value}; a generator has 1 to {MAX_CLASSES:,} classes", fix)
    return value


def check_image_shape(value, path: Path) -> tuple:
    fix = f"Give image_shape as [channels, height, width] of the images it makes, e.g. [1, 28, 28], or {RETRAIN}."
    if value is None:
        raise _refuse(path, "image_shape", "is missing", fix)
    if not (isinstance(value, list) and len(value) == 3 and all(is_whole(s) for s in value)):
        raise _refuse(path, "image_shape", f"is {shown(value)}, not three whole numbers", fix)
    c, h, w = value
    if not (1 <= c <= MAX_CHANNELS and 1 <= h <= MAX_SIDE and 1 <= w <= MAX_SIDE) or c * h * w > MAX_VALUES:
        raise _refuse(path, "image_shape", f"is {value}; images have 1 to {MAX_CHANNELS} channels, sides of 1 to "
                      f"{MAX_SIDE} pixels and at most {MAX_VALUES:,} values", fix)
    return (c, h, w)


def check_config(value, path: Path) -> dict:
    """The kind's settings: an object of JSON values whose numbers are finite and of a sane size (the
    types each setting needs are checked against the kind's own defaults by `check_settings`)."""
    fix = f"Give the settings it was trained with (`workbench generators` lists each kind's presets), or {RETRAIN}."
    if value is None:
        raise _refuse(path, "config", "is missing", fix)
    if not isinstance(value, dict):
        raise _refuse(path, "config", f"is {shown(value)}, not an object of settings", fix)
    reserved = sorted(set(RESERVED) & set(value))
    if reserved:
        raise _refuse(path, "config", f"names {', '.join(reserved)}, which are the descriptor's own fields",
                      "Remove them from config (num_classes and image_shape stand beside it).")
    for key, setting in value.items():
        for item in setting if isinstance(setting, list) else [setting]:
            if isinstance(item, float) and not math.isfinite(item):
                raise _refuse(path, f"config.{key}", f"holds {shown(item)}", fix)
            if isinstance(item, (int, float)) and not isinstance(item, bool) and abs(item) > MAX_SETTING:
                raise _refuse(path, f"config.{key}", f"is {shown(item)}, beyond the {MAX_SETTING:,} a setting may be",
                              fix)
            if not isinstance(item, (int, float, str, bool)) and item is not None:
                raise _refuse(path, f"config.{key}", f"holds {shown(item)}, not a number, text or true/false", fix)
    return value


def check_settings(path: Path, kind_name: str, defaults: dict, config: dict) -> None:
    """Each setting known to the kind (when it declares its settings: `defaults`, each with its default)
    and of the type its default has (true/false is no number, a whole number no fraction, a list a
    list of the same)."""
    unknown = sorted(set(config) - set(defaults))
    if unknown and defaults:  # a plugin's factory that declares no settings takes what it is given
        raise _refuse(path, "config", f"names {', '.join(map(repr, unknown))}, which the {kind_name} generator "
                      "does not have", f"Its settings: {', '.join(defaults) or 'none'}. Remove the others.")
    for key, value in config.items():
        wrong = _type_problem(defaults[key], value) if key in defaults else ""
        if wrong:
            raise _refuse(path, f"config.{key}", f"is {shown(value)}; {wrong}",
                          f"Give the value it was trained with, or {RETRAIN}.")


def _type_problem(default, value) -> str:
    if isinstance(default, bool):
        return "" if isinstance(value, bool) else "expected true or false"
    if is_whole(default):
        if not is_whole(value):
            return "expected a whole number"
        return "" if value >= 0 or default < 0 else "expected a whole number, 0 or more"
    if isinstance(default, float):
        return "" if isinstance(value, (int, float)) and not isinstance(value, bool) else "expected a number"
    if isinstance(default, str):
        return "" if isinstance(value, str) else "expected text"
    if isinstance(default, list):
        if not isinstance(value, list) or not value:
            return "expected a list"
        inner = next((_type_problem(default[0], v) for v in value if default and _type_problem(default[0], v)), "")
        return f"each item: {inner}" if inner else ""
    return ""


def check_hash(value, path: Path) -> None:
    if value is not None and not (isinstance(value, str) and SHA256.fullmatch(value)):
        raise _refuse(path, "weights_sha256", f"is {shown(value)}, not a SHA-256 (64 hexadecimal digits)",
                      "Give the hash `workbench generators DIR` prints for the folder, or remove the field (the "
                      "weights are then loaded unchecked, and their hash is printed).")


def check_files(value, path: Path) -> None:
    """The weight files' names: names inside the folder (a subfolder's file as `sub/name`), never a path out of it."""
    if value is None:
        return
    fix = f"List the weight files by their names in the folder, e.g. [\"weights.safetensors\"], or {RETRAIN}."
    if not isinstance(value, list) or not all(isinstance(f, str) for f in value):
        raise _refuse(path, "files", f"is {shown(value)}, not a list of file names", fix)
    outside = next((f for f in value if "\\" in f or Path(f).is_absolute()
                    or any(part in ("", ".", "..") for part in f.split("/"))), None)
    if outside is not None:
        raise _refuse(path, "files", f"names {shown(outside)}, which is not a file name inside the folder", fix)


def check_card_fits(card, path: Path, kind: str, classes: int, shape: tuple, config: dict) -> None:
    """The card's copies of the descriptor's fields agree with them; missing ones are filled in."""
    if not isinstance(card, dict):
        raise _refuse(path, "card", f"is {shown(card)}, not an object", f"Give card as an object, or {RETRAIN}.")
    card.setdefault("kind", kind)
    if card["kind"] != kind:
        raise _refuse(path, "card.kind", f"is {shown(card['kind'])}, but kind is {shown(kind)}",
                      "Make them the same (kind decides how the weights are read).")
    if card.get("image_shape") is None:
        card["image_shape"] = list(shape)
    elif card["image_shape"] != list(shape):
        raise _refuse(path, "card.image_shape", f"is {shown(card['image_shape'])}, but image_shape is {list(shape)}",
                      "Make them the same: the shape of the images the generator makes.")
    if not card.get("config"):
        card["config"] = dict(config)
    elif card["config"] != config:
        raise _refuse(path, "card.config", "differs from config", "Make them the same (config is what the network "
                      "is built with; the card's copy is what is shown), or remove card.config.")
    names = card.get("class_names")
    if names:  # no names: the classes are shown by number
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            raise _refuse(path, "card.class_names", f"is {shown(names)}, not a list of names (text)",
                          "List one name per class, in the order of the class numbers, or remove it.")
        if len(names) != classes:
            raise _refuse(path, "card.class_names", f"lists {len(names)} names, but num_classes is {classes}",
                          "List one name per class (or remove card.class_names to number the classes), or correct "
                          "num_classes.")

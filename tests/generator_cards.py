"""Generator folders with one thing wrong in generator.json, shared by the core, CLI and GUI tests.

`tiny_folder` writes an untrained tiny generator (its weights and hash as `save_generator` writes
them); `edited` copies it with one change to its descriptor. `BAD_CARDS` holds one case per class
of bad input: (id, kind, change, field the refusal names, words it says).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

TINY = {"vae": {"h_dim": 64, "z_dim": 8}, "gan": {"g_channels": [16, 8], "d_channels": [8, 16]}}
CLASS_NAMES = [f"class {k}" for k in range(10)]


def tiny_folder(root: Path, kind: str) -> Path:
    from workbench.core.generation.protocol import GeneratorCard
    from workbench.core.generation.registry import create_generator
    from workbench.core.generation.storage import save_generator

    generator = create_generator(kind, 10, (1, 28, 28), **TINY[kind])
    card = GeneratorCard(kind=kind, title=f"tiny {kind}", dataset="fashion-tiny", class_names=list(CLASS_NAMES),
                         config=dict(generator.config), complete=True, epochs=1, epochs_planned=1)
    return save_generator(generator, Path(root) / kind, card)


def edited(source: Path, dest: Path, change) -> Path:
    """A copy of folder `source` at `dest` whose generator.json `change(data)` altered in place."""
    shutil.copytree(source, dest)
    path = dest / "generator.json"
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data))  # NaN and Infinity as Python's json writes (and reads) them
    return dest


def _pop(*keys):
    def change(data):
        target = data
        for key in keys[:-1]:
            target = target[key]
        target.pop(keys[-1])
    return change


def _set(*keys, value):
    def change(data):
        target = data
        for key in keys[:-1]:
            target = target[key]
        target[keys[-1]] = value
    return change


def _config(**settings):
    """The kind's settings changed, in config and in the card's copy alike."""
    def change(data):
        data["config"].update(settings)
        data["card"]["config"].update(settings)
    return change


def _classes(n):
    """num_classes changed, the card's names left out (so the count is all that differs)."""
    def change(data):
        data["num_classes"] = n
        data["card"].pop("class_names")
    return change


def _both(**fields):
    def change(data):
        data.update(fields)
        data["card"].update(fields)
    return change


LATENT = {"low": -3.0, "high": 3.0, "range": 6.0, "extent_high": 0.006, "extent_low": 0.0006, "n": 10,
          "source": "prior draws"}

BAD_CARDS = [
    # missing fields
    ("no-num-classes", "gan", _pop("num_classes"), "num_classes", ["is missing"]),
    ("no-image-shape", "gan", _pop("image_shape"), "image_shape", ["is missing"]),
    ("no-config", "vae", _pop("config"), "config", ["is missing"]),
    ("no-kind", "vae", _pop("kind"), "kind", ["is missing"]),
    # wrong types
    ("classes-bool", "gan", _set("num_classes", value=True), "num_classes", ["is true, not a whole number"]),
    ("classes-float", "gan", _set("num_classes", value=10.0), "num_classes", ["is 10.0, not a whole number"]),
    ("classes-text", "gan", _set("num_classes", value="10"), "num_classes", ['is "10", not a whole number']),
    ("shape-text", "vae", _set("image_shape", value="1x28x28"), "image_shape", ["not three whole numbers"]),
    ("config-list", "vae", _set("config", value=[64, 8]), "config", ["not an object of settings"]),
    ("setting-bool", "vae", _config(z_dim=True), "config.z_dim", ["is true; expected a whole number"]),
    ("setting-fraction", "gan", _config(z_dim=8.5), "config.z_dim", ["is 8.5; expected a whole number"]),
    ("setting-unknown", "gan", _config(depth=3), "config", ["names 'depth'", "does not have"]),
    ("hash-number", "gan", _set("weights_sha256", value=5), "weights_sha256", ["not a SHA-256"]),
    ("names-numbers", "gan", _set("card", "class_names", value=list(range(10))), "card.class_names",
     ["not a list of names"]),
    ("lr-text", "vae", _set("card", "lr", value="fast"), "card.lr", ['is "fast"; expected a finite number']),
    ("epochs-bool", "vae", _set("card", "epochs", value=True), "card.epochs", ["expected a whole number"]),
    ("complete-text", "vae", _set("card", "complete", value="yes"), "card.complete", ["expected true or false"]),
    ("files-text", "gan", _set("files", value="weights.safetensors"), "files", ["not a list of file names"]),
    # out of range
    ("classes-zero", "gan", _set("num_classes", value=0), "num_classes", ["is 0; a generator has 1 to"]),
    ("classes-huge", "gan", _set("num_classes", value=10 ** 12), "num_classes",
     ["is 1000000000000; a generator has 1 to 100,000 classes"]),
    ("shape-zero", "vae", _both(image_shape=[1, 28, 0]), "image_shape", ["is [1, 28, 0]; images have"]),
    ("shape-huge", "vae", _both(image_shape=[3, 4096, 4096]), "image_shape", ["at most 4,194,304 values"]),
    ("setting-huge", "vae", _config(z_dim=10 ** 9), "config.z_dim", ["is 1000000000, beyond the 1,000,000"]),
    ("setting-nan", "vae", _config(h_dim=float("nan")), "config.h_dim", ["holds NaN"]),
    ("setting-negative", "vae", _config(z_dim=-8), "config.z_dim", ["expected a whole number, 0 or more"]),
    ("latent-zero", "vae", _config(z_dim=0), "config", ["latent of 0 values"]),
    ("lr-nan", "vae", _set("card", "lr", value=float("nan")), "card.lr", ["is NaN; expected a finite number"]),
    ("seconds-inf", "vae", _set("card", "seconds", value=float("inf")), "card.seconds", ["is Infinity"]),
    ("range-reversed", "vae", _set("card", "latent_range", value={**LATENT, "low": 3.0, "high": -3.0}),
     "card.latent_range", ["low 3 not below high -3"]),
    ("range-nan", "gan", _set("card", "latent_range", value={**LATENT, "high": float("nan")}),
     "card.latent_range.high", ["is NaN"]),
    ("acceptance-share", "gan", _set("card", "seed_acceptance", value={"classifier": "lenet5-fashion", "rate": 2,
                                                                        "n": 10, "samples": "samples"}),
     "card.seed_acceptance.rate", ["expected a share from 0 to 1"]),
    ("file-outside", "gan", _set("files", value=["../weights.safetensors"]), "files",
     ["not a file name inside the folder"]),
    # inconsistent with each other or with the weights
    ("names-too-few", "gan", _set("card", "class_names", value=["a", "b", "c"]), "card.class_names",
     ["lists 3 names, but num_classes is 10"]),
    ("classes-not-the-weights", "gan", _classes(12), "num_classes",
     ["is 12, but the weights were trained for 10 classes"]),
    ("classes-most-allowed", "gan", _classes(100_000), "num_classes",
     ["is 100000, but the weights were trained for 10 classes"]),
    ("setting-not-the-weights", "vae", _config(z_dim=9), "config", ["do not fit the weights stored beside it"]),
    ("shape-not-the-weights", "vae", _both(image_shape=[3, 28, 28]), "image_shape",
     ["do not fit the weights stored beside it"]),
    ("card-kind", "vae", _set("card", "kind", value="gan"), "card.kind", ['is "gan", but kind is "vae"']),
    ("card-shape", "vae", _set("card", "image_shape", value=[1, 32, 32]), "card.image_shape",
     ["is [1, 32, 32], but image_shape is [1, 28, 28]"]),
    ("unknown-kind", "vae", _both(kind="flow"), "kind", ["of kind 'flow', which this workbench does not have"]),
    ("hash-mismatch", "gan", _set("weights_sha256", value="0" * 64), "weights_sha256",
     ["damaged: its weights do not match the hash recorded"]),
]

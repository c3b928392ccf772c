"""A generator folder's generator.json is checked field by field before anything is built: each class
of bad input (a missing field, a wrong type, a value out of range, a value inconsistent with another
or with the weights, a hash that does not match) is refused naming the file, the field, what is
wrong and what to do; a card without a hash loads, and says the weights were not checked."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
from generator_cards import BAD_CARDS, CLASS_NAMES, edited, tiny_folder

from workbench.core.errors import WorkbenchError
from workbench.core.generation.storage import listed_generators, load_generator, read_samples
from workbench.core.models.model_io import weights_digest


KNOWN_AT_LOAD = {"setting-bool", "setting-fraction", "setting-unknown", "setting-negative", "latent-zero",
                 "setting-not-the-weights", "shape-not-the-weights", "classes-not-the-weights",
                 "classes-most-allowed", "unknown-kind", "hash-mismatch"}


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("generators")
    return {kind: tiny_folder(root, kind) for kind in ("vae", "gan")}


@pytest.mark.parametrize("case, kind, change, field, words", BAD_CARDS, ids=[c[0] for c in BAD_CARDS])
def test_a_bad_descriptor_is_refused_naming_the_file_and_the_field(folders, tmp_path, case, kind, change, field,
                                                                   words):
    folder = edited(folders[kind], tmp_path / case, change)
    with pytest.raises(WorkbenchError) as raised:
        load_generator(folder)
    error = raised.value
    assert str(folder) in error.message and field in error.message, error.message
    for word in words:
        assert word in error.message, error.message
    assert error.hint and "Error" not in error.message  # what to do; no exception's class name
    # The listing the Generators view shows reads generator.json alone: it names the same problem, unless
    # only the kind's settings or the weights can tell.
    listed = next(e for e in listed_generators(tmp_path) if e["name"] == case)
    if case in KNOWN_AT_LOAD:
        assert "problem" not in listed
    else:
        assert listed["problem"] == error.message and listed["hint"] == error.hint


def test_a_card_without_a_hash_loads_and_says_the_weights_were_not_checked(folders, tmp_path):
    folder = edited(folders["gan"], tmp_path / "no-hash", lambda data: data.pop("weights_sha256"))
    generator = load_generator(folder)
    digest = weights_digest(generator.state_dict())
    assert generator.load_warnings == [
        f"generator.json records no weights_sha256, so the weights were not checked against it (their SHA-256, "
        f"computed now: {digest}). Add it to generator.json as weights_sha256 to have them checked from now on."]
    assert digest == json.loads((folders["gan"] / "generator.json").read_text())["weights_sha256"]
    listed = next(e for e in listed_generators(tmp_path) if e["name"] == "no-hash")
    assert "records no weights_sha256" in listed["warning"] and "problem" not in listed
    # The hash it printed, added to the card, is checked from then on.
    path = folder / "generator.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), "weights_sha256": digest}))
    assert load_generator(folder).load_warnings == []


def test_a_folder_with_its_hash_loads_without_a_warning(folders):
    generator = load_generator(folders["vae"])
    assert generator.load_warnings == [] and generator.card.class_names == CLASS_NAMES


def test_a_hand_written_card_with_only_the_needed_fields_loads(folders, tmp_path):
    """num_classes, image_shape, kind and config are all a card needs; the classes are numbered."""
    def minimal(data):
        for key in ("weights_sha256", "files", "card"):
            data.pop(key)
    generator = load_generator(edited(folders["vae"], tmp_path / "minimal", minimal))
    assert generator.card.class_names == [str(k) for k in range(10)] and generator.card.kind == "vae"
    assert generator.card.image_shape == [1, 28, 28] and generator.card.config == {"h_dim": 64, "z_dim": 8}
    assert len(generator.load_warnings) == 1


def test_a_class_count_far_beyond_the_weights_is_refused_before_memory_is_taken(folders, tmp_path, monkeypatch):
    """100,000 classes is within bounds, but building the cDCGAN for it would take 300 MB for its class
    embeddings: the shapes are compared on PyTorch's meta device first, and nothing real is built."""
    import torch

    from workbench.core.generation import storage

    devices = []  # where each network was built: a tensor made then lands on the default device
    real = storage.create_generator
    monkeypatch.setattr(storage, "create_generator",
                        lambda *a, **k: devices.append(torch.empty(0).device.type) or real(*a, **k))
    folder = edited(folders["gan"], tmp_path / "many", lambda d: (d.update(num_classes=100_000),
                                                                  d["card"].pop("class_names")))
    with pytest.raises(WorkbenchError, match="trained for 10 classes") as raised:
        load_generator(folder)
    assert "g_embed.weight: generator.json gives (100000, 10), the file holds (10, 10)" in raised.value.details
    assert devices == ["meta", "meta"]  # the card's sizes, then the class count the weights fit


def test_a_sample_grid_of_another_shape_is_refused(folders, tmp_path):
    folder = tmp_path / "grid"
    shutil.copytree(folders["gan"], folder)
    np.save(folder / "samples.npy", np.zeros((3, 2, 1, 28, 28), np.uint8))
    with pytest.raises(WorkbenchError, match=r"not the uint8 grid of 10 classes of 1×28×28 images") as raised:
        read_samples(folder)
    assert "Resample" in raised.value.hint
    np.save(folder / "samples.npy", np.zeros((10, 2, 1, 28, 28), np.uint8))
    assert read_samples(folder).shape == (10, 2, 1, 28, 28)


def test_a_diffusers_config_of_other_sizes_is_refused_before_diffusers_builds_it(tmp_path, tiny_generators):
    """The diffusion model's weights come with diffusers' own config.json, which sizes what diffusers
    builds: sizes that differ from generator.json's are refused before it is read."""
    from workbench.core.generation.protocol import GeneratorCard
    from workbench.core.generation.registry import create_generator
    from workbench.core.generation.storage import save_generator

    generator = create_generator("diffusion", 10, (1, 28, 28), **tiny_generators["diffusion"])
    folder = save_generator(generator, tmp_path / "dm", GeneratorCard(kind="diffusion", config=dict(generator.config)))
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "num_class_embeds": 10 ** 9}))
    with pytest.raises(WorkbenchError, match="not the one its generator.json describes") as raised:
        load_generator(folder)
    assert "num_class_embeds: 1000000000 vs 11" in raised.value.message  # its classes and "no class"

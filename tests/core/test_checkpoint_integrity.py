"""Checkpoints record a hash of their weights; a damaged file is refused, not loaded with wrong
weights, and a checkpoint from a newer workbench is refused."""

from __future__ import annotations

import json
import shutil

import pytest
import torch

from workbench.core.errors import WorkbenchError
from workbench.core.models.model_io import CHECKPOINT_VERSION, load_model, save_checkpoint, weights_digest
from workbench.core.resources import resources_dir


def _flip_inside_weights(path, tensor: torch.Tensor, count: int = 16) -> None:
    """Flip `count` bytes in the middle of `tensor`'s data where it lies in the file."""
    raw = bytearray(path.read_bytes())
    data = tensor.detach().cpu().contiguous().numpy().tobytes()
    at = raw.find(data[:64])
    assert at >= 0, "the tensor's bytes are stored as they are"
    middle = at + len(data) // 2
    for i in range(middle, middle + count):
        raw[i] ^= 0xFF
    path.write_bytes(bytes(raw))


@pytest.fixture
def checkpoint(tmp_path, digits_model):
    info = {"name": "digits", "arch": "digits-net", "class_names": digits_model.info.class_names,
            "input_shape": [1, 8, 8]}
    return save_checkpoint(tmp_path / "digits.pt", digits_model.module, "digits-net", info), digits_model


def test_a_checkpoint_records_the_hash_of_its_weights(checkpoint):
    path, model = checkpoint
    payload = torch.load(path, weights_only=True)
    assert payload["weights_sha256"] == weights_digest(model.module.state_dict())
    loaded = load_model(path)
    assert loaded.fingerprint() == payload["weights_sha256"][:16] == model.fingerprint()


def test_flipped_bytes_inside_the_weights_are_refused(checkpoint):
    path, model = checkpoint
    _flip_inside_weights(path, model.module.state_dict()["fc1.weight"])
    with pytest.raises(WorkbenchError, match="damaged") as caught:
        load_model(path)
    assert "hash" in caught.value.message


def test_a_checkpoint_from_a_newer_workbench_is_refused(checkpoint):
    path, _ = checkpoint
    payload = torch.load(path, weights_only=True)
    for version in (CHECKPOINT_VERSION + 1, "2", None):
        payload["version"] = version
        torch.save(payload, path)
        with pytest.raises(WorkbenchError, match="checkpoint format"):
            load_model(path)


def test_the_bundled_weights_are_checked_against_their_cards(tmp_path):
    card = json.loads((resources_dir() / "models" / "lenet5-fashion.json").read_text())
    assert len(card["weights_sha256"]) == 64
    model = load_model("lenet5-fashion")
    assert model.fingerprint() == card["weights_sha256"][:16]
    copy = tmp_path / "lenet5-fashion.pt"
    shutil.copy(resources_dir() / "models" / "lenet5-fashion.pt", copy)
    (tmp_path / "lenet5-fashion.json").write_text(json.dumps(card))  # the card beside the copy
    _flip_inside_weights(copy, model.module.state_dict()["fc1.weight"])
    with pytest.raises(WorkbenchError, match="damaged"):
        load_model(copy)


def test_safetensors_weights_are_checked_against_a_card_in_the_modules_order(tmp_path, digits_model):
    from safetensors.torch import save_file

    from workbench.core.models.model_io import weights_digest

    state = digits_model.module.state_dict()
    save_file(state, str(tmp_path / "w.safetensors"))
    card = {"arch": "digits-net", "input_shape": [1, 8, 8], "weights_sha256": weights_digest(state)}
    (tmp_path / "w.json").write_text(json.dumps(card))
    assert load_model(tmp_path / "w.safetensors").fingerprint() == digits_model.fingerprint()
    card["weights_sha256"] = "0" * 64
    (tmp_path / "w.json").write_text(json.dumps(card))
    with pytest.raises(WorkbenchError, match="damaged"):
        load_model(tmp_path / "w.safetensors")

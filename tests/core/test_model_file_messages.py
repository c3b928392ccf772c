"""A file that is no loadable model is refused in the user's words, whatever it is: the message says
what the file is and what is wrong with it (empty, cut off, a dataset archive, a foreign format), the
hint what to do, and no Python exception's class name appears in either (it goes to the details)."""

from __future__ import annotations

import os
import re
import zipfile

import numpy as np
import pytest
import torch

from workbench.core.errors import WorkbenchError
from workbench.core.models.architectures import lenet5
from workbench.core.models.model_io import load_model

CLASS_NAME = re.compile(r"\b\w*(Error|Exception|Warning)\b|\((\w+)\)$")


def _cut(path, keep: float = 0.5):
    data = path.read_bytes()
    path.write_bytes(data[:int(len(data) * keep)])


def truncated_npz(path):
    np.savez(path, x=np.zeros((20, 28, 28), np.uint8), y=np.arange(20) % 10)
    _cut(path)


def dataset_npz(path):
    np.savez(path, x=np.zeros((20, 28, 28), np.uint8), y=np.arange(20) % 10)


def other_zip(path):
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("notes.txt", "not a model")


def truncated_torch_save(path):
    torch.save(lenet5().state_dict(), path)
    _cut(path)


def damaged_torch_archive(path):
    """A zip whose list of contents is whole, with a torch.save layout and garbage in its pickle."""
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("model/data.pkl", b"\x80\x02garbage that no unpickler reads")
        archive.writestr("model/version", "3\n")


def truncated_legacy_pickle(path):
    torch.save(lenet5().state_dict(), path, _use_new_zipfile_serialization=False)
    _cut(path, 0.3)


def truncated_torchscript(path):
    torch.jit.save(torch.jit.script(lenet5()), path)
    _cut(path)


def truncated_safetensors(path):
    from safetensors.torch import save_file

    save_file(lenet5().state_dict(), str(path))
    _cut(path)


def junk(path):
    path.write_bytes(b"\x13" + np.random.default_rng(0).bytes(3000))  # seeded: the same bytes every run


def empty(path):
    path.write_bytes(b"")


def text(path):
    path.write_text("these are notes, not a model\n")


def hdf5(path):
    import h5py

    with h5py.File(path, "w") as f:
        f["x"] = np.zeros((4, 28, 28), np.uint8)


def cut_export(path):
    truncated_torch_save(path)


def folder(path):
    path.mkdir()


FILES = [  # (id, file name, how it is made, words the message says, words the hint says)
    ("truncated-npz", "data.npz", truncated_npz, ["data.npz", "zip archive", "cut off or damaged"],
     ["copy or export it again"]),
    ("dataset-npz", "data.npz", dataset_npz, ["NumPy archive of arrays (.npz), not a model"], ["Open dataset"]),
    ("other-zip", "notes.zip", other_zip, ["zip archive, but not one PyTorch wrote"], [".safetensors"]),
    ("truncated-torch-save", "model.pt", truncated_torch_save, ["model.pt", "cut off or damaged"],
     ["copy or export it again"]),
    ("damaged-torch-archive", "model.pt", damaged_torch_archive,
     ["cannot be read as plain weights: it is damaged, or holds a pickled Python object"],
     ["I trust this file", "copy or export it again"]),
    ("truncated-legacy-pickle", "model.pth", truncated_legacy_pickle, ["model.pth is cut off"],
     ["copy or export it again"]),
    ("truncated-torchscript", "scripted.pt", truncated_torchscript, ["scripted.pt", "cut off or damaged"],
     ["copy or export it again"]),
    ("truncated-safetensors", "weights.safetensors", truncated_safetensors,
     ["not a complete safetensors file", "cut short"], ["copy or export it again"]),
    ("junk-safetensors", "weights.safetensors", junk, ["not a complete safetensors file"], ["copy"]),
    ("junk", "model.pt", junk, ["model.pt is not a PyTorch file"], ["damaged", ".safetensors"]),
    ("empty-pt", "model.pt", empty, ["model.pt is empty (0 bytes)"], ["cut short"]),
    ("empty-safetensors", "weights.safetensors", empty, ["weights.safetensors is empty (0 bytes)"], ["cut short"]),
    ("empty-export", "model.pt2", empty, ["model.pt2 is empty (0 bytes)"], ["cut short"]),
    ("cut-export", "model.pt2", cut_export, ["model.pt2", "cut off or damaged"], ["copy or export it again"]),
    ("text", "model.pt", text, ["not a PyTorch file"], ["another format"]),
    ("hdf5", "model.h5", hdf5, ["HDF5 file, not a PyTorch model"], ["Open dataset"]),
    ("folder", "model.pt", folder, ["is a folder"], ["the model file itself"]),
]


def assert_in_words(error: WorkbenchError, message_words, hint_words) -> None:
    for text in (error.message, error.hint):
        assert not CLASS_NAME.search(text), text  # "(RuntimeError)", "OSError: …" are not the user's words
    for word in message_words:
        assert word in error.message, error.message
    for word in hint_words:
        assert word in error.hint, error.hint


@pytest.mark.parametrize("case, name, make, message_words, hint_words", FILES, ids=[f[0] for f in FILES])
def test_a_file_that_is_no_model_is_refused_in_words(tmp_path, case, name, make, message_words, hint_words):
    path = tmp_path / name
    make(path)
    with pytest.raises(WorkbenchError) as raised:
        load_model(str(path))
    assert_in_words(raised.value, message_words, hint_words)


def test_a_path_that_is_not_there_is_said(tmp_path):
    with pytest.raises(WorkbenchError) as raised:
        load_model(str(tmp_path / "absent.pt"))
    assert_in_words(raised.value, ["No model file", "absent.pt"], [".safetensors"])


def test_a_file_that_cannot_be_read_says_permission_denied(tmp_path, monkeypatch):
    path = tmp_path / "locked.pt"
    torch.save(lenet5().state_dict(), path)
    # The tests may run as root, who reads every file: the refusal is made to happen as it would for a user.
    monkeypatch.setattr(os, "access", lambda p, mode, *a, **k: False)
    with pytest.raises(WorkbenchError) as raised:
        load_model(str(path))
    assert_in_words(raised.value, ["locked.pt cannot be read: permission denied"], ["permissions"])
    monkeypatch.undo()

    def denied(*args, **kwargs):
        raise PermissionError(13, "Permission denied", str(path))
    monkeypatch.setattr(torch, "load", denied)  # allowed by its mode bits, refused when opened (an ACL)
    with pytest.raises(WorkbenchError) as raised:
        load_model(str(path))
    assert_in_words(raised.value, ["locked.pt cannot be read: permission denied"], ["permissions"])
    assert "PermissionError" in raised.value.details  # the technical text is kept, under Details

"""A torchvision network's bare state_dict on the user's own colour images, through the command line with no
plugin and no --arch: evaluated, its coverage measured and attacked (with the colour images' default ε)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torchvision
from cli_helpers import run_cli, run_json


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    folder = tmp_path_factory.mktemp("library")
    rng = np.random.default_rng(0)
    x = rng.integers(0, 256, (48, 3, 32, 32), dtype=np.uint8)
    y = np.arange(48) % 4
    np.savez(folder / "photos.npz", x_train=x[:32], y_train=y[:32], x_test=x[32:], y_test=y[32:])
    torch.manual_seed(0)
    torch.save(torchvision.models.resnet18(num_classes=4).state_dict(), folder / "resnet18.pt")
    return folder / "resnet18.pt", folder / "photos.npz"


def test_evaluate_recognises_the_network(capsys, files):
    model, data = files
    result = run_json(capsys, "evaluate", "--model", model, "--data", data, "--device", "cpu", "--json")
    assert result["model"] == "resnet18" and result["model_info"]["arch"] == "torchvision:resnet18"
    assert result["n"] == 16 and 0.0 <= result["accuracy"] <= 1.0


def test_coverage_at_the_classifier(capsys, files):
    model, data = files
    rc, out, err = run_cli(capsys, "coverage", "--model", model, "--data", data, "--layer", "fc", "--criteria",
                           "nc", "--device", "cpu")
    assert rc == 0, err
    assert "NC" in out and "fc" in out


def test_attack_takes_the_colour_images_budget(capsys, files):
    model, data = files
    rc, out, err = run_cli(capsys, "attack", "--model", model, "--data", data, "--attacks", "fgsm", "--max-inputs",
                           8, "--device", "cpu")
    assert rc == 0, err
    assert "eps 0.0313725 (default for colour images (photos has no preset))" in out

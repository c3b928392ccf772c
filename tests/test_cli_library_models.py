"""A torchvision network's bare state_dict on the user's own colour images, through the command line with no
plugin and no --arch: evaluated, its coverage measured and attacked (with the colour images' default ε)."""

from __future__ import annotations

import pytest
import torch
import torchvision
from cli_helpers import run_cli, run_json


@pytest.fixture(scope="module")
def files(resnet18_on_photos):
    return resnet18_on_photos


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


VIT = "torchvision:VisionTransformer(image_size=32, patch_size=8, num_layers=2, num_heads=4, hidden_dim=64, mlp_dim=128)"


def _vit(classes: int):
    model = torchvision.models.VisionTransformer(image_size=32, patch_size=8, num_layers=2, num_heads=4,
                                                 hidden_dim=64, mlp_dim=128, num_classes=classes)
    torch.nn.init.normal_(model.heads.head.weight, std=0.1)  # torchvision starts it at zero: every logit equal
    return model


# (network, how it is built, a block to study, the --arch it needs: None when its state_dict is recognised)
NETWORKS = [
    ("resnet18", lambda k: torchvision.models.resnet18(num_classes=k), "layer3", None),
    ("mobilenet_v3_small", lambda k: torchvision.models.mobilenet_v3_small(num_classes=k), "features.6", None),
    ("efficientnet_b0", lambda k: torchvision.models.efficientnet_b0(num_classes=k), "features.5", None),
    ("convnext_tiny", lambda k: torchvision.models.convnext_tiny(num_classes=k), "features.5", None),
    ("vit", _vit, "encoder.layers.encoder_layer_1", VIT),
]


@pytest.mark.parametrize(("name", "build", "block", "arch"), NETWORKS, ids=[n[0] for n in NETWORKS])
def test_importance_coverage_attack_and_fol_from_a_bare_state_dict(capsys, files, tmp_path, name, build, block, arch):
    _, data = files
    torch.manual_seed(0)
    model = tmp_path / f"{name}.pt"
    torch.save(build(4).state_dict(), model)
    common = ("--model", model, "--data", data, "--device", "cpu", *(("--arch", arch) if arch else ()))
    importance = run_json(capsys, "importance", *common, "--layer", block, "--max-inputs", 8, "--ablation", "off",
                          "--m", 2, "--json")
    conservation = importance["conservation"]
    assert conservation["error"] < 1e-4, conservation  # float32 through a whole network
    assert len(importance["top_m"]) == 2
    if name == "vit":  # a neuron of a token sequence is a feature, pooled over the 17 tokens
        assert importance["neurons"] == 64
    rc, out, err = run_cli(capsys, "coverage", *common, "--layer", block, "--criteria", "idc,nc,kmnc", "--m", 2,
                           "--max-inputs", 8)
    assert rc == 0, err
    assert all(criterion in out for criterion in ("IDC", "NC", "KMNC"))
    rc, out, err = run_cli(capsys, "attack", *common, "--attacks", "fgsm", "--max-inputs", 4)
    assert rc == 0, err
    fol = run_json(capsys, "fol", *common, "--max-inputs", 4, "--json")
    assert fol["inputs"] == 4 and fol["eps"] == pytest.approx(8 / 255)

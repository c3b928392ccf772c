"""Users' own networks without a plugin: a bare state_dict of a torchvision classification model is
recognised from its parameter names and shapes (the class count from its last layer), `torchvision:NAME` and
`timm:NAME` name a library's network, and RobOT's CIFAR ResNet-20/32/56 are in the zoo. Random weights,
32×32 colour inputs, nothing downloaded."""

from __future__ import annotations

import pytest
import torch
import torchvision

from workbench.core.errors import WorkbenchError
from workbench.core.models.architectures import get_architecture
from workbench.core.models.library_models import recognise
from workbench.core.models.model_io import load_model


def saved(tmp_path, module, name: str):
    path = tmp_path / f"{name}.pt"
    torch.save(module.state_dict(), path)
    return path


@pytest.mark.parametrize(("name", "classes"), [("resnet18", 7), ("squeezenet1_0", 10), ("mobilenet_v3_small", 3)])
def test_a_torchvision_state_dict_is_recognised_and_computes_as_the_original(tmp_path, name, classes):
    torch.manual_seed(0)
    original = torchvision.models.get_model(name, weights=None, num_classes=classes).eval()
    loaded = load_model(saved(tmp_path, original, name))
    assert loaded.info.arch == f"torchvision:{name}" and loaded.info.input_shape is None
    x = torch.rand(2, 3, 32, 32)
    with torch.no_grad():
        assert torch.equal(loaded.module.eval()(x), original(x))
        assert loaded.module(x).shape == (2, classes)


def test_recognition_reads_names_and_shapes_not_values():
    state = torchvision.models.get_model("resnet34", weights=None, num_classes=5).state_dict()
    assert recognise(state) == [("torchvision:resnet34", 5)]
    state["conv1.weight"] = torch.zeros(64, 1, 7, 7)  # a network changed for grey images fits none as it is
    assert recognise(state) == []
    state.pop("conv1.weight")
    assert recognise(state) == []


def test_a_library_network_is_named_with_its_prefix(tmp_path):
    torch.manual_seed(0)
    original = torchvision.models.get_model("resnet18", weights=None, num_classes=4).eval()
    path = saved(tmp_path, original, "weights")
    assert load_model(path, arch="torchvision:resnet18").info.arch == "torchvision:resnet18"
    with pytest.raises(WorkbenchError, match="do not fit architecture 'torchvision:resnet34'"):
        load_model(path, arch="torchvision:resnet34")
    with pytest.raises(WorkbenchError, match="torchvision has no classification model 'resnet7'") as caught:
        get_architecture("torchvision:resnet7")
    assert "resnet18" in caught.value.hint


def test_timm_is_an_optional_extra():
    try:
        import timm  # noqa: F401
    except ImportError:
        with pytest.raises(WorkbenchError, match="needs timm") as caught:
            get_architecture("timm:resnet18")
        assert "pip install" in caught.value.hint
    else:
        assert get_architecture("timm:resnet18").build(3)(torch.rand(1, 3, 32, 32)).shape == (1, 3)


def test_weights_that_fit_nothing_say_how_to_name_a_library_network(tmp_path):
    path = tmp_path / "odd.pt"
    torch.save({"body.weight": torch.zeros(3, 3), "head.weight": torch.zeros(2, 3)}, path)
    with pytest.raises(WorkbenchError, match="nor a classification model of torchvision") as caught:
        load_model(path)
    assert "--arch torchvision:NAME" in caught.value.hint


def _cifar_resnet_parameters(blocks: int, classes: int = 10) -> int:
    """Parameters of the CIFAR ResNet counted by hand: every convolution with its bias, two per channel of
    every batch norm, the 1×1 shortcut convolutions of the two stages that halve the resolution."""
    def conv(cin, cout, k):
        return cin * cout * k * k + cout

    total = conv(3, 16, 3) + 2 * 16
    channels = 16
    for width in (16, 32, 64):
        for i in range(blocks):
            total += conv(channels, width, 3) + 2 * width + conv(width, width, 3) + 2 * width
            if channels != width:
                total += conv(channels, width, 1)
            channels = width
    return total + 64 * classes + classes


@pytest.mark.parametrize(("name", "blocks"), [("resnet20", 3), ("resnet32", 5), ("resnet56", 9)])
def test_the_cifar_resnets_have_6n_plus_2_layers(tmp_path, name, blocks):
    arch = get_architecture(name)
    module = arch.build(10).eval()
    assert arch.input_shape == (3, 32, 32)
    assert sum(p.numel() for p in module.parameters()) == _cifar_resnet_parameters(blocks)
    convs = [m for n, m in module.named_modules() if isinstance(m, torch.nn.Conv2d) and "shortcut" not in n]
    assert len(convs) + 1 == 6 * blocks + 2  # the dense layer is the last weighted layer
    assert module(torch.rand(2, 3, 32, 32)).shape == (2, 10)
    assert load_model(saved(tmp_path, module, name)).info.arch == name  # the zoo's, before any library's


def test_a_vision_transformer_of_any_size_is_named_with_its_settings(tmp_path):
    from torchvision.models import VisionTransformer

    torch.manual_seed(0)
    original = VisionTransformer(image_size=32, patch_size=8, num_layers=2, num_heads=4, hidden_dim=32, mlp_dim=64,
                                 num_classes=3).eval()
    path = tmp_path / "vit.pt"
    torch.save(original.state_dict(), path)
    with pytest.raises(WorkbenchError) as refused:  # every setting but the heads is in the shapes
        load_model(path)
    spelled = ("torchvision:VisionTransformer(image_size=32, patch_size=8, num_layers=2, num_heads=?, hidden_dim=32, "
               "mlp_dim=64)")
    assert spelled in refused.value.message and "attention heads" in refused.value.hint
    loaded = load_model(path, arch=spelled.replace("?", "4"))
    x = torch.rand(2, 3, 32, 32)
    assert torch.allclose(loaded.module.eval()(x), original(x))
    for arch, words in ((spelled.replace("?", "__import__('os')"), "not key=number pairs"),
                        (spelled.replace("?", "'4'"), "not numbers: num_heads"),
                        (spelled.replace("?", "4").replace(")", ", num_classes=3)"), "num_classes"),
                        (spelled.replace("?", "5"), "cannot build"),
                        ("torchvision:resnet18(no_such=1)", "cannot build resnet18"),
                        ("torchvision:Nothing(a=1)", "no classification model 'Nothing'")):
        with pytest.raises(WorkbenchError, match=words):
            load_model(path, arch=arch)

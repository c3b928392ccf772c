"""The model zoo: the LeNets of DeepImportance and RobOT, RobOT's CIFAR ResNet-20/32/56, a small CIFAR
ConvNet, advertorch's LeNet5; and, by name, every model of torchvision and timm (`library_models.py`).

The LeNets and ConvNets are an `nn.Sequential` of named layers (conv1, relu1, pool1, …), the ResNets
(`cifar_resnet.py`) blocks of named layers, so layer names are stable and state_dict keys short.
Architectures register by name; plugins add more with `register_architecture`.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable

from workbench.core.errors import WorkbenchError

if TYPE_CHECKING:  # torch is imported lazily so the GUI starts fast
    import torch


@dataclass
class Architecture:
    """A buildable network: `build(num_classes)` returns a fresh `nn.Module`. `input_shape` is None for a
    network that takes the size of the data it is given (the model libraries' networks)."""

    name: str
    build: Callable[[int], "torch.nn.Module"]
    input_shape: tuple[int, int, int] | None
    description: str = ""
    aliases: tuple[str, ...] = field(default_factory=tuple)


_ARCHITECTURES: dict[str, Architecture] = {}


def register_architecture(arch: Architecture) -> None:
    _ARCHITECTURES[arch.name] = arch
    for alias in arch.aliases:
        _ARCHITECTURES[alias] = arch


def architectures() -> list[Architecture]:
    return list({a.name: a for a in _ARCHITECTURES.values()}.values())


def get_architecture(name: str) -> Architecture:
    """A registered architecture, or a model library's: `torchvision:NAME`, `timm:NAME`."""
    from workbench.core.models.library_models import PREFIXES, library_builder

    if name.startswith(PREFIXES) and name not in _ARCHITECTURES:
        build, description = library_builder(name)
        return Architecture(name, build, None, description)
    if name not in _ARCHITECTURES:
        raise WorkbenchError(f"Unknown architecture {name!r}.",
                             f"Known architectures: {', '.join(a.name for a in architectures())}; "
                             "any classification model of torchvision as torchvision:NAME (e.g. torchvision:resnet18)"
                             ", and of timm as timm:NAME when timm is installed.")
    return _ARCHITECTURES[name]


def _sequential(*layers):
    from torch import nn

    return nn.Sequential(OrderedDict(layers))


def lenet1(num_classes: int = 10, in_channels: int = 1):
    """LeNet-1 as released with DeepImportance: conv4-pool-conv12-pool-dense (3,246 parameters)."""
    from torch import nn

    return _sequential(
        ("conv1", nn.Conv2d(in_channels, 4, 5)), ("relu1", nn.ReLU()), ("pool1", nn.MaxPool2d(2)),
        ("conv2", nn.Conv2d(4, 12, 5)), ("relu2", nn.ReLU()), ("pool2", nn.MaxPool2d(2)),
        ("flatten", nn.Flatten()), ("fc1", nn.Linear(12 * 4 * 4, num_classes)))


def lenet4(num_classes: int = 10, in_channels: int = 1):
    """LeNet-4 as released with DeepImportance: conv6-pool-conv16-pool-fc84-dense (25,010 parameters)."""
    from torch import nn

    return _sequential(
        ("conv1", nn.Conv2d(in_channels, 6, 5)), ("relu1", nn.ReLU()), ("pool1", nn.MaxPool2d(2)),
        ("conv2", nn.Conv2d(6, 16, 5)), ("relu2", nn.ReLU()), ("pool2", nn.MaxPool2d(2)),
        ("flatten", nn.Flatten()), ("fc1", nn.Linear(16 * 4 * 4, 84)), ("relu3", nn.ReLU()),
        ("fc2", nn.Linear(84, num_classes)))


def lenet5(num_classes: int = 10, in_channels: int = 1):
    """LeNet-5 as released with DeepImportance and used by RobOT: conv6-pool-conv16-pool-fc120-fc84-dense
    (44,426 parameters, valid 5×5 convolutions)."""
    from torch import nn

    return _sequential(
        ("conv1", nn.Conv2d(in_channels, 6, 5)), ("relu1", nn.ReLU()), ("pool1", nn.MaxPool2d(2)),
        ("conv2", nn.Conv2d(6, 16, 5)), ("relu2", nn.ReLU()), ("pool2", nn.MaxPool2d(2)),
        ("flatten", nn.Flatten()), ("fc1", nn.Linear(16 * 4 * 4, 120)), ("relu3", nn.ReLU()),
        ("fc2", nn.Linear(120, 84)), ("relu4", nn.ReLU()), ("fc3", nn.Linear(84, num_classes)))


def cifar_convnet(num_classes: int = 10, in_channels: int = 3):
    """A small CIFAR-style ConvNet with BatchNorm: 2×(conv-bn-relu ×2, pool), fc256, dense."""
    from torch import nn

    def block(i, cin, cout):
        return [(f"conv{i}", nn.Conv2d(cin, cout, 3, padding=1)), (f"bn{i}", nn.BatchNorm2d(cout)),
                (f"relu{i}", nn.ReLU())]

    return _sequential(
        *block(1, in_channels, 32), *block(2, 32, 32), ("pool1", nn.MaxPool2d(2)),
        *block(3, 32, 64), *block(4, 64, 64), ("pool2", nn.MaxPool2d(2)),
        ("flatten", nn.Flatten()), ("fc1", nn.Linear(64 * 8 * 8, 256)), ("relu5", nn.ReLU()),
        ("dropout", nn.Dropout(0.5)), ("fc2", nn.Linear(256, num_classes)))


def advertorch_lenet5(num_classes: int = 10):
    """The LeNet5 of advertorch's MNIST examples; layer names match its state_dict keys."""
    from torch import nn

    return _sequential(
        ("conv1", nn.Conv2d(1, 32, 3, padding=1)), ("relu1", nn.ReLU()), ("pool1", nn.MaxPool2d(2)),
        ("conv2", nn.Conv2d(32, 64, 3, padding=1)), ("relu2", nn.ReLU()), ("pool2", nn.MaxPool2d(2)),
        ("flatten", nn.Flatten()), ("linear1", nn.Linear(64 * 7 * 7, 200)), ("relu3", nn.ReLU()),
        ("linear2", nn.Linear(200, num_classes)))


def lenet_for_digits(num_classes: int = 10):
    """A tiny LeNet-style net for 8×8 scikit-learn digits, for tests that must run in seconds."""
    from torch import nn

    return _sequential(
        ("conv1", nn.Conv2d(1, 8, 3, padding=1)), ("relu1", nn.ReLU()), ("pool1", nn.MaxPool2d(2)),
        ("flatten", nn.Flatten()), ("fc1", nn.Linear(8 * 4 * 4, 32)), ("relu2", nn.ReLU()),
        ("fc2", nn.Linear(32, num_classes)))


def _cifar_resnet(name: str):
    def build(num_classes: int = 10):
        from workbench.core.models.cifar_resnet import cifar_resnet

        return cifar_resnet(name, num_classes)
    return build


for _arch in (
    Architecture("resnet20", _cifar_resnet("resnet20"), (3, 32, 32),
                 "CIFAR ResNet-20 (He et al.; RobOT, 0.27 M parameters)"),
    Architecture("resnet32", _cifar_resnet("resnet32"), (3, 32, 32),
                 "CIFAR ResNet-32 (He et al.; RobOT, 0.47 M parameters)"),
    Architecture("resnet56", _cifar_resnet("resnet56"), (3, 32, 32),
                 "CIFAR ResNet-56 (He et al.; RobOT, 0.86 M parameters)"),
    Architecture("lenet1", lenet1, (1, 28, 28), "LeNet-1 (DeepImportance release, 3,246 parameters)"),
    Architecture("lenet4", lenet4, (1, 28, 28), "LeNet-4 (DeepImportance release, 25,010 parameters)"),
    Architecture("lenet5", lenet5, (1, 28, 28), "LeNet-5 (DeepImportance/RobOT, 44,426 parameters)"),
    Architecture("cifar-convnet", cifar_convnet, (3, 32, 32), "Small CIFAR-style ConvNet with BatchNorm"),
    Architecture("advertorch-lenet5", advertorch_lenet5, (1, 28, 28), "advertorch's MNIST LeNet5 (648,226 parameters)"),
    Architecture("digits-net", lenet_for_digits, (1, 8, 8), "Tiny ConvNet for 8×8 digits (tests)"),
):
    register_architecture(_arch)

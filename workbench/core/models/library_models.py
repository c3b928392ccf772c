"""Architectures from model libraries, without a plugin: every classification model of torchvision as
`torchvision:NAME` (e.g. `torchvision:resnet18`), and every model of timm as `timm:NAME` when timm is
installed (`pip install 'dl-testing-workbench[timm]'`). A library network takes the input size of the data
it is given (ResNets, VGGs, MobileNets and EfficientNets run at 32×32; a ViT takes the image size it was
built for). Weights are never downloaded: a network is built with random weights and then given the
file's.

A bare state_dict of a torchvision model is recognised from its parameter names and shapes
(`recognise`): the class count is the length of its last layer, every other shape must be the model's.
"""

from __future__ import annotations

import threading
from typing import Callable

from workbench.core.errors import WorkbenchError

TORCHVISION, TIMM = "torchvision:", "timm:"
PREFIXES = (TORCHVISION, TIMM)

_signatures: dict[str, dict[str, tuple]] = {}  # torchvision name → {key: shape} at 1000 classes
_signatures_lock = threading.Lock()


def torchvision_names() -> list[str]:
    """The classification models of torchvision, by name."""
    import torchvision

    return sorted(torchvision.models.list_models(module=torchvision.models))


def library_builder(name: str) -> tuple[Callable, str]:
    """(build(num_classes), description) of a `torchvision:NAME` or `timm:NAME` architecture."""
    if name.startswith(TORCHVISION):
        model = name[len(TORCHVISION):]
        if model not in torchvision_names():
            raise WorkbenchError(f"torchvision has no classification model {model!r}.",
                                 f"Known: {', '.join(torchvision_names())}.")
        return (lambda num_classes: _torchvision_model(model, num_classes)), f"torchvision {model} (random init)"
    if name.startswith(TIMM):
        model = name[len(TIMM):]
        try:
            import timm
        except ImportError:
            raise WorkbenchError(f"{name} needs timm, which is not installed.",
                                 "pip install 'dl-testing-workbench[timm]' (or pip install timm).") from None
        if model not in timm.list_models():
            raise WorkbenchError(f"timm has no model {model!r}.", "List them with python -c \"import timm; "
                                                                 "print(timm.list_models())\".")
        return (lambda num_classes: timm.create_model(model, pretrained=False, num_classes=num_classes)), \
            f"timm {model} (random init)"
    raise WorkbenchError(f"{name!r} names no model library.", f"Write {TORCHVISION}NAME or {TIMM}NAME.")


def _torchvision_model(name: str, num_classes: int):
    import warnings

    import torchvision

    with warnings.catch_warnings():  # GoogLeNet and Inception warn that their random init will change
        warnings.simplefilter("ignore", FutureWarning)
        warnings.simplefilter("ignore", UserWarning)
        return torchvision.models.get_model(name, weights=None, num_classes=num_classes)


def _signature(name: str) -> dict[str, tuple] | None:
    """The names and shapes of a torchvision model's state at 1000 classes, built without memory on the
    meta device; None for a model that cannot be built there."""
    import torch

    with _signatures_lock:
        if name not in _signatures:
            try:
                with torch.device("meta"):
                    state = _torchvision_model(name, 1000).state_dict()
                _signatures[name] = {k: tuple(v.shape) for k, v in state.items()}
            except Exception:  # RegNets copy tensors while they initialise, which the meta device cannot
                _signatures[name] = None
        return _signatures[name]


#: The families tried first, the most used first: a network is recognised once it matches, so a ResNet's file
#: does not wait for every other network to be built. (No two classification models of torchvision have the
#: same parameter names and shapes, checked when this was written, so the first match is the only one.)
FAMILIES_FIRST = ("resnet", "vgg", "mobilenet", "efficientnet", "densenet", "convnext", "vit", "regnet", "resnext",
                  "wide_resnet", "squeezenet", "shufflenet", "mnasnet", "alexnet", "googlenet", "inception", "swin")


def _family_rank(name: str) -> int:
    return next((i for i, family in enumerate(FAMILIES_FIRST) if name.startswith(family)), len(FAMILIES_FIRST))


def recognise(state: dict) -> list[tuple[str, int]]:
    """The torchvision model whose state has exactly the keys of `state`, and its shapes but for the class
    count: [(`torchvision:NAME`, classes)], or [] when none has."""
    shapes = {k: tuple(v.shape) for k, v in state.items() if hasattr(v, "shape")}
    found = []
    for name in sorted(torchvision_names(), key=_family_rank):
        if found:
            break
        signature = _signature(name)
        if signature is None or signature.keys() != shapes.keys():
            continue
        differing = [k for k in signature if signature[k] != shapes[k]]
        # only the classifier may differ: its weight's and bias's first dimension, the class count
        classes = {shapes[k][0] for k in differing}
        if len(classes) == 1 and all(signature[k][0] == 1000 and signature[k][1:] == shapes[k][1:]
                                     for k in differing):
            found.append((TORCHVISION + name, classes.pop()))
        elif not differing:
            found.append((TORCHVISION + name, 1000))
    return found

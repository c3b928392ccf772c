"""Architectures from model libraries, without a plugin: every classification model of torchvision as
`torchvision:NAME` (e.g. `torchvision:resnet18`), and every model of timm as `timm:NAME` when timm is
installed (`pip install 'dl-testing-workbench[timm]'`). A library network takes the input size of the data
it is given (ResNets, VGGs, MobileNets and EfficientNets run at 32×32; a ViT takes the image size it was
built for). Weights are never downloaded: a network is built with random weights and then given the
file's.

A bare state_dict of a torchvision model is recognised from its parameter names and shapes
(`recognise`): the class count is the length of its last layer, every other shape must be the model's.

A network of a size torchvision does not build by name is written with its settings, whole numbers only:
`torchvision:VisionTransformer(image_size=32, patch_size=4, num_layers=6, num_heads=8, hidden_dim=256,
mlp_dim=512)`, or a builder's settings, `torchvision:resnet50(width_per_group=32)`. A vision transformer's
state_dict of another size is recognised as far as its shapes tell (all but the number of heads), and the
refusal spells out the architecture to name.
"""

from __future__ import annotations

import ast
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
    """(build(num_classes), description) of a `torchvision:NAME`, `torchvision:NAME(settings)` or `timm:NAME`
    architecture."""
    if name.startswith(TORCHVISION):
        model, settings = _settings(name)
        import torchvision

        if model in torchvision_names():
            return (lambda num_classes: _torchvision_model(model, num_classes, **settings)), \
                f"torchvision {name[len(TORCHVISION):]} (random init)"
        if settings and isinstance(getattr(torchvision.models, model, None), type):  # VisionTransformer(…)
            cls = getattr(torchvision.models, model)
            return (lambda num_classes: _built(name, cls, num_classes=num_classes, **settings)), \
                f"torchvision {name[len(TORCHVISION):]} (random init)"
        raise WorkbenchError(f"torchvision has no classification model {model!r}.",
                             f"Known: {', '.join(torchvision_names())}; or a model class with its settings, e.g. "
                             f"{TORCHVISION}VisionTransformer(image_size=32, patch_size=4, num_layers=6, "
                             "num_heads=8, hidden_dim=256, mlp_dim=512).")
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


def _settings(name: str) -> tuple[str, dict]:
    """`torchvision:NAME(key=value, …)` → (NAME, {key: value}); the values are literal numbers, never code."""
    text = name[len(TORCHVISION):].strip()
    if "(" not in text:
        return text, {}
    model, _, rest = text.partition("(")
    hint = f"Write the settings as {TORCHVISION}NAME(key=number, …), e.g. {TORCHVISION}VisionTransformer(" \
           "image_size=32, patch_size=4, num_layers=6, num_heads=8, hidden_dim=256, mlp_dim=512)."
    try:
        call = ast.parse(f"f({rest}", mode="eval").body  # `rest` ends with the closing parenthesis
        if not isinstance(call, ast.Call) or call.args:
            raise ValueError
        settings = {kw.arg: ast.literal_eval(kw.value) for kw in call.keywords}
    except (SyntaxError, ValueError, TypeError):
        raise WorkbenchError(f"The architecture {name!r} has settings that are not key=number pairs.", hint) from None
    reserved = sorted(set(settings) & {"num_classes", "weights", "progress", "name"})
    if reserved:
        raise WorkbenchError(f"The architecture {name!r} sets {', '.join(reserved)}, which the workbench sets itself.",
                             "Leave them out: the class count comes from the weights, and nothing is downloaded.")
    bad = [k for k, v in settings.items() if k is None or isinstance(v, bool) or not isinstance(v, (int, float))]
    if bad:
        raise WorkbenchError(f"The architecture {name!r} has settings that are not numbers: {', '.join(map(str, bad))}.",
                             hint)
    return model.strip(), settings


def _built(label: str, build: Callable, /, **settings):
    try:
        return build(**settings)
    except (TypeError, ValueError, AssertionError) as exc:
        raise WorkbenchError(f"torchvision cannot build {label}: {exc}.",
                             "Check the names and values of its settings against torchvision's documentation.") from exc


def _torchvision_model(name: str, num_classes: int, **settings):
    import warnings

    import torchvision

    with warnings.catch_warnings():  # GoogLeNet and Inception warn that their random init will change
        warnings.simplefilter("ignore", FutureWarning)
        warnings.simplefilter("ignore", UserWarning)
        return _built(name, torchvision.models.get_model, name=name, weights=None, num_classes=num_classes, **settings)


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


def vision_transformer_settings(state: dict) -> str | None:
    """For a state_dict of torchvision's VisionTransformer: its architecture as far as the shapes tell, written as
    `torchvision:VisionTransformer(…)` with `num_heads=?` — the one setting no shape holds; None otherwise."""
    needed = ("conv_proj.weight", "encoder.pos_embedding", "class_token", "heads.head.weight")
    if not all(hasattr(state.get(k), "shape") for k in needed):
        return None
    hidden, _, patch, _ = state["conv_proj.weight"].shape
    grid = round((state["encoder.pos_embedding"].shape[1] - 1) ** 0.5)
    layers = len({k.split(".")[2] for k in state if k.startswith("encoder.layers.")})
    mlp = state.get("encoder.layers.encoder_layer_0.mlp.0.weight")
    mlp_dim = int(mlp.shape[0]) if hasattr(mlp, "shape") else "?"
    return (f"{TORCHVISION}VisionTransformer(image_size={grid * patch}, patch_size={patch}, num_layers={layers}, "
            f"num_heads=?, hidden_dim={hidden}, mlp_dim={mlp_dim})")

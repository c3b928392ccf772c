"""LRP on torchvision's classification networks: which are traced, how well relevance is conserved, and what a
relevance pass costs beside the floor.

Each network is built with random weights (seed 0, 10 classes, nothing downloaded), its BatchNorm statistics
taken from 64 of the random images, and explained at 32×32 (64×64 or 224×224 where 32×32 is too small for it).
For each:

  traced    the explainer's plan is built, or the refusal with the layer it names
  cons.in   conservation by construction: every bias and BatchNorm shift set to zero, LRP-0's relevance at
            the input against the predicted logit, |ΣR − logit| / |logit| averaged over 8 images, in float64
  cons.mid  the same at the block in the middle of the layer list
  ratio     a relevance pass to the input (LRP-ε, batches of 64, 256 images) over the floor: a plain
            forward + backward pass (the predicted logit's gradient with respect to the input), best of
            --rounds, in the same process

    .venv/bin/python benchmarks/bench_library_lrp.py [--models resnet18,vgg11_bn] [--all] [--rounds 3]
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402
import torchvision  # noqa: E402

from workbench.core.errors import WorkbenchError  # noqa: E402
from workbench.core.importance.lrp.explainer import LRP  # noqa: E402

FAMILIES = ["resnet18", "resnext50_32x4d", "wide_resnet50_2", "vgg11", "vgg11_bn", "alexnet", "squeezenet1_0",
            "densenet121", "googlenet", "inception_v3", "mobilenet_v2", "mobilenet_v3_small", "mnasnet0_5",
            "shufflenet_v2_x0_5", "efficientnet_b0", "efficientnet_v2_s", "regnet_x_400mf", "regnet_y_400mf",
            "convnext_tiny", "swin_t", "maxvit_t", "vit_b_16"]
IMAGES, BATCH = 256, 64


def calibrated(model: torch.nn.Module, x: torch.Tensor) -> torch.nn.Module:
    """BatchNorm statistics taken from a batch of the inputs, as a first epoch of training would: with
    torchvision's initialisation alone, MobileNets' and EfficientNets' activations shrink layer after layer to
    logits near 1e-14 at 32×32, where any stabiliser absorbs what the rules conserve."""
    norms = [m for m in model.modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)]
    for norm in norms:
        norm.reset_running_stats()
        norm.momentum = None  # a cumulative average over the calibration batch
    model.train()
    with torch.no_grad():
        model(x)
    return model.eval()


def without_biases(model: torch.nn.Module) -> torch.nn.Module:
    """Biases and BatchNorm shifts at zero: LRP-0 then conserves relevance exactly, layer by layer."""
    with torch.no_grad():
        for module in model.modules():
            if getattr(module, "bias", None) is not None:
                module.bias.zero_()
            if isinstance(module, torch.nn.modules.batchnorm._BatchNorm):
                module.running_mean.zero_()
    return model


def conservation(model, x) -> tuple[float, float, str]:
    """In float64: random weights leave some networks' logits near 1e-10 at 32×32, where float32's stabiliser
    would absorb what the rules conserve."""
    model, x = without_biases(model).double(), x.double()
    lrp = LRP(model, "lrp-0")
    modules = dict(model.named_modules())
    blocks = [n for n in lrp.layer_names if n in modules and "." not in n]
    middle = blocks[len(blocks) // 2] if blocks else lrp.layer_names[len(lrp.layer_names) // 2]
    result = lrp.explain(x, layers=[middle])
    start = result.start.double()
    input_error = ((result.input.flatten(1).sum(1).double() - start).abs() / start.abs()).mean()
    middle_error = ((result.layers[middle].flatten(1).sum(1).double() - start).abs() / start.abs()).mean()
    return float(input_error), float(middle_error), middle


def best(call, rounds: int) -> float:
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return min(times)


def measure(name: str, rounds: int) -> dict:
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = torchvision.models.get_model(name, weights=None, num_classes=10).eval()
    row = {"model": name}
    for size in (32, 64, 224):
        x = torch.rand(IMAGES, 3, size, size)
        try:
            with torch.no_grad():
                model(x[:2])
            break
        except Exception:  # too small for this network's pooling or patches
            continue
    row["size"] = size
    calibrated(model, x[:64])
    try:
        lrp = LRP(model, "epsilon")
    except WorkbenchError as exc:
        row["traced"] = exc.message.split(":")[0].replace("LRP cannot propagate relevance through ", "refused at ")
        return row
    row["traced"] = "traced"

    def relevance():
        for piece in x.split(BATCH):
            lrp.explain(piece)

    def floor():
        for piece in x.split(BATCH):
            piece = piece.clone().requires_grad_(True)
            logits = model(piece)
            logits.gather(1, logits.argmax(1, keepdim=True)).sum().backward()

    row["floor"] = best(floor, rounds)
    row["ratio"] = best(relevance, rounds) / row["floor"]
    import copy

    row["cons_in"], row["cons_mid"], row["middle"] = conservation(copy.deepcopy(model), x[:8])
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", help="comma-separated torchvision names (default: one or two per family)")
    parser.add_argument("--all", action="store_true", help="every classification network torchvision lists")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    names = (torchvision.models.list_models(module=torchvision.models) if args.all
             else args.models.split(",") if args.models else FAMILIES)
    warnings.simplefilter("ignore")  # BatchNorm that cannot be folded (DenseNet) warns once per layer
    print(f"{'model':22s} {'size':>4s}  {'traced':48s} {'cons.in':>9s} {'cons.mid':>9s} {'floor s':>8s} "
          f"{'ratio':>6s}  middle")
    for name in names:
        row = measure(name, args.rounds)
        cons = (f"{row['cons_in']:9.1e} {row['cons_mid']:9.1e} {row['floor']:8.2f} {row['ratio']:6.2f}  "
                f"{row['middle']}" if "ratio" in row else "")
        print(f"{name:22s} {row['size']:4d}  {row['traced'][:48]:48s} {cons}", flush=True)


if __name__ == "__main__":
    main()

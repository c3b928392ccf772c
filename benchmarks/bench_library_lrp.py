"""LRP on torchvision's classification networks: which are traced, how well relevance is conserved, and what a
relevance pass costs beside the floor.

Each network is built with random weights (seed 0, 10 classes, nothing downloaded), its BatchNorm statistics
taken from 64 of the random images, and explained at 32×32 (64×64 or 224×224 where 32×32 is too small for it).
For each:

  traced    the explainer's plan is built, or the refusal with the layer it names
  cons.in   conservation by construction: every bias and BatchNorm shift set to zero, LRP-0's relevance at
            the input, plus what is absorbed (the stabilisers' share, a ViT's class token's and position
            embedding's), against the predicted logit, |ΣR − logit| / |logit| averaged over 8 images, in float64
  cons.mid  the same at the block in the middle of the layer list
  ratio     a relevance pass to the input (LRP-ε, batches of 64, 256 images; at 224×224 batches of 8, 32
            images) over the floor: a plain
            forward + backward pass (the predicted logit's gradient with respect to the input), best of
            --rounds, in the same process
  reference for the ResNet and VGG families, Zennit (LRP-0 with its torchvision canonizers); for the ViT, lxt
            (AttnLRP's reference code, with its map for torchvision's ViT: CP-LRP in the attention): the relative
            L∞ difference of the input relevance of 4 images in float64, and the Spearman correlation of
            the per-channel relevance of the middle block (the agreement of the neuron ranking importance
            reads)

    .venv/bin/python benchmarks/bench_library_lrp.py [--models resnet18,vgg11_bn] [--all [--after NAME]] [--small]
        [--images 256] [--rounds 3]
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
LARGE_IMAGES, LARGE_BATCH = 32, 8  # at 224×224 (MaxViT, ViT): what 24 GiB holds while a relevance pass runs


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
    result = lrp.explain(x, layers=[middle], track_absorbed=True)
    start = result.start.double()
    absorbed = sum(result.absorbed.values())  # with biases at zero: stabilisers, a class token, a position embedding
    input_error = ((result.input.flatten(1).sum(1).double() + absorbed - start).abs() / start.abs()).mean()
    middle_error = ((result.layers[middle].flatten(1).sum(1).double() - start).abs() / start.abs()).mean()
    return float(input_error), float(middle_error), middle


def _spearman(a: torch.Tensor, b: torch.Tensor) -> float:
    ranks = [t.argsort().argsort().double() for t in (a, b)]
    ranks = [r - r.mean() for r in ranks]
    return float((ranks[0] * ranks[1]).sum() / (ranks[0].norm() * ranks[1].norm()))


def _reference_relevance(name: str, model, x: torch.Tensor, middle: str):
    """(input relevance, relevance at `middle`) by the peer library for this family, or None."""
    target = model(x).argmax(1)
    grabbed = {}
    module = dict(model.named_modules())[middle]
    if name.startswith(("resnet", "resnext", "wide_resnet", "vgg")):
        from zennit.attribution import Gradient
        from zennit.composites import LayerMapComposite
        from zennit.layer import Sum
        from zennit.rules import Epsilon, Norm, Pass
        from zennit.torchvision import ResNetCanonizer, VGGCanonizer
        from zennit.types import Activation, AvgPool, Convolution

        canonizer = VGGCanonizer() if name.startswith("vgg") else ResNetCanonizer()
        composite = LayerMapComposite([(Activation, Pass()), (AvgPool, Norm(1e-12)), (Sum, Norm(1e-12)),
                                       (Convolution, Epsilon(1e-12)), (torch.nn.Linear, Epsilon(1e-12))],
                                      canonizers=[canonizer])
        def grab(m, inputs, output):  # Zennit's modified gradient is the relevance itself
            output.register_hook(lambda g: grabbed.__setitem__("g", g))

        forward = module.register_forward_hook(grab)
        with Gradient(model, composite) as attributor:
            _, relevance = attributor(x.clone(), torch.eye(10, dtype=x.dtype)[target] * model(x))
        forward.remove()
        return relevance.detach(), grabbed["g"].detach()
    if name.startswith("vit"):
        return _lxt_relevance(model, x, module)
    return None


def _lxt_relevance(model, x: torch.Tensor, module):
    """lxt's CP-LRP map for torchvision's ViT as gradient × input; its package `__init__` imports language-model
    integrations (transformers 4), so the two modules needed are loaded alone."""
    import importlib.metadata
    import types

    root = Path(importlib.metadata.distribution("lxt").locate_file("lxt"))
    for package, folder in (("lxt", root), ("lxt.efficient", root / "efficient")):
        sys.modules.setdefault(package, types.ModuleType(package)).__path__ = [str(folder)]
    import lxt.efficient.patches as patches

    nn = torch.nn
    saved = {cls: dict(vars(cls)) for cls in (nn.GELU, nn.LayerNorm, nn.MultiheadAttention)}
    grabbed = {}
    try:
        patches.patch_method(patches.non_linear_forward, nn.GELU, keep_original=True)
        patches.patch_method(patches.layer_norm_forward, nn.LayerNorm)
        patches.patch_method(patches.cp_multi_head_attention_forward, nn.MultiheadAttention, keep_original=True)
        def grab(m, inputs, output) -> None:  # a hook that returned a value would replace the output
            output.retain_grad()
            grabbed["o"] = output

        hook = module.register_forward_hook(grab)
        x = x.clone().requires_grad_(True)
        logits = model(x)
        logits.gather(1, logits.argmax(1, keepdim=True)).sum().backward()
        hook.remove()
        return (x * x.grad).detach(), (grabbed["o"] * grabbed["o"].grad).detach()
    finally:
        for cls, attrs in saved.items():
            for attr in ("forward", "original_forward"):
                if attr in attrs:
                    setattr(cls, attr, attrs[attr])
                elif attr in vars(cls):
                    delattr(cls, attr)


def agreement(name: str, model, x: torch.Tensor, middle: str) -> tuple[float, float] | None:
    """(relative L∞ difference of the input relevance, Spearman of the middle block's channel relevance)."""
    import copy

    model, x = copy.deepcopy(model).double(), x.double()
    for m in model.modules():
        if isinstance(m, torch.nn.modules.batchnorm._BatchNorm):
            m.eps = 0.0  # Zennit 0.5 leaves 1/√(1 + eps) in each merged BatchNorm: both sides without it
    reference = _reference_relevance(name, copy.deepcopy(model), x, middle)
    if reference is None:
        return None
    ours = LRP(model, "lrp-0").explain(x, layers=[middle])
    difference = float((ours.input - reference[0]).abs().max() / reference[0].abs().max())
    channel = 2 if ours.layers[middle].dim() == 3 else 1  # a token sequence's features, a conv output's channels

    def per_channel(r):
        return r.sum(dim=[d for d in range(r.dim()) if d != channel])

    return difference, _spearman(per_channel(ours.layers[middle]), per_channel(reference[1]))


def best(call, rounds: int) -> float:
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return min(times)


def measure(name: str, rounds: int, sizes: tuple[int, ...] = (32, 64, 224), images: int = IMAGES) -> dict:
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = torchvision.models.get_model(name, weights=None, num_classes=10).eval()
    linears = [m for m in model.modules() if isinstance(m, torch.nn.Linear)]
    if linears and not linears[-1].weight.any():  # torchvision starts a ViT's classifier at zero: every logit 0
        torch.nn.init.normal_(linears[-1].weight, std=0.02)
    row = {"model": name}
    for size in sizes:
        x = torch.rand(max(IMAGES, images), 3, size, size)
        try:
            with torch.no_grad():
                model(x[:2])
            break
        except Exception:  # too small for this network's pooling or patches
            continue
    else:
        return {**row, "size": size, "traced": f"runs at none of {', '.join(f'{s}×{s}' for s in sizes)}: skipped"}
    row["size"] = size
    images, batch = (LARGE_IMAGES, LARGE_BATCH) if size == 224 else (images, BATCH)
    x = x[:images]
    calibrated(model, x[:64])
    try:
        lrp = LRP(model, "epsilon")
    except WorkbenchError as exc:
        row["traced"] = exc.message.split(":")[0].replace("LRP cannot propagate relevance through ", "refused at ")
        return row
    row["traced"] = "traced"

    def relevance():
        for piece in x.split(batch):
            lrp.explain(piece)

    def floor():
        for piece in x.split(batch):
            piece = piece.clone().requires_grad_(True)
            logits = model(piece)
            logits.gather(1, logits.argmax(1, keepdim=True)).sum().backward()

    row["floor"] = best(floor, rounds)
    row["ratio"] = best(relevance, rounds) / row["floor"]
    import copy

    row["cons_in"], row["cons_mid"], row["middle"] = conservation(copy.deepcopy(model), x[:8])
    row["agreement"] = agreement(name, model, x[:4], row["middle"])
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", help="comma-separated torchvision names (default: one or two per family)")
    parser.add_argument("--all", action="store_true", help="every classification network torchvision lists")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--small", action="store_true", help="only at 32×32 or 64×64 (skip what needs 224×224)")
    parser.add_argument("--images", type=int, default=IMAGES, help=f"images timed at 32×32/64×64 (default {IMAGES})")
    parser.add_argument("--after", help="with --all: start after this network (to continue a sweep)")
    args = parser.parse_args()
    names = (torchvision.models.list_models(module=torchvision.models) if args.all
             else args.models.split(",") if args.models else FAMILIES)
    if args.after:
        names = names[names.index(args.after) + 1:]
    warnings.simplefilter("ignore")  # BatchNorm that cannot be folded (DenseNet) warns once per layer
    print(f"{'model':22s} {'size':>4s}  {'traced':48s} {'cons.in':>9s} {'cons.mid':>9s} {'floor s':>8s} "
          f"{'ratio':>6s}  {'ref L∞':>8s} {'ref ρ':>7s}  middle")
    for name in names:
        try:
            row = measure(name, args.rounds, (32, 64) if args.small else (32, 64, 224), args.images)
        except Exception as exc:  # one network that fails to build or run does not end the table
            print(f"{name:22s}       failed: {type(exc).__name__}: {str(exc)[:80]}", flush=True)
            continue
        agreed = row.get("agreement")
        reference = f"{agreed[0]:8.1e} {agreed[1]:7.4f}" if agreed else f"{'':8s} {'':7s}"
        cons = (f"{row['cons_in']:9.1e} {row['cons_mid']:9.1e} {row['floor']:8.2f} {row['ratio']:6.2f}  "
                f"{reference}  {row['middle']}" if "ratio" in row else "")
        print(f"{name:22s} {row['size']:4d}  {row['traced'][:48]:48s} {cons}", flush=True)


if __name__ == "__main__":
    main()

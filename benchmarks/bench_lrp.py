"""LRP benchmark: our relevance pass against its floor and against Zennit, plus a full importance run.

In one process, on the same model and the same batches, it times
  (a) a plain forward + backward pass (the predicted logit's gradient w.r.t. input and weights;
      also shown: (a') the tighter floor of the input gradient alone),
  (b) our LRP-0 pass from the predicted logit to the input (and, for importance, to one layer only),
  (c) Zennit's pass under the matching composite (skipped with a note when Zennit is not installed),
and prints the ratios b/a and b/c. Each timing is the best of several interleaved rounds, so other
load on the machine inflates it as little as possible. Then it times the full importance run over
Fashion-MNIST's 60k training images with the bundled LeNet-5.

Goals (issue): b/a ≤ 3, b/c ≤ 1, the importance run well under a minute on 2 cores.
Run: `python benchmarks/bench_lrp.py [--rounds 5] [--images 2000] [--batch 250]` (about two minutes).
"""

from __future__ import annotations

import argparse
import copy
import statistics
import time

import torch
from torch import nn

from workbench.core.data.registry import load_dataset
from workbench.core.execution.jobs import JobContext
from workbench.core.importance.lrp import LRP
from workbench.core.importance.neuron_importance import compute_importance
from workbench.core.models.architectures import cifar_convnet
from workbench.core.models.model_io import load_model


def start_relevance(logits: torch.Tensor) -> torch.Tensor:
    pred = logits.argmax(1, keepdim=True)
    return torch.zeros_like(logits).scatter_(1, pred, logits.gather(1, pred))


def plain_pass(model: nn.Module, batches: list[torch.Tensor]) -> None:
    for x in batches:
        x = x.clone().requires_grad_(True)
        logits = model(x)
        logits.gather(1, logits.argmax(1, keepdim=True)).sum().backward()
    model.zero_grad(set_to_none=True)


def input_gradient_pass(model: nn.Module, batches: list[torch.Tensor]) -> None:
    """The tighter floor: forward + the predicted logit's gradient w.r.t. the input only."""
    for x in batches:
        x = x.clone().requires_grad_(True)
        logits = model(x)
        torch.autograd.grad(logits.gather(1, logits.argmax(1, keepdim=True)).sum(), x)


def our_pass(explainer: LRP, batches: list[torch.Tensor], **kwargs) -> None:
    for x in batches:
        explainer.explain(x, **kwargs)


def zennit_pass(model: nn.Module, batches: list[torch.Tensor], has_batchnorm: bool):
    """Zennit's LRP-0 composite (the test oracle for our rules); None when Zennit is not installed."""
    try:
        from zennit.attribution import Gradient
        from zennit.canonizers import SequentialMergeBatchNorm
        from zennit.composites import LayerMapComposite
        from zennit.layer import Sum
        from zennit.rules import Epsilon, Norm, Pass
        from zennit.types import Activation, AvgPool, Convolution
    except ImportError:
        return None
    eps = 1e-9
    composite = LayerMapComposite(
        [(Activation, Pass()), (AvgPool, Norm(eps)), (Sum, Norm(eps)), (Convolution, Epsilon(eps)),
         (nn.Linear, Epsilon(eps))], canonizers=[SequentialMergeBatchNorm()] if has_batchnorm else None)

    def run():
        with Gradient(model, composite) as attributor:
            for x in batches:
                attributor(x.clone(), start_relevance)
    return run


def best_of(fns: dict[str, callable], rounds: int) -> dict[str, tuple[float, float]]:
    """(best, median) seconds for each function, run interleaved round by round."""
    times: dict[str, list[float]] = {name: [] for name in fns}
    for name, fn in fns.items():  # warm-up
        fn()
    for _ in range(rounds):
        for name, fn in fns.items():
            t = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t)
    return {name: (min(ts), statistics.median(ts)) for name, ts in times.items()}


def compare(title: str, model: nn.Module, batches: list[torch.Tensor], has_batchnorm: bool, rounds: int,
            layer: str) -> None:
    images = sum(len(x) for x in batches)
    explainer = LRP(model)
    fns = {"(a) forward+backward": lambda: plain_pass(model, batches),
           "(a') forward+input gradient": lambda: input_gradient_pass(model, batches),
           "(b) ours, LRP-0 to input": lambda: our_pass(explainer, batches),
           f"(b) ours, LRP-0 to {layer}": lambda: our_pass(explainer, batches, layers=[layer], to_input=False)}
    zennit_model = copy.deepcopy(model)
    zennit = zennit_pass(zennit_model, batches, has_batchnorm)
    if zennit is not None:
        fns["(c) Zennit, LRP-0 to input"] = zennit
    result = best_of(fns, rounds)
    print(f"\n{title}: {images} images in batches of {len(batches[0])}, best (median) of {rounds} rounds")
    floor = result["(a) forward+backward"][0]
    for name, (best, median) in result.items():
        print(f"  {name:32s} {best * 1000:8.1f} ms ({median * 1000:.1f})   ×{best / floor:.2f} of (a)")
    ours = result["(b) ours, LRP-0 to input"][0]
    if zennit is not None:
        print(f"  ratio ours/Zennit: {ours / result['(c) Zennit, LRP-0 to input'][0]:.2f}")
    else:
        print("  Zennit not installed (pip install zennit==0.5.1): (c) skipped")


def importance_runs(batch: int, repeats: int) -> None:
    model = load_model("lenet5-fashion")
    dataset = load_dataset("fashion-mnist")
    print(f"\nImportance over fashion-mnist train ({len(dataset.split('train'))} images), lenet5-fashion, "
          f"LRP-0, batch {batch}:")
    for layer, per_class in (("fc2", False), ("fc2", True), ("conv1", False)):
        seconds = []
        for _ in range(repeats):
            t = time.perf_counter()
            result = compute_importance(JobContext("cpu"), model, dataset, layer, per_class=per_class,
                                        batch_size=batch)
            seconds.append(time.perf_counter() - t)
        print(f"  layer {layer:5s} per_class={per_class!s:5s}: best {min(seconds):5.1f} s, worst {max(seconds):5.1f} s "
              f"({result.correct} correctly classified; top-6 {result.top(6).tolist()})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--images", type=int, default=2000)
    parser.add_argument("--batch", type=int, default=250)
    parser.add_argument("--importance-batch", type=int, default=1000)
    parser.add_argument("--importance-repeats", type=int, default=3)
    args = parser.parse_args()
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads")

    lenet = load_model("lenet5-fashion").module
    test = load_dataset("fashion-mnist").split("test")
    batches = [x for _, x, _ in test.batches(args.batch, list(range(args.images)))]
    compare("LeNet-5 (lenet5-fashion), Fashion-MNIST test images", lenet, batches, False, args.rounds, "fc2")

    torch.manual_seed(0)
    convnet = cifar_convnet().eval()
    for m in convnet.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.uniform_(-0.2, 0.2)
            m.running_var.uniform_(0.5, 2.0)
    images = max(args.images // 4, args.batch)
    cifar_batches = [torch.rand(min(args.batch, images - i), 3, 32, 32) for i in range(0, images, args.batch)]
    compare("cifar-convnet (random weights, BatchNorm), random 32×32 images", convnet, cifar_batches, True,
            args.rounds, "fc1")

    importance_runs(args.importance_batch, args.importance_repeats)


if __name__ == "__main__":
    main()

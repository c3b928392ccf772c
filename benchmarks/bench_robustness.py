"""Robustness benchmark: FOL scoring against its floor, FGSM/PGD against torchattacks.

In one process, with the bundled `lenet5-fashion` in eval mode on the CPU, it times
  (i)  `score_inputs` (our public job: grad-L2, FOL∞ and FOSC-L2 with x0 and ε, softmax and the four
       uncertainty scores) over Fashion-MNIST's 60,000 training images, each moved to a random
       start inside the ε-ball, against two floors over the same arrays and batches:
       (a) forward + backward of the summed cross-entropy (gradients to the input and the weights),
       (a') forward + the input gradient alone (the least any per-input gradient score must do);
  (ii) our `attacks.pgd` and `attacks.fgsm` against torchattacks `PGD(ε, ε/6, 10)` and
       `FFGSM(ε, ε)` on the same model and the first 10,000 test images, batch by batch. Each side
       draws its own random start: ours from a `torch.Generator` seeded per batch, torchattacks
       from the global generator seeded the same way, so PGD starts from the same tensor
       and the outputs are compared; FFGSM draws with `randn_like(x).uniform_` instead, so for the
       FGSM identity check its start is rebuilt and injected (outside the timing).
  (iii) the coverage-guided baseline: `neuron_coverage_items` (NC, threshold 0, post-activation
       `conv1`, `conv2`, `fc1`, `fc2`) over the 60,000 training images, then `coverage_greedy` at
       1 % and 10 % of that pool with either fill (one timing each; no peer to compare with).
Functions run interleaved round by round after one warm-up; the table shows medians (and bests).
Goals (issue): (i) ≤ 1.3× the forward + backward floor; (ii) ≤ 1.05× torchattacks' time.

Run: `python benchmarks/bench_robustness.py [--rounds 5] [--eps 0.1] [--batch 256]` (a few minutes
on 2 cores). Needs torchattacks (`pip install --no-deps torchattacks==3.5.1`) for (ii).
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import numpy as np
import torch
import torch.nn.functional as F

from workbench.core.data.registry import load_dataset
from workbench.core.execution.jobs import JobContext
from workbench.core.models.model_io import load_model
from workbench.core.robustness import attacks
from workbench.core.robustness.scores import score_inputs
from workbench.core.robustness.selection import coverage_greedy, neuron_coverage_items


def interleaved(fns: dict, rounds: int) -> dict[str, tuple[float, float]]:
    """(median, best) seconds for each function, run interleaved round by round after one warm-up."""
    times: dict[str, list[float]] = {name: [] for name in fns}
    for fn in fns.values():
        fn()
    for _ in range(rounds):
        for name, fn in fns.items():
            t = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t)
    return {name: (statistics.median(ts), min(ts)) for name, ts in times.items()}


def table(title: str, result: dict[str, tuple[float, float]], reference: dict[str, str]) -> None:
    print(f"\n{title}", flush=True)
    print(f"  {'what':44s} {'median':>9s} {'best':>9s}   ratio (medians)")
    for name, (median, best) in result.items():
        ratio = f"×{median / result[reference[name]][0]:.3f} of {reference[name]}" if name in reference else ""
        print(f"  {name:44s} {median:8.3f}s {best:8.3f}s   {ratio}")


# --- (i) FOL over the training set -----------------------------------------------------------------

def floor_backward(module, x_adv: np.ndarray, labels: np.ndarray, batch: int) -> None:
    """(a) forward + backward of Σ CE: gradients to the input and to the weights."""
    for start in range(0, len(x_adv), batch):
        x = torch.from_numpy(x_adv[start:start + batch]).requires_grad_(True)
        y = torch.from_numpy(labels[start:start + batch])
        F.cross_entropy(module(x), y, reduction="sum").backward()
    module.zero_grad(set_to_none=True)


def floor_input_gradient(module, x_adv: np.ndarray, labels: np.ndarray, batch: int) -> None:
    """(a') forward + ∇_x Σ CE only."""
    for start in range(0, len(x_adv), batch):
        x = torch.from_numpy(x_adv[start:start + batch]).requires_grad_(True)
        y = torch.from_numpy(labels[start:start + batch])
        torch.autograd.grad(F.cross_entropy(module(x), y, reduction="sum"), x)


def bench_fol(model, train, eps: float, batch: int, rounds: int) -> None:
    x0 = train.numpy()
    labels = train.labels.astype(np.int64)
    generator = torch.Generator().manual_seed(0)
    x_adv = attacks.random_start(torch.from_numpy(x0), eps, generator).numpy()
    module = model.module.eval()
    ctx = JobContext(device="cpu")
    ours, floor, tight = "score_inputs (FOL∞, FOSC-L2, grad-L2, ξ…)", "(a) forward + backward", \
        "(a') forward + input gradient"
    fns = {floor: lambda: floor_backward(module, x_adv, labels, batch),
           tight: lambda: floor_input_gradient(module, x_adv, labels, batch),
           ours: lambda: score_inputs(ctx, model, x_adv, labels, x0=x0, eps=eps, batch_size=batch)}
    result = interleaved(fns, rounds)
    table(f"(i) FOL over {len(x0):,} Fashion-MNIST training images (random starts, ε = {eps}), batch {batch}, "
          f"{rounds} rounds", result, {ours: floor, tight: floor})
    print(f"  score_inputs / (a') = ×{result[ours][0] / result[tight][0]:.3f}")
    scores = score_inputs(ctx, model, x_adv[:2048], labels[:2048], x0=x0[:2048], eps=eps, batch_size=batch)
    print(f"  sanity: FOL∞ ≥ 0 on the first 2,048 starts: {bool((scores['fol_linf'] >= -1e-6).all())}; "
          f"median FOL∞ {np.median(scores['fol_linf']):.4g}")


# --- (ii) attacks against torchattacks ------------------------------------------------------------

def ours_pgd(module, batches, eps):
    return [attacks.pgd(module, x, y, eps, seed=k) for k, (x, y) in enumerate(batches)]


def ours_fgsm(module, batches, eps):
    return [attacks.fgsm(module, x, y, eps, seed=k) for k, (x, y) in enumerate(batches)]


def theirs(attack, batches):
    out = []
    for k, (x, y) in enumerate(batches):
        torch.manual_seed(k)  # the same start as ours for PGD (one whole-batch draw)
        out.append(attack(x, y))
    return out


def identity(module, batches, eps, pgd_attack, ffgsm_attack) -> tuple[float, float]:
    """Largest |ours − torchattacks| over all batches: PGD as timed, FGSM with FFGSM's start injected."""
    pgd_diff = max(float((a - b).abs().max()) for a, b in
                   zip(ours_pgd(module, batches, eps), theirs(pgd_attack, batches)))
    fgsm_diff = 0.0
    for k, (x, y) in enumerate(batches):
        torch.manual_seed(k)
        reference = ffgsm_attack(x, y)
        torch.manual_seed(k)
        start = torch.clamp(x + torch.randn_like(x).uniform_(-eps, eps), 0, 1)
        fgsm_diff = max(fgsm_diff, float((attacks.fgsm(module, x, y, eps, start=start) - reference).abs().max()))
    return pgd_diff, fgsm_diff


def bench_attacks(model, test, eps: float, batch: int, images: int, rounds: int) -> None:
    try:
        import torchattacks
    except ImportError:
        print("\n(ii) torchattacks not installed (pip install --no-deps torchattacks==3.5.1): skipped")
        return
    module = model.module.eval()
    batches = [(x, y.long()) for _, x, y in test.batches(batch, np.arange(min(images, len(test))))]
    pgd_attack = torchattacks.PGD(module, eps=eps, alpha=eps / 6, steps=10, random_start=True)
    ffgsm_attack = torchattacks.FFGSM(module, eps=eps, alpha=eps)
    fns = {"torchattacks PGD(ε, ε/6, 10)": lambda: theirs(pgd_attack, batches),
           "ours attacks.pgd": lambda: ours_pgd(module, batches, eps),
           "torchattacks FFGSM(ε, ε)": lambda: theirs(ffgsm_attack, batches),
           "ours attacks.fgsm": lambda: ours_fgsm(module, batches, eps)}
    result = interleaved(fns, rounds)
    n = sum(len(x) for x, _ in batches)
    table(f"(ii) attacks on {n:,} Fashion-MNIST test images, ε = {eps}, batch {batch}, {rounds} rounds", result,
          {"ours attacks.pgd": "torchattacks PGD(ε, ε/6, 10)", "ours attacks.fgsm": "torchattacks FFGSM(ε, ε)"})
    pgd_diff, fgsm_diff = identity(module, batches, eps, pgd_attack, ffgsm_attack)
    print(f"  identity: max |ours − torchattacks| PGD {pgd_diff:.2g}, FGSM {fgsm_diff:.2g}")


# --- (iii) the coverage-guided baseline ---------------------------------------------------------------

def bench_coverage_greedy(model, train, batch: int) -> None:
    layers = ["conv1", "conv2", "fc1", "fc2"]
    t = time.perf_counter()
    covers = neuron_coverage_items(JobContext(device="cpu"), model, layers, train, threshold=0.0, batch_size=batch)
    items_s = time.perf_counter() - t
    print(f"\n(iii) coverage-guided baseline on a pool of {len(covers):,} ({covers.shape[1]} NC neurons of "
          f"{', '.join(layers)}, threshold 0, {covers.mean():.1%} of the matrix set)", flush=True)
    print(f"  neuron_coverage_items: {items_s:.2f} s")
    for fill in ("reset", "total"):
        for percent in ("1%", "10%"):
            t = time.perf_counter()
            chosen = coverage_greedy(covers, percent, fill=fill)
            p = chosen.params
            print(f"  coverage_greedy {percent:>3s} (n = {p['budget']:,}), fill={fill}: {time.perf_counter() - t:6.2f} s; "
                  f"saturated after {p['saturated_at']}, {p['resets']} resets, {p['covered_items']}/{p['items']} covered")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--eps", type=float, default=0.1)  # the workbench's Fashion-MNIST default
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--attack-images", type=int, default=10_000)
    parser.add_argument("--skip-fol", action="store_true")
    parser.add_argument("--skip-attacks", action="store_true")
    parser.add_argument("--skip-coverage", action="store_true")
    parser.add_argument("--threads", type=int, default=0,
                        help="torch threads (default: every core this process may use). On a machine shared "
                             "with other busy processes, 1 avoids OpenMP threads waiting on each other.")
    args = parser.parse_args()
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    torch.set_num_threads(args.threads or cores)
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads on {cores} cores, load average {load:.2f} "
          "at start", flush=True)
    model = load_model("lenet5-fashion")
    data = load_dataset("fashion-mnist")
    if not args.skip_fol:
        bench_fol(model, data.split("train"), args.eps, args.batch, args.rounds)
    if not args.skip_attacks:
        bench_attacks(model, data.split("test"), args.eps, args.batch, args.attack_images, args.rounds)
    if not args.skip_coverage:
        bench_coverage_greedy(model, data.split("train"), args.batch)
    if hasattr(os, "getloadavg"):
        print(f"\nload average {os.getloadavg()[0]:.2f} at the end")


if __name__ == "__main__":
    main()

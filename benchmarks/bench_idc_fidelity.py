"""IDC fidelity: does our IDC behave as the DeepImportance paper says it should?
(docs/methods/idc.md#expected-behaviour)

For each bundled model at its IDC subject layer (docs/methods/idc.md#subject-layer) and m = 6, 8, 10, 12
on the model's own test split:

1. IDC in all-classes mode (one model) and in per-class mode (one model per class, test inputs routed
   by ground truth, the mean over classes: the paper's Table 3 protocol), as % and covered / |INCC|.
2. How often silhouette picks k = 2 (the paper's released clusterings: ~98 % of neurons).
3. IDC falls as m grows: IDC(m+1) ≤ IDC(m) in both modes.
4. Determinism: the whole measurement is run twice with the same seed, in fresh criteria without a
   project, and every centroid, covered combination and input's combination must be identical.
   A third run with seed 1 shows how much the seed moves the numbers.

Everything runs through `measure_coverage`, the job the CLI and the GUI use: relevance (LRP-0) over
the correctly classified training inputs, the four m share one importance and one training pass.

Run: `python benchmarks/bench_idc_fidelity.py [--models lenet5-fashion:fashion-mnist ...] [--no-seed-run]`
(about ten minutes on 2 cores for the two LeNet-5s; most of it is per-class clustering).
"""

from __future__ import annotations

import argparse
import itertools
import time
import warnings

import numpy as np
import torch

from workbench.core.coverage import IDC, measure_coverage
from workbench.core.coverage.measure import default_layer
from workbench.core.data.registry import load_dataset
from workbench.core.execution.jobs import JobContext
from workbench.core.models.layers import layer_catalogue
from workbench.core.models.model_io import load_model

MS = (6, 8, 10, 12)
DEFAULT_MODELS = ("lenet5-fashion:fashion-mnist", "lenet5-mnist5k:mnist-5k")
# DeepImportance Table 3, MNIST 60k/10k, released LeNets, per-class mean IDC %, U_O
PAPER = {"lenet1": {6: 34.6, 8: 14.1, 10: 5.5, 12: 2.1}, "lenet4": {6: 58.8, 8: 26.9, 10: 13.5, 12: 4.5},
         "lenet5": {6: 47.0, 8: 28.0, 10: 9.5, 12: 4.4}}


def idc_models(result) -> list[IDC]:
    """The IDC model(s) behind a result: one, or one per class."""
    c = result.criterion
    return list(c.members) if hasattr(c, "members") else [c]


def measure(model, data, layer: str, per_class: bool, seed: int) -> dict:
    entries = [(f"m{m}", IDC(m=m, seed=seed)) for m in MS]
    started = time.perf_counter()
    results = measure_coverage(JobContext("cpu"), model, data, layer, entries, per_class=per_class, seed=seed)
    return {"seconds": time.perf_counter() - started, "results": {m: results[f"m{m}"] for m in MS}}


def fingerprint(result) -> list:
    """Everything that must repeat exactly: per IDC model its neurons, centroids, covered codes with
    their counts, and every test input's combination."""
    out = []
    for idc in idc_models(result):
        codes, counts = idc.covered()
        out.append((idc.neurons.tolist(), [c.tolist() for c in idc.centroids], codes.tolist(), counts.tolist(),
                    idc.input_codes.tolist()))
    return out


def k2_share(result) -> tuple[int, int]:
    models = [idc for idc in idc_models(result) if not idc.empty]
    return sum(idc.k_histogram().get(2, 0) for idc in models), sum(len(idc.neurons) for idc in models)


def k_counts(result) -> dict[int, int]:
    """How many important neurons got k = 1, 2, 3, 4 clusters (k = 1: fewer than 10 non-zero training
    values, or a constant neuron), summed over the IDC models."""
    total: dict[int, int] = {}
    for idc in idc_models(result):
        for k, n in idc.k_histogram().items():
            total[k] = total.get(k, 0) + n
    return dict(sorted(total.items()))


def seed_effect(first: dict, other: dict) -> str:
    """What another k-means seed changes: IDC values, the number of clusters, the centroids."""
    values = ", ".join(f"m={m}: {other['results'][m].value.percent:.1f} %" for m in MS)
    same_k = same_codes = 0
    shift = 0.0
    for m in MS:
        a, b = idc_models(first["results"][m]), idc_models(other["results"][m])
        for x, y in zip(a, b):
            same_k += x.cluster_counts.tolist() == y.cluster_counts.tolist()
            same_codes += x.covered()[0].tolist() == y.covered()[0].tolist()
            for cx, cy in zip(x.centroids, y.centroids):
                if len(cx) == len(cy):
                    shift = max(shift, float(np.max(np.abs(cx - cy))))
    n = sum(len(idc_models(first["results"][m])) for m in MS)
    return (f"{values}; same k for every neuron in {same_k}/{n} IDC models, same covered combinations in "
            f"{same_codes}/{n}, centroids moved by at most {shift:.2g}")


def row(name: str, per_class: bool, run: dict) -> tuple[str, list[float]]:
    cells, fractions = [], []
    for m in MS:
        r = run["results"][m]
        k2, neurons = k2_share(r)
        fractions.append(r.value.fraction)
        counts = f"{r.value.covered:,}/{r.value.total:,}" + (" summed" if per_class else "")
        cells.append(f"{r.value.percent:.1f} % ({counts}; k=2 {k2}/{neurons})")
    mode = "per class (mean)" if per_class else "all classes"
    return f"| {name} | {mode} | " + " | ".join(cells) + f" | {run['seconds']:.0f} s |", fractions


def bench(spec: str, seed_run: bool) -> list[str]:
    model_name, data_name = spec.split(":", 1)
    model, data = load_model(model_name), load_dataset(data_name)
    layer = default_layer(layer_catalogue(model.module, data.image_shape))
    name = f"`{model_name}` `{layer}`"
    lines, notes = [], []
    for per_class in (False, True):
        first = measure(model, data, layer, per_class, seed=0)
        second = measure(model, data, layer, per_class, seed=0)
        text, fractions = row(name, per_class, first)
        lines.append(text)
        same = all(fingerprint(first["results"][m]) == fingerprint(second["results"][m]) for m in MS)
        falls = all(a >= b for a, b in itertools.pairwise(fractions))
        mode = "per class" if per_class else "all classes"
        notes.append(f"{mode}: falls as m grows: {'yes' if falls else 'NO'}; two runs with seed 0 identical "
                     f"(centroids, combinations, every input's code): {'yes' if same else 'NO'}")
        notes.append(f"{mode}: clusters per neuron (k: neurons) " + "; ".join(
            f"m={m}: " + ", ".join(f"{k}: {n}" for k, n in k_counts(first["results"][m]).items()) for m in MS))
        if seed_run and not per_class:
            notes.append(f"{mode}, seed 1 instead of 0: " + seed_effect(first, measure(model, data, layer, per_class,
                                                                                        seed=1)))
    arch = model.info.arch if hasattr(model.info, "arch") else model_name.split("-")[0]
    paper = PAPER.get(str(arch))
    if paper:
        notes.append("paper, MNIST, per-class mean (Table 3, U_O): " + ", ".join(f"m={m}: {v} %" for m, v in
                                                                                 paper.items()))
    train, test = data.split("train"), data.split("test")
    notes.insert(0, f"{data_name}: {len(train):,} train / {len(test):,} test inputs, layer {layer}")
    return lines + [f"  - {n}" for n in notes]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="+", default=list(DEFAULT_MODELS), metavar="MODEL:DATA")
    parser.add_argument("--no-seed-run", action="store_true", help="skip the seed-1 comparison run")
    args = parser.parse_args()
    torch.set_num_threads(2)
    warnings.simplefilter("ignore")
    print("| model, layer | mode | m = 6 | m = 8 | m = 10 | m = 12 | time (4 m) |")
    print("|---|---|---|---|---|---|---|")
    notes = []
    for spec in args.models:
        lines = bench(spec, not args.no_seed_run)
        for line in lines:
            (print if line.startswith("|") else notes.append)(line)
    print()
    print("\n".join(notes))


if __name__ == "__main__":
    main()

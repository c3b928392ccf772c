"""Foundation benchmark: data loading, training, evaluation and activation capture.

Prints each timing with its floor (a plain forward/backward pass over the same batches) or the
peer way of doing the same thing (torchvision's loader, a DataLoader-fed training loop), run side
by side in this process. Run: `python benchmarks/bench_foundation.py` (about two minutes on 2 cores).
"""

from __future__ import annotations

import gzip
import shutil
import tempfile
import time
from pathlib import Path

import torch
from torch import nn

from workbench.core.data import registry as dataset_registry
from workbench.core.execution.jobs import JobContext
from workbench.core.models.activations import NeuronDefinition, collect_activations
from workbench.core.models.architectures import get_architecture
from workbench.core.models.model_io import load_model
from workbench.core.models.training import evaluate, train


def timed(fn, repeat: int = 1):
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t)
    return best, out


def bench_loading() -> None:
    def ours():
        dataset_registry._CACHE.clear()
        return dataset_registry.load_dataset("fashion-mnist")

    t_ours, _ = timed(ours, 3)
    import torchvision

    with tempfile.TemporaryDirectory() as tmp:  # torchvision reads only the decompressed files
        raw = Path(tmp) / "FashionMNIST" / "raw"
        raw.mkdir(parents=True)
        for f in dataset_registry.fashion_mnist_dir().glob("*.gz"):
            with gzip.open(f) as src, open(raw / f.stem, "wb") as dst:
                shutil.copyfileobj(src, dst)
        t_tv, _ = timed(lambda: (torchvision.datasets.FashionMNIST(tmp, train=True),
                                 torchvision.datasets.FashionMNIST(tmp, train=False)), 3)
    t_5k, _ = timed(lambda: dataset_registry._load_mnist5k(), 3)
    print(f"load fashion-mnist 60k+10k (from .gz): {t_ours:.2f} s; torchvision from decompressed files "
          f"{t_tv:.2f} s (ratio {t_ours / t_tv:.2f})")
    print(f"load mnist-5k: {t_5k:.2f} s")


def floor_epoch(arch: str, x: torch.Tensor, y: torch.Tensor, batch: int = 128) -> float:
    """A plain forward + backward pass over the same batches: no optimiser step, no bookkeeping."""
    model = get_architecture(arch).build(10)
    loss_fn = nn.CrossEntropyLoss()
    t = time.perf_counter()
    for i in range(0, len(y), batch):
        loss_fn(model(x[i:i + batch]), y[i:i + batch]).backward()
    return time.perf_counter() - t


def dataloader_epoch(arch: str, split, batch: int = 128) -> float:
    """The common way: a torch Dataset returning one image at a time, fed through a DataLoader."""
    class PerImage(torch.utils.data.Dataset):
        def __len__(self):
            return len(split)

        def __getitem__(self, i):
            return split.tensor(slice(i, i + 1))[0], int(split.labels[i])

    model = get_architecture(arch).build(10)
    opt = torch.optim.Adam(model.parameters(), 1e-3)
    loss_fn = nn.CrossEntropyLoss()
    t = time.perf_counter()
    for xb, yb in torch.utils.data.DataLoader(PerImage(), batch_size=batch, shuffle=True):
        opt.zero_grad()
        loss_fn(model(xb), yb).backward()
        opt.step()
    return time.perf_counter() - t


def bench_training() -> None:
    data = dataset_registry.load_dataset("fashion-mnist")
    split = data.split("train")
    x, y = split.tensor(), torch.from_numpy(split.labels)
    for arch in ("lenet1", "lenet4", "lenet5"):
        result = train(JobContext("cpu"), arch, data, epochs=1, eval_split=None)
        floor = floor_epoch(arch, x, y)
        print(f"train {arch}, one epoch of 60k: {result.seconds_per_epoch:.2f} s; floor (forward+backward) "
              f"{floor:.2f} s, ratio {result.seconds_per_epoch / floor:.2f}")
    loader = dataloader_epoch("lenet5", split)
    print(f"train lenet5 through a per-image DataLoader (peer practice): {loader:.2f} s per epoch")


def bench_inference() -> None:
    data = dataset_registry.load_dataset("fashion-mnist")
    model = load_model("lenet5-fashion")
    test = data.split("test")
    t_eval, _ = timed(lambda: evaluate(JobContext("cpu"), model, data, "test"), 3)

    def plain():
        with torch.no_grad():
            for _, xb, _ in test.batches(1000):
                model.module(xb)

    t_floor, _ = timed(plain, 3)
    definition = NeuronDefinition("fc2", "post")
    t_act, acts = timed(lambda: collect_activations(JobContext("cpu"), model.module, test, definition,
                                                    (1, 28, 28), batch_size=1000), 3)
    print(f"evaluate lenet5 on 10k: {t_eval:.3f} s; floor (plain forward) {t_floor:.3f} s, ratio {t_eval / t_floor:.2f}")
    print(f"capture fc2 activations {acts.shape} on 10k: {t_act:.3f} s, ratio to plain forward {t_act / t_floor:.2f}")


if __name__ == "__main__":
    torch.manual_seed(0)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads")
    bench_loading()
    bench_inference()
    bench_training()

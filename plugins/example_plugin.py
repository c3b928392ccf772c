"""An example workbench plugin: a multi-layer perceptron and a small Fashion-MNIST subset.

A plugin is a Python file (or package) with a `register(registry)` function. Copy this file into
your user plugin folder (`workbench info` prints where it is) or into a folder named in
`WORKBENCH_PLUGIN_PATH`, and its additions appear in the CLI and the GUI.
"""

from __future__ import annotations


def mlp(num_classes: int = 10):
    """A 784-256-128 perceptron for 28×28 grey images, with named layers like the zoo models."""
    from collections import OrderedDict

    from torch import nn

    return nn.Sequential(OrderedDict([
        ("flatten", nn.Flatten()), ("fc1", nn.Linear(28 * 28, 256)), ("relu1", nn.ReLU()),
        ("fc2", nn.Linear(256, 128)), ("relu2", nn.ReLU()), ("fc3", nn.Linear(128, num_classes))]))


def fashion_mnist_small():
    """2,000 training and 1,000 test images of Fashion-MNIST, the same for every run (seed 0)."""
    from workbench.core.data import Dataset, DatasetCard, stratified_split
    from workbench.core.data.registry import load_dataset

    full = load_dataset("fashion-mnist")
    train, test = full.split("train"), full.split("test")
    pick_train = stratified_split(train.labels, 2000 / len(train), seed=0)[1]
    pick_test = stratified_split(test.labels, 1000 / len(test), seed=0)[1]
    return Dataset("fashion-mnist-small", full.class_names,
                   {"train": train.subset(pick_train), "test": test.subset(pick_test)},
                   DatasetCard("Fashion-MNIST, small stratified subset", full.card.source, full.card.licence,
                               "2,000 training and 1,000 test images, 10 % per class, seed 0."),
                   recipe={"name": "fashion-mnist-small"})


def register(registry) -> None:
    registry.add_architecture("mlp", mlp, (1, 28, 28), "Multi-layer perceptron 784-256-128 (example plugin)")
    from workbench.core.data.registry import FASHION_MNIST_INSTALL, fashion_mnist_missing

    registry.add_dataset("fashion-mnist-small", fashion_mnist_small, "Fashion-MNIST 2k/1k subset (example plugin)",
                         missing=fashion_mnist_missing, install=FASHION_MNIST_INSTALL)

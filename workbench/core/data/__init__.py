"""Datasets: the `Dataset` and `Split` the workbench computes on (`dataset.py`), the named datasets it knows
(`registry.py`), the readers of users' own files — image folders, NPZ, HDF5, CIFAR and SVHN folders (`readers.py`,
`idx.py`) — and class names and their order (`class_names.py`, `class_order.py`).

`Dataset`, `DatasetCard`, `Split` and `stratified_split` are the plugin API's names for a dataset (a plugin's
`load()` returns a `workbench.core.data.Dataset`), so they are importable from here.
"""

from workbench.core.data.dataset import Dataset, DatasetCard, Split, stratified_split

__all__ = ["Dataset", "DatasetCard", "Split", "stratified_split"]

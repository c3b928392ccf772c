"""Readers for users' own data: IDX folders, NPZ, HDF5, ImageFolder trees and torchvision sets.

Every reader returns a `Dataset` with images in [0, 1] and refuses bad files with a message that
names the file and the check that failed. Nothing here downloads unless the user asks for it.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from workbench.core.data.class_names import FASHION_CLASSES
from workbench.core.data.dataset import (Dataset, DatasetCard, Split, as_image_array, as_labels,
                                 check_unit_range, class_names_from, to_nchw)
from workbench.core.data.idx import load_idx_pair
from workbench.core.errors import WorkbenchError
from workbench.core.files import folder_entries, regular_file

IMAGE_SUFFIXES = {".png", ".jpg", ".jpeg", ".bmp"}
MAX_IMAGE_SIDE = 4096  # a larger picture is no classifier input; its header is read, never its pixels


def load_path(path: str | os.PathLike) -> Dataset:
    """Load a dataset from a file or folder, choosing the reader by what is there."""
    p = Path(path)
    if p.is_dir():
        if any(_is_idx_name(f.name) for f in folder_entries(p, "data folder")):
            return load_idx_folder(p)
        return load_image_folder(p)
    regular_file(p, "data file")
    suffix = p.suffix.lower()
    if suffix == ".npz":
        return load_npz(p)
    if suffix in (".h5", ".hdf5"):
        return load_hdf5(p)
    raise WorkbenchError(f"Don't know how to read {p.name} as a dataset.",
                         "Give a folder of IDX files or class sub-folders, a .npz or a .h5 file.")


def dataset_name(path: str | os.PathLike) -> str:
    """The name a dataset read from `path` goes by, before and after it is loaded: a folder's name, a
    file's name without its extension (my_fashion_1k.npz → my_fashion_1k)."""
    p = Path(path)
    return p.name if p.is_dir() or p.suffix.lower() not in (".npz", ".h5", ".hdf5") else p.stem


def _class_names(stored, labels: list[np.ndarray]) -> list[str]:
    """The stored names, or "0", "1", … up to the largest label (bounded by `as_labels`)."""
    names = class_names_from(stored)
    if names is not None:
        return names
    top = max((int(l.max()) for l in labels if l.size), default=0)
    return [str(i) for i in range(top + 1)]


def _make(path: Path, parts: dict[str, tuple], class_names, title: str) -> Dataset:
    labels = {k: as_labels(y, what=f"{path.name} {k} labels") for k, (_, y) in parts.items()}
    names = _class_names(class_names, list(labels.values()))
    splits = {k: Split(x, labels[k]) for k, (x, _) in parts.items()}
    return Dataset(dataset_name(path), names, splits, DatasetCard(title, str(path), "as given by the user"),
                   recipe={"path": str(Path(path).resolve())})  # loadable again from another folder


# --- IDX -------------------------------------------------------------------------------------------

def _is_idx_name(name: str) -> bool:
    return "idx" in name and ("images" in name or "labels" in name)


def load_idx_folder(folder: Path) -> Dataset:
    """Pair `*images*`/`*labels*` IDX files by split prefix (train / t10k or test)."""
    files = [f for f in folder_entries(folder, "data folder") if _is_idx_name(f.name)]
    splits = {}
    for split, prefixes in (("train", ("train",)), ("test", ("t10k", "test"))):
        imgs = [f for f in files if f.name.startswith(prefixes) and "images" in f.name]
        labs = [f for f in files if f.name.startswith(prefixes) and "labels" in f.name]
        for kind, found in (("image", imgs), ("label", labs)):
            if len(found) > 1:  # which one is meant (a file and its damaged copy, .gz and not)? never guessed
                raise WorkbenchError(f"{folder} holds {len(found)} {kind} files for the {split} split: "
                                     f"{', '.join(f.name for f in found)}.",
                                     "Keep one of them in the folder; move the others elsewhere.")
        if imgs and labs:
            splits[split] = load_idx_pair(imgs[0], labs[0])
        elif imgs or labs:
            raise WorkbenchError(f"{folder}: the {split} split has an images file or a labels file but not both.",
                                 "Put the matching *-images-idx3-ubyte and *-labels-idx1-ubyte files side by side.")
    if not splits:
        raise WorkbenchError(f"{folder} holds no IDX image/label pairs.",
                             "Name them like train-images-idx3-ubyte(.gz) and train-labels-idx1-ubyte(.gz).")
    names = _class_names(None, [s.labels for s in splits.values()])
    if len(names) == 10 and "fashion" in folder.name.lower():
        names = FASHION_CLASSES
    return Dataset(dataset_name(folder), names, splits, DatasetCard(folder.name, str(folder), "as given by the user"),
                   recipe={"path": str(Path(folder).resolve())})


# --- NPZ -------------------------------------------------------------------------------------------

def load_npz(path: Path) -> Dataset:
    import zipfile

    regular_file(path, "NPZ file")  # is_zipfile says False for a file it cannot read: say why instead
    if not zipfile.is_zipfile(path):  # np.load would take any other bytes for a pickle
        raise WorkbenchError(f"{path.name} cannot be read as an NPZ file: it is not a whole zip archive of arrays "
                             "(it may be cut short, or another kind of file).",
                             "Copy or write it again (numpy.savez writes one).")
    try:
        with np.load(path, allow_pickle=False) as z:
            data = {k: z[k] for k in z.files}
    except ValueError as exc:
        raise WorkbenchError(f"{path.name} holds pickled Python objects, which are never loaded.",
                             "Save plain arrays: np.savez(path, x=images, y=labels).") from exc
    except (OSError, EOFError, Exception) as exc:  # zipfile.BadZipFile and friends
        raise WorkbenchError(f"Cannot read {path.name} as an NPZ file: {exc}",
                             "Check the file is complete; write it with numpy.savez.") from exc
    if "x" in data and "y" in data:
        parts = {"test": (data["x"], data["y"])}
    elif "x_train" in data or "x_test" in data:
        parts = {s: (data[f"x_{s}"], data[f"y_{s}"]) for s in ("train", "test")
                 if f"x_{s}" in data and f"y_{s}" in data}
    else:
        raise WorkbenchError(f"{path.name} has arrays {sorted(data)}; expected x and y "
                             "(or x_train, y_train, x_test, y_test).", "Rename the arrays accordingly.")
    parts = {k: (as_image_array(x, f"{path.name} {k} images"), y) for k, (x, y) in parts.items()}
    return _make(path, parts, data.get("class_names"), path.name)


# --- HDF5 ------------------------------------------------------------------------------------------

class H5Images:
    """An HDF5 image dataset read batch by batch, converted to N×C×H×W on the fly."""

    def __init__(self, dataset, what: str):
        self._ds = dataset
        self._what = what
        probe = to_nchw(np.asarray(dataset[:1]), what)
        self.shape = (len(dataset),) + probe.shape[1:]
        self.dtype = np.dtype(np.uint8) if dataset.dtype == np.uint8 else np.dtype(np.float32)
        if not (dataset.dtype == np.uint8 or np.issubdtype(dataset.dtype, np.floating)):
            raise WorkbenchError(f"{what} have dtype {dataset.dtype}; expected uint8 or float.",
                                 "Store 8-bit pixels or floats in [0, 1].")
        if self.dtype != np.uint8:  # the rest is checked batch by batch as it is read
            check_unit_range(probe, what)

    def __len__(self) -> int:
        return self.shape[0]

    def __getitem__(self, index):
        if isinstance(index, slice):
            raw = self._ds[index]
        else:
            index = np.asarray(index)
            order = np.argsort(index)  # h5py reads increasing indices only
            unique, inverse = np.unique(index[order], return_inverse=True)
            raw = self._ds[unique][inverse][np.argsort(order)]
        out = to_nchw(np.asarray(raw), self._what)
        if out.dtype != np.uint8:
            out = out.astype(np.float32)
            check_unit_range(out, self._what)
        return out


def _h5_array(group, key: str, what: str):
    """`group[key]` if it is an array dataset; a group, a scalar or a link that leads nowhere is refused."""
    import h5py

    try:
        item = group.get(key)
    except (KeyError, OSError, ValueError, TypeError) as exc:  # an external link to a missing file
        raise WorkbenchError(f"{what} is a link that leads nowhere ({exc}).", "Store the array itself.") from exc
    if item is None:
        raise WorkbenchError(f"{what} is a link that leads nowhere.", "Store the array itself.")
    if not isinstance(item, h5py.Dataset):
        raise WorkbenchError(f"{what} is a {type(item).__name__}, not an array.", "Store the array itself.")
    if item.ndim == 0:
        raise WorkbenchError(f"{what} is a single value, not an array of shape (N, …).", "Store one entry per image.")
    return item


def load_hdf5(path: Path) -> Dataset:
    import h5py

    try:
        f = h5py.File(path, "r")
    except OSError as exc:
        raise WorkbenchError(f"Cannot open {path.name} as HDF5: {exc}", "Check the file is a complete HDF5 file.") from exc
    try:
        groups = {"test": f} if "x" in f and "y" in f else {s: f[s] for s in ("train", "test") if s in f}
        groups = {k: g for k, g in groups.items() if isinstance(g, h5py.Group) and "x" in g and "y" in g}
        if not groups:
            raise WorkbenchError(f"{path.name} has no datasets x and y at the root or in groups train/test.",
                                 "Write images to 'x' and labels to 'y'.")
        parts = {}
        for k, g in groups.items():
            where = f"{path.name}: {'' if g is f else k + '/'}"
            x, y = _h5_array(g, "x", f"{where}x"), _h5_array(g, "y", f"{where}y")
            parts[k] = (H5Images(x, f"{path.name} {k} images"), y[:])
        return _make(path, parts, f.attrs.get("class_names"), path.name)
    except BaseException:
        f.close()  # a refused file is not held open
        raise


# --- ImageFolder -----------------------------------------------------------------------------------

CLASSES_FILE = "classes.txt"
SORTED_FOLDERS = f"class folder names sorted A→Z (no {CLASSES_FILE})"
MAX_IMAGE_BYTES = 256 << 20  # no classifier input of at most MAX_IMAGE_SIDE a side is stored in more
_PNG_END = b"IEND\xaeB`\x82"  # the IEND chunk's type and its fixed CRC: the last 8 bytes of every whole PNG
_CLASSES_HINT = (f"{CLASSES_FILE} lists the class folder names, one a line, in the order of the class indices "
                 "(the model's training order); lines starting with # are comments.")


def _read_classes_file(path: Path, root: Path, folders: list[Path]) -> list[str]:
    """The class order a classes.txt gives, checked against the class folders of `root` (the dataset's
    root, or one of its splits): every name an existing folder, none twice, no folder that holds images
    left out."""
    try:
        text = regular_file(path, CLASSES_FILE).read_text(encoding="utf-8-sig")
    except UnicodeDecodeError as exc:
        raise WorkbenchError(f"{path} is not UTF-8 text.", _CLASSES_HINT) from exc
    except OSError as exc:
        raise WorkbenchError(f"Cannot read {path}: {exc.strerror or exc}.", "Check its permissions.") from exc
    present = {f.name for f in folders}
    names, first_line = [], {}
    for number, line in enumerate(text.splitlines(), 1):
        name = line.strip()
        if not name or name.startswith("#"):
            continue
        if name in first_line:
            raise WorkbenchError(f"{path} names the class {name!r} twice (lines {first_line[name]} and {number}).",
                                 "List every class once. " + _CLASSES_HINT)
        if name not in present:  # one of root's class folders, never a path elsewhere
            raise WorkbenchError(f"{path} names the class {name!r} (line {number}), but {root} has no "
                                 f"folder {name!r}.", "Fix the name to match a class folder, or create the "
                                 "folder. " + _CLASSES_HINT)
        first_line[name] = number
        names.append(name)
    if not names:
        raise WorkbenchError(f"{path} lists no classes.", _CLASSES_HINT)
    left_out = [f.name for f in folders if f.name not in first_line and _image_files(f)]
    if left_out:
        listed = ", ".join(map(repr, left_out[:5])) + (" …" if len(left_out) > 5 else "")
        many = len(left_out) > 1
        raise WorkbenchError(f"{path} leaves out the class folder{'s' * many} {listed} of {root}, which "
                             f"{'hold' if many else 'holds'} images.",
                             "Add every class folder that holds images. " + _CLASSES_HINT)
    return names


def _image_files(folder: Path) -> list[Path]:
    return [f for f in folder_entries(folder, "class folder") if f.suffix.lower() in IMAGE_SUFFIXES]


def _read_class_tree(root: Path, order_file: Path | None) -> tuple[np.ndarray, np.ndarray, list[str]]:
    folders = [d for d in folder_entries(root, "image folder") if d.is_dir()]
    classes = (_read_classes_file(order_file, root, folders) if order_file is not None
               else sorted(d.name for d in folders))  # torchvision's ImageFolder numbering
    images, labels = [], []
    for label, name in enumerate(classes):
        for f in _image_files(root / name):
            images.append(_read_image(regular_file(f, "image")))
            labels.append(label)
    if not images:
        raise WorkbenchError(f"{root} holds no images in class sub-folders.",
                             "Lay the folder out as root/<class name>/*.png.")
    shapes = {im.shape for im in images}
    if len(shapes) > 1:
        raise WorkbenchError(f"{root} holds images of different sizes: {sorted(shapes)[:4]}.",
                             "Resize the images to one size first.")
    return as_image_array(np.stack(images), str(root)), np.array(labels, dtype=np.int64), classes


def _read_image(path: Path) -> np.ndarray:
    """One image as an array, grey or RGB. A file that is empty, is no image, is cut short or damaged, or
    claims a picture larger than `MAX_IMAGE_SIDE` on a side (refused before its pixels are read), is
    refused naming the file."""
    import io
    import warnings

    from PIL import Image

    try:
        size = path.stat().st_size
        if size == 0:
            raise WorkbenchError(f"The image {path} is empty (0 bytes).", "Remove it, or copy the image again.")
        if size > MAX_IMAGE_BYTES:
            raise WorkbenchError(f"The image {path} is {size / (1 << 20):.0f} MB, more than an image the workbench "
                                 "reads.", "Resize it first.")
        data = path.read_bytes()  # read once: decoded from memory, and checked whole
    except OSError as exc:
        raise WorkbenchError(f"Cannot read the image {path}: {exc.strerror or exc}.",
                             "Check the file and its permissions.") from exc
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            with Image.open(io.BytesIO(data)) as im:
                if max(im.size) > MAX_IMAGE_SIDE:
                    raise WorkbenchError(f"The image {path} claims {im.size[0]}×{im.size[1]} pixels, more than the "
                                         f"{MAX_IMAGE_SIDE} a side the workbench reads.", "Resize it first.")
                kind = im.format
                pixels = np.asarray(im.convert("L" if im.mode in ("L", "1", "I", "P") else "RGB"))
            if kind == "PNG":
                _check_whole_png(data)
            return pixels
    except WorkbenchError:
        raise
    except Exception as exc:  # PIL raises OSError, SyntaxError, ValueError … for files that do not decode
        if isinstance(exc, Image.UnidentifiedImageError):
            raise WorkbenchError(f"{path} is not an image the workbench reads (PNG, JPEG or BMP).",
                                 "Remove the file from the class folder, or convert it.") from exc
        reason = str(exc)
        truncated = "truncated" in reason.lower()
        raise WorkbenchError(f"The image {path} is {'cut short' if truncated else 'damaged'}: {reason}.",
                             "Remove or replace the file; copy it again if it came from elsewhere.") from exc


def _check_whole_png(data: bytes) -> None:
    """PIL decodes a PNG whose last chunks are cut off (it stops once the pixels are read): every chunk's
    checksum and the closing IEND chunk must be there too."""
    import io

    from PIL import Image

    with Image.open(io.BytesIO(data)) as im:
        im.verify()  # reads the chunks after the header and checks their CRCs; raises when cut short
    if _PNG_END not in data:
        raise OSError("image file is truncated (the closing IEND chunk is missing)")


def load_image_folder(root: Path) -> Dataset:
    """root/<class>/*.png, optionally under root/train and root/test. Classes are numbered by their folder
    names sorted (torchvision's ImageFolder order) or in the order a classes.txt at the root gives."""
    sub = {s: root / s for s in ("train", "test") if (root / s).is_dir()}
    if not sub:
        sub = {"test": root}
    order_file = root / CLASSES_FILE if (root / CLASSES_FILE).exists() else None
    for folder in sub.values():
        if folder != root and (folder / CLASSES_FILE).exists():
            raise WorkbenchError(f"{folder / CLASSES_FILE} is read from the dataset's root only, where it sets the "
                                 "class order of every split.", f"Move it to {root / CLASSES_FILE}.")
    parts, class_names = {}, None
    for split, folder in sub.items():
        x, y, classes = _read_class_tree(folder, order_file)
        if class_names is not None and classes != class_names:
            raise WorkbenchError(f"{root}: train and test have different class folders.",
                                 "Give both splits the same class sub-folders.")
        class_names = classes
        parts[split] = (x, y)
    dataset = _make(root, parts, class_names, root.name)
    dataset.class_source = CLASSES_FILE if order_file is not None else SORTED_FOLDERS
    return dataset


# --- torchvision -----------------------------------------------------------------------------------

TORCHVISION_SETS = ("MNIST", "FashionMNIST", "KMNIST", "CIFAR10", "CIFAR100", "SVHN")


def torchvision_cache() -> Path:
    import platformdirs

    return Path(os.environ.get("WORKBENCH_DATA_CACHE", platformdirs.user_cache_dir("dl-workbench"))) / "torchvision"


def load_torchvision(name: str, download: bool = False, root: str | os.PathLike | None = None) -> Dataset:
    """A torchvision dataset from a cache folder; downloads only when `download` is asked for."""
    if name not in TORCHVISION_SETS:
        raise WorkbenchError(f"Unknown torchvision dataset {name!r}.", f"Choose one of {', '.join(TORCHVISION_SETS)}.")
    import torchvision

    root = Path(root) if root else torchvision_cache()
    cls = getattr(torchvision.datasets, name)
    splits = {}
    try:
        for split, train in (("train", True), ("test", False)):
            kw = {"split": "train" if train else "test"} if name == "SVHN" else {"train": train}
            ds = cls(str(root), download=download, **kw)
            x = np.asarray(ds.data)
            y = np.asarray(ds.labels if name == "SVHN" else ds.targets)
            splits[split] = Split(as_image_array(x, name), as_labels(y))
    except (RuntimeError, OSError) as exc:
        action = ("The download failed; check the network connection." if download else
                  f"It is not in {root}. Download it once with network access: pass --download, or tick Download in the GUI's Open dataset dialog.")
        raise WorkbenchError(f"torchvision dataset {name} could not be loaded: {exc}", action) from exc
    classes = [str(c) for c in getattr(cls, "classes", [])] or None
    if classes is None or len(classes) < max(int(s.labels.max()) for s in splits.values()) + 1:
        classes = _class_names(None, [s.labels for s in splits.values()])
    return Dataset(f"torchvision-{name}", classes, splits,
                   DatasetCard(name, f"torchvision.datasets.{name} in {root}", "see the dataset's own terms"),
                   recipe={"name": f"torchvision:{name}"})

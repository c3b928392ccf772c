"""Loading and saving classifiers safely, with a descriptor of what each model expects.

Accepted: the workbench's own checkpoints (a dict of plain data and tensors), plain state_dicts
(`.pt`, `.pth`, `.safetensors`) into a named zoo or plugin architecture, TorchScript archives and
`torch.export` programs (`.pt2`). Everything goes through `torch.load(weights_only=True)`; a full
pickle is loaded only when the caller passes `trust=True` because the user said they trust the file.
"""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import re
import tempfile
import warnings
import zipfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from workbench.core.errors import WorkbenchError
from workbench.core.execution.jobs import SentOnce
from workbench.core.files import regular_file
from workbench.core.models.architectures import get_architecture
from workbench.core.resources import resources_dir

if TYPE_CHECKING:  # torch is imported lazily so the GUI starts fast
    import torch

CHECKPOINT_FORMAT = "workbench-checkpoint"
CHECKPOINT_VERSION = 1


@dataclass
class ModelInfo:
    """What a model expects and where it came from."""

    name: str
    source: str
    format: str
    arch: str | None = None
    input_shape: tuple[int, int, int] | None = None
    class_names: list[str] | None = None
    value_range: tuple[float, float] = (0.0, 1.0)
    card: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        d = asdict(self)
        d["input_shape"] = list(self.input_shape) if self.input_shape else None
        d["value_range"] = list(self.value_range)
        return d


@dataclass
class LoadedModel(SentOnce):
    """A classifier in eval mode with its descriptor."""

    module: "torch.nn.Module"
    info: ModelInfo

    @property
    def name(self) -> str:
        return self.info.name

    def fingerprint(self) -> str:
        """A short hash of the weights: results computed with other weights are told apart by it."""
        return weights_digest(self.module.state_dict())[:16]


def weights_digest(state: dict) -> str:
    """SHA-256 of a state_dict's names and tensor bytes, in order: what checkpoints and model cards
    record, so weights damaged on disk are found when they are loaded."""
    import torch

    h = hashlib.sha256()
    for key, tensor in state.items():
        h.update(key.encode())
        data = tensor.detach().cpu().contiguous()
        try:
            h.update(data.numpy().tobytes())
        except TypeError:  # a dtype numpy lacks (bfloat16): its raw bytes
            h.update(data.reshape(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def check_weights(path: Path, state: dict, recorded) -> None:
    """Refuse weights whose hash differs from the one recorded when they were saved."""
    if recorded and weights_digest(state) != recorded:
        raise WorkbenchError(f"{path.name} is damaged: its weights do not match the hash recorded when it was "
                             "saved (in the checkpoint or its model card).",
                             "Restore the file from a copy, or train the model again.")


def check_checkpoint_version(path: Path, version) -> None:
    if not isinstance(version, int) or isinstance(version, bool) or not 1 <= version <= CHECKPOINT_VERSION:
        raise WorkbenchError(f"{path.name} is a workbench checkpoint of checkpoint format {version!r}; this "
                             f"workbench reads checkpoint format 1 to {CHECKPOINT_VERSION}.",
                             "Update the workbench to load it.")


# --- bundled models ----------------------------------------------------------------------------

ADVERTORCH_MODELS = {"advertorch-lenet5-clean": "mnist_lenet5_clntrained.pt",
                     "advertorch-lenet5-adv": "mnist_lenet5_advtrained.pt"}
ADVERTORCH_INSTALL = "pip install --no-deps advertorch==0.2.3"


def _advertorch_file(name: str) -> Path | None:
    import importlib.util

    try:
        spec = importlib.util.find_spec("advertorch_examples")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(list(spec.submodule_search_locations)[0]) / "trained_models" / ADVERTORCH_MODELS[name]
    return path if path.exists() else None


def bundled_models() -> list[dict]:
    """The model cards of the bundled weights, plus advertorch's two when installed."""
    cards = []
    for card_path in sorted((resources_dir() / "models").glob("*.json")):
        card = json.loads(card_path.read_text())
        card["path"] = str(card_path.with_suffix(".pt"))
        card["available"] = card_path.with_suffix(".pt").exists()
        cards.append(card)
    for name in ADVERTORCH_MODELS:
        path = _advertorch_file(name)
        cards.append({
            "name": name, "arch": "advertorch-lenet5", "dataset": "mnist",
            "title": f"advertorch MNIST LeNet5, {'adversarially' if name.endswith('adv') else 'cleanly'} trained",
            "source": "advertorch 0.2.3 (installed package, loaded by path, never copied)",
            "licence": "LGPL-3.0", "path": str(path) if path else "", "available": path is not None,
            "install": "" if path else ADVERTORCH_INSTALL, "class_names": [str(i) for i in range(10)],
            "input_shape": [1, 28, 28]})
    return cards



def bundled_classifier(dataset: str) -> str | None:
    """The bundled classifier for dataset `dataset` (a LeNet-5 first), or None: the reference that
    measures a generator's seed acceptance when none is named."""
    cards = [c for c in bundled_models() if c.get("dataset") == dataset and c.get("available")]
    cards.sort(key=lambda c: (c.get("arch") != "lenet5", c["name"]))
    return cards[0]["name"] if cards else None

def resolve_model(spec: str) -> tuple[Path, dict]:
    """A bundled name or a path → (file, card); the card is empty for a user's file."""
    for card in bundled_models():
        if card["name"] == spec:
            if not card["available"]:
                raise WorkbenchError(f"Bundled model {spec!r} is not available here.",
                                     f"Install it with: {card.get('install') or 'reinstall the workbench'}")
            return Path(card["path"]), card
    names = ", ".join(c["name"] for c in bundled_models())
    if not str(spec).strip():
        raise WorkbenchError("No model was named.", f"Give a path to a model file, or one of: {names}.")
    path = Path(spec)
    if not path.exists():
        raise WorkbenchError(f"No model file {spec!r} and no bundled model of that name.",
                             f"Give a path to a .pt/.pth/.pt2/.safetensors file, or one of: {names}.")
    return regular_file(path, "model file"), {}


# --- loading -----------------------------------------------------------------------------------

def _sidecar(path: Path) -> dict:
    for candidate in (path.with_name(path.name + ".json"), path.with_suffix(".json")):
        if candidate.exists() and candidate != path:
            try:
                card = json.loads(regular_file(candidate, "model descriptor").read_text(encoding="utf-8"))
            except (json.JSONDecodeError, UnicodeDecodeError) as exc:
                what = "not UTF-8 text" if isinstance(exc, UnicodeDecodeError) else "not valid JSON"
                raise WorkbenchError(f"The model descriptor {candidate.name} is {what}: {exc}",
                                     "Fix or delete the descriptor file.") from exc
            return check_descriptor(card, candidate.name)
    return {}


def check_descriptor(card, what: str) -> dict:
    """A model descriptor (or card) with the shapes its fields need: an object whose `input_shape` is
    three positive whole numbers and whose `class_names` is a list of text."""
    fix = "Fix or delete the descriptor file."
    if not isinstance(card, dict):
        raise WorkbenchError(f"The model descriptor {what} is a JSON {type(card).__name__}, not an object.", fix)
    shape = card.get("input_shape")
    if shape is not None and not (isinstance(shape, list) and len(shape) == 3 and
                                  all(isinstance(d, int) and not isinstance(d, bool) and 0 < d <= 100_000
                                      for d in shape)):
        raise WorkbenchError(f"The model descriptor {what} gives input_shape {shape!r}; expected [channels, "
                             "height, width], e.g. [1, 28, 28].", fix)
    names = card.get("class_names")
    if names is not None and not (isinstance(names, list) and names and all(isinstance(n, str) for n in names)):
        raise WorkbenchError(f"The model descriptor {what} gives class_names {str(names)[:80]!r}; expected a list of "
                             "names.", fix)
    for key in ("name", "arch"):
        if key in card and card[key] is not None and not isinstance(card[key], str):
            raise WorkbenchError(f"The model descriptor {what} gives {key} {card[key]!r}; expected text.", fix)
    return card


def _is_torchscript(path: Path) -> bool:
    if not zipfile.is_zipfile(path):
        return False
    with zipfile.ZipFile(path) as z:
        return any(n.split("/", 1)[-1].startswith("code/") for n in z.namelist())


def _state_dict_diff(module, state: dict) -> str:
    own = module.state_dict()
    missing = [k for k in own if k not in state]
    extra = [k for k in state if k not in own]
    shapes = [f"{k}: file {tuple(state[k].shape)} vs model {tuple(own[k].shape)}"
              for k in own if k in state and tuple(state[k].shape) != tuple(own[k].shape)]
    def listed(items: list[str], sep: str) -> str:
        more = f"{sep}… and {len(items) - 8} more" if len(items) > 8 else ""
        return sep.join(items[:8]) + more

    parts = []
    if missing:
        parts.append("missing in file: " + listed(missing, ", "))
    if extra:
        parts.append("not in the architecture: " + listed(extra, ", "))
    if shapes:
        parts.append("shape mismatch: " + listed(shapes, "; "))
    return "\n".join(parts)


def infer_architecture(path: Path, state: dict) -> str:
    """The one known architecture whose parameter names and shapes match a bare state_dict exactly;
    none or several is a refusal that says which to choose."""
    from workbench.core.models.architectures import architectures

    fitting = []
    for arch in architectures():
        try:
            if not _state_dict_diff(arch.build(_weights_classes(arch, state) or 10), state):
                fitting.append(arch.name)
        except Exception:  # an architecture that cannot be built here (a broken plugin's) fits nothing
            continue
    if not fitting:  # a model library's network, by its parameter names and shapes
        from workbench.core.models.library_models import recognise

        fitting = [name for name, _ in recognise(state)]
    if len(fitting) == 1:
        return fitting[0]
    names = ", ".join(a.name for a in architectures())
    if fitting:
        raise WorkbenchError(f"{path.name} holds only weights, and they fit {len(fitting)} architectures: "
                             f"{', '.join(fitting)}.", "Choose the one it was trained with (GUI: the architecture "
                             "list; CLI: --arch), or put a descriptor JSON with \"arch\" beside the file.")
    from workbench.core.models.library_models import vision_transformer_settings

    transformer = vision_transformer_settings(state)
    if transformer:
        raise WorkbenchError(f"{path.name} holds the weights of a vision transformer of a size torchvision does not "
                             f"build by name: {transformer}.", "Name it with --arch (GUI: type it in the "
                             "architecture box), putting in the number of attention heads it was trained with, which "
                             "no weight's shape tells.")
    raise WorkbenchError(f"{path.name} holds only weights, and they fit none of the known architectures, nor a "
                         f"classification model of torchvision.",
                         f"Name its architecture (--arch torchvision:NAME or timm:NAME for a library's network whose "
                         f"layers you changed), add it with a plugin, or save the whole model (TorchScript or "
                         f"torch.export). Known: {names}.")


def _weights_classes(arch, state: dict) -> int | None:
    """The class count `state` gives `arch`: the length of the architecture's last weight in the
    state (None when the state lacks it). The network is built on the meta device where it can be (no
    memory, no initialisation: a ViT-H has 632 M parameters)."""
    import torch

    try:
        with torch.device("meta"):
            probe = arch.build(10)
    except Exception:  # a network that initialises from tensor values: built for real
        probe = arch.build(10)
    last = [k for k, v in probe.state_dict().items() if v.dim() >= 1][-1]
    weight = state.get(last)
    return int(weight.shape[0]) if hasattr(weight, "shape") and weight.dim() else None


def _build(arch_name: str, state: dict, num_classes: int | None = None):
    arch = get_architecture(arch_name)
    from_weights = _weights_classes(arch, state)
    num_classes = num_classes or from_weights or 10
    module = arch.build(num_classes)
    diff = _state_dict_diff(module, state)
    if diff:
        if (from_weights is not None and from_weights != num_classes
                and not _state_dict_diff(arch.build(from_weights), state)):
            raise WorkbenchError(f"The checkpoint names {num_classes} classes, but its weights have "
                                 f"{from_weights} outputs.", "Fix the class_names recorded with it (in "
                                 "the checkpoint's info or its descriptor); the weights fit the architecture.")
        raise WorkbenchError(f"The weights do not fit architecture {arch_name!r}.",
                             "Choose the architecture the weights were trained with.", details=diff)
    module.load_state_dict(state, strict=True)
    return module, arch


def _looks_pickled(path: Path) -> bool:
    """A torch.save archive (a zip) or a legacy pickle (protocol 2+ starts with 0x80)."""
    if zipfile.is_zipfile(path):
        return True
    with open(path, "rb") as f:
        return f.read(1) == b"\x80"


def _refused_global(exc: Exception) -> str:
    """The one useful line of torch's long weights-only refusal (which also carries terminal codes)."""
    text = re.sub(r"\x1b\[[0-9;]*m", "", str(exc))
    found = re.search(r"Unsupported global: GLOBAL ([\w.]+)", text)
    return f"The file needs the Python object {found.group(1)} to be unpickled." if found else text


CUT_SHORT = "It was probably cut short while it was copied or downloaded: copy or export it again."
MODEL_FILES = "Give a model file: .pt or .pth (torch.save), .pt2 (torch.export), TorchScript, or .safetensors."


def unreadable_model_file(path: Path, exc: BaseException) -> WorkbenchError:
    """Why a file the readers refused is no model, said from what its bytes are (an empty file, a cut-off
    or foreign zip, a NumPy or HDF5 file, a damaged pickle): the reader's own text goes to the details."""
    details = f"{type(exc).__name__}: {exc}"
    if isinstance(exc, PermissionError):
        return WorkbenchError(f"{path.name} cannot be read: permission denied.",
                              "Fix its permissions, or copy it somewhere you can read it.", details=details)
    try:
        size = path.stat().st_size
        with open(path, "rb") as f:
            head = f.read(16)
    except PermissionError:
        return WorkbenchError(f"{path.name} cannot be read: permission denied.",
                              "Fix its permissions, or copy it somewhere you can read it.", details=details)
    except OSError as err:
        return WorkbenchError(f"{path.name} cannot be read: {err.strerror or err}.", "Check the file and its disk.",
                              details=details)
    if size == 0:
        return WorkbenchError(f"{path.name} is empty (0 bytes).", CUT_SHORT, details=details)
    if head.startswith(b"PK"):
        try:
            with zipfile.ZipFile(path) as archive:
                names = archive.namelist()
        except (zipfile.BadZipFile, OSError):  # the list of its contents, at its end, is missing
            return WorkbenchError(f"{path.name} is a zip archive (the format torch.save and .npz files use) that is cut "
                                  "off or damaged.", CUT_SHORT, details=details)
        if any(n.endswith(".npy") for n in names):
            return WorkbenchError(f"{path.name} is a NumPy archive of arrays (.npz), not a model.",
                                  f"Open it as a dataset (File → Open dataset). {MODEL_FILES}", details=details)
        if any(n.endswith("data.pkl") for n in names):
            return WorkbenchError(f"{path.name} is a PyTorch archive whose contents are damaged.", CUT_SHORT,
                                  details=details)
        return WorkbenchError(f"{path.name} is a zip archive, but not one PyTorch wrote.", MODEL_FILES,
                              details=details)
    if head.startswith(b"\x89HDF"):
        return WorkbenchError(f"{path.name} is an HDF5 file, not a PyTorch model.",
                              f"Open it as a dataset if it holds arrays (File → Open dataset). {MODEL_FILES}",
                              details=details)
    if head[8:10] == b'{"':  # a safetensors header: its length, then JSON
        return WorkbenchError(f"{path.name} looks like a safetensors file under another name, and a damaged one.",
                              f"Rename it to end in .safetensors; if it still fails, {CUT_SHORT[0].lower()}"
                              f"{CUT_SHORT[1:]}", details=details)
    if head[:1] == b"\x80":  # a pickle (torch.save's legacy format)
        said = str(exc).lower()
        if isinstance(exc, EOFError) or any(w in said for w in ("truncated", "ran out of input", "eof")):
            return WorkbenchError(f"{path.name} is cut off: it ends before the data it begins with does.", CUT_SHORT,
                                  details=details)
        return WorkbenchError(f"{path.name} is a pickle that cannot be read: it is damaged.", CUT_SHORT,
                              details=details)
    return WorkbenchError(f"{path.name} is not a PyTorch file: it is neither a torch.save archive nor a pickle.",
                          f"It may be damaged, or of another format. {MODEL_FILES}", details=details)


def _torch_load(path: Path, trust: bool):
    import torch

    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as exc:
        if not _looks_pickled(path):  # random bytes also fail in the unpickler; they are no pickle
            raise unreadable_model_file(path, exc) from exc
        if not trust and "Unsupported global" not in str(exc):  # a pickle code it cannot read: no object named
            raise WorkbenchError(
                f"{path.name} holds a pickle that cannot be read as plain weights: it is damaged, or holds a "
                "pickled Python object.", "If you trust where it came from, load it whole: pass --trust-file (GUI: "
                "tick 'I trust this file'); otherwise copy or export it again.",
                details=_refused_global(exc)) from exc
        if not trust:
            raise WorkbenchError(
                f"{path.name} holds a pickled Python object, not just weights; loading it could run code.",
                "Load it only if you trust where it came from: pass --trust-file (GUI: tick "
                "'I trust this file'), or re-save it as a state_dict.", details=_refused_global(exc)) from exc
        return torch.load(path, map_location="cpu", weights_only=False)
    except Exception as exc:  # truncated zips, random bytes, wrong formats
        raise unreadable_model_file(path, exc) from exc


def _load_exported(path: Path):
    """A torch.export archive's module; torch's own log of a failed load (a traceback per attempt) is
    kept from the terminal, and the failure said in one line."""
    import logging

    import torch

    logger = logging.getLogger("torch.export")
    level = logger.level
    logger.setLevel(logging.CRITICAL)
    try:
        return torch.export.load(str(path)).module()
    except Exception as exc:
        with open(path, "rb") as f:
            head = f.read(2)
        if not head or (head == b"PK" and not zipfile.is_zipfile(path)):  # empty, or a cut-off archive
            raise unreadable_model_file(path, exc) from exc
        raise WorkbenchError(f"{path.name} is not a readable torch.export archive.",
                             "Export the model again with torch.export.save.", details=str(exc)) from exc
    finally:
        logger.setLevel(level)


def _load_torchscript(path: Path):
    import torch

    try:
        with warnings.catch_warnings():  # torch.jit.load's deprecation notice is not the user's to act on
            warnings.simplefilter("ignore", FutureWarning)
            return torch.jit.load(str(path), map_location="cpu")
    except Exception as exc:
        raise WorkbenchError(f"{path.name} is a TorchScript archive that cannot be read: it is damaged, or was "
                             "written by a newer PyTorch.", "Save it again with torch.jit.save, or update PyTorch.",
                             details=f"{type(exc).__name__}: {exc}") from exc


def _load_safetensors(path: Path) -> dict:
    from safetensors.torch import load_file

    try:
        return load_file(str(path))
    except Exception as exc:  # safetensors raises its own error types for a damaged header
        with open(path, "rb") as f:
            head = f.read(16)
        if not head or head.startswith((b"PK", b"\x80", b"\x89HDF")):  # empty, or another format by its name
            raise unreadable_model_file(path, exc) from exc
        raise WorkbenchError(f"{path.name} is not a complete safetensors file: its header is damaged or the file "
                             "is cut short.", CUT_SHORT, details=f"{type(exc).__name__}: {exc}") from exc


def load_model(spec: str | os.PathLike, arch: str | None = None, trust: bool = False) -> LoadedModel:
    """Load a bundled model by name, or a model file by path, in eval mode."""
    import torch
    from torch import nn

    path, card = resolve_model(str(spec))
    meta = {**_sidecar(path), **card}
    arch = arch or meta.get("arch")
    fmt = "state_dict"
    arch_obj = None
    try:
        if path.suffix == ".pt2":
            module, fmt = _load_exported(path), "torch.export"
            # The exported graph keeps the mode it was exported in; its train()/eval() stubs raise,
            # so restore nn.Module's, which only set flags (needed for .eval() and .to().eval()).
            module.__dict__.pop("train", None)
            module.__dict__.pop("eval", None)
        elif _is_torchscript(path):
            module, fmt = _load_torchscript(path), "torchscript"
        elif path.suffix == ".safetensors":
            state = _load_safetensors(path)
            if not arch:
                arch, meta = infer_architecture(path, state), {**meta, "arch_inferred": True}
            module, arch_obj = _build(arch, state)
            # safetensors keeps its keys sorted: the recorded hash is over the module's own order
            check_weights(path, module.state_dict(), meta.get("weights_sha256"))
        else:
            obj = _torch_load(path, trust)
            if isinstance(obj, nn.Module):
                module, fmt = obj, "pickle (trusted)"
            elif isinstance(obj, dict) and obj.get("format") == CHECKPOINT_FORMAT:
                check_checkpoint_version(path, obj.get("version"))
                check_weights(path, obj["state_dict"], obj.get("weights_sha256") or meta.get("weights_sha256"))
                meta = {**obj.get("info", {}), **meta}
                arch = arch or obj["arch"]
                module, arch_obj = _build(arch, obj["state_dict"], len(obj["info"]["class_names"]))
                fmt = "checkpoint"
            elif isinstance(obj, dict) and obj and all(isinstance(v, torch.Tensor) for v in obj.values()):
                check_weights(path, obj, meta.get("weights_sha256"))
                if not arch:
                    arch, meta = infer_architecture(path, obj), {**meta, "arch_inferred": True}
                module, arch_obj = _build(arch, obj)
            else:
                raise WorkbenchError(f"{path.name} holds a {type(obj).__name__}, not a model or its weights.",
                                     "Save the model's state_dict() or a TorchScript/torch.export archive.")
    except WorkbenchError:
        raise
    except Exception as exc:
        raise WorkbenchError(f"Could not load the model in {path.name}: {exc}",
                             "Check the file is a complete model saved by PyTorch.", details=repr(exc)) from exc
    module = _strip_softmax(module)
    module.eval()
    input_shape = meta.get("input_shape") or (arch_obj.input_shape if arch_obj else None)
    info = ModelInfo(name=meta.get("name") or path.stem, source=str(path), format=fmt, arch=arch,
                     input_shape=tuple(input_shape) if input_shape else None,
                     class_names=meta.get("class_names"), card=meta)
    return LoadedModel(module, info)


def _strip_softmax(module):
    """The workbench works on logits: a trailing Softmax of a Sequential is removed."""
    from torch import nn

    if isinstance(module, nn.Sequential) and len(module) and isinstance(module[-1], (nn.Softmax, nn.LogSoftmax)):
        return module[:-1]
    return module


# --- saving ------------------------------------------------------------------------------------

def save_checkpoint(path: str | os.PathLike, module, arch: str, info: dict) -> Path:
    """Write a self-describing checkpoint (plain data + tensors, loadable with weights_only=True) with
    the SHA-256 of its weights, checked when it is loaded.

    Written under a temporary name and renamed into place, so a crash or cancel never leaves a
    half-written file where a good one was.
    """
    import torch

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    state = {k: v.detach().cpu() for k, v in module.state_dict().items()}
    payload = {"format": CHECKPOINT_FORMAT, "version": CHECKPOINT_VERSION, "arch": arch, "state_dict": state,
               "weights_sha256": weights_digest(state), "info": info}
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        torch.save(payload, tmp)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return path


# --- a loaded model with its catalogue, for views ---------------------------------------------------

@dataclass
class ModelBundle:
    """A loaded model with what the Model view shows about it."""

    spec: str
    model: LoadedModel
    catalogue: list = field(default_factory=list)  # LayerInfo per leaf layer
    catalogue_error: str = ""
    fingerprint: str = ""
    parameters: int = 0


def inspect_model(ctx, spec: str, arch: str | None = None, trust: bool = False,
               fallback_shape: tuple | None = None) -> ModelBundle:
    """A job: load a model and read off its layer catalogue and weight fingerprint (what the Model view shows)."""
    from workbench.core.models.layers import layer_catalogue

    ctx.progress(0, 3, "reading weights")
    model = load_model(spec, arch=arch, trust=trust)
    ctx.progress(1, 3, "listing layers")
    bundle = ModelBundle(spec, model, parameters=sum(p.numel() for p in model.module.parameters()))
    shape = model.info.input_shape or fallback_shape
    if shape:
        try:
            bundle.catalogue = layer_catalogue(model.module, tuple(shape))
        except WorkbenchError as exc:
            bundle.catalogue_error = exc.message
    else:
        bundle.catalogue_error = "The model does not say what input shape it takes."
    ctx.progress(2, 3, "fingerprinting weights")
    bundle.fingerprint = model.fingerprint()
    ctx.progress(3, 3, "loaded")
    return bundle

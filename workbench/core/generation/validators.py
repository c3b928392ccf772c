"""A validator set: the trained models behind the validity proxies of one dataset, with their fitted
thresholds (docs/methods/validity.md).

A validator set is a folder:

- `validators.json`: the dataset, the reference set of another domain, the thresholds and how they
  were fitted (`ValidatorCard`);
- `selforacle/`: a VAE (preset `validator`, Bernoulli decoder) whose reconstruction loss is the
  SelfOracle-style proxy;
- `daiv/`: the same VAE with a Gaussian decoder, whose reconstruction probability is the DAIV-style proxy;
- `oracle.pt` (+ its card `oracle.json`): a classifier trained apart from any model under test, whose
  label is the label-preservation proxy.

`train_validators` makes one with the project's own training (the generators' loop for the two VAEs,
the zoo's for the oracle). The test split is shuffled with the run's seed and halved: the first half
fits the thresholds, the second measures how often each proxy rejects nominal images, and the
reference domain's test split how often it rejects foreign ones. The DAIV threshold's F1 is taken
over equally many images of each domain (seeded draws from the larger), so neither outweighs the other;
the foreign rejection rates are measured on all the reference domain's test images, those draws
included, so they are not held out. Bundled sets live in
`resources/validators/<dataset>/`.
"""

from __future__ import annotations

import shutil
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from workbench.core.errors import WorkbenchError
from workbench.core.generation.validity import (MAIN_QUANTILE, ORACLE_THRESHOLD, f1_threshold,
                                                gamma_thresholds, invalid_by_loss, invalid_by_probability,
                                                oracle_verdicts, quantile_key, reconstruction_loss,
                                                reconstruction_probability)
from workbench.core.execution.jobs import JobContext
from workbench.core.resources import resources_dir

CARD = "validators.json"
FORMAT = "workbench-validators"
VERSION = 1
ORACLE_FILE = "oracle.pt"
EPOCHS, ORACLE_ARCH, ORACLE_EPOCHS = 50, "lenet4", 8
#: the reference domain each built-in dataset's DAIV threshold is fitted against
REFERENCE_DOMAIN = {"fashion-mnist": "mnist-5k", "mnist-5k": "fashion-mnist", "mnist": "fashion-mnist"}


@dataclass
class ValidatorCard:
    dataset: str
    reference: str  # the other domain the DAIV threshold separates nominal images from
    seed: int = 0
    selforacle: dict = field(default_factory=dict)  # gamma fit, thresholds, samples
    daiv: dict = field(default_factory=dict)  # F1 threshold, use_mean
    oracle: dict = field(default_factory=dict)  # name, arch, test accuracy, threshold
    checks: dict = field(default_factory=dict)  # rejection rates on held-out nominal and foreign images
    command: str = ""
    created: str = ""
    seconds: float = 0.0
    versions: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return asdict(self)

    def summary(self) -> list[tuple[str, str]]:
        """(label, text) lines for the CLI and the views."""
        so, daiv, oracle, checks = self.selforacle, self.daiv, self.oracle, self.checks
        lines = [("SelfOracle proxy (reconstruction loss)",
                  f"τ = {so['thresholds'][quantile_key(so['quantile'])]:.4g} at the gamma quantile {so['quantile']:g} "
                  f"(shape {so['shape']:.3g}, scale {so['scale']:.3g}, fitted on {so['n']} nominal images)"),
                 ("DAIV proxy (reconstruction probability)",
                  f"τ = {daiv['threshold']:.5g}, F1 {daiv['f1']:.3f} between {self.dataset} and {self.reference}"),
                 ("Oracle classifier (label preservation)",
                  f"{oracle['name']} ({oracle['arch']}, test accuracy {oracle['test_accuracy'] * 100:.1f} %), "
                  f"softmax ≥ {oracle['threshold']:g}")]
        for key, title in (("nominal", f"held-out {self.dataset} images"), ("foreign", f"{self.reference} images")):
            if key in checks:
                c = checks[key]
                lines.append((f"Rejected (proxy) of {c['n']} {title}",
                              f"SelfOracle {c['selforacle'] * 100:.1f} %, DAIV {c['daiv'] * 100:.1f} %"))
        return lines


def _check_card(data, path: Path) -> ValidatorCard:
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise WorkbenchError(f"{path} is not a workbench validator card.", "Train the validators again.")
    if not isinstance(data.get("version"), int) or not 1 <= data["version"] <= VERSION:
        raise WorkbenchError(f"{path} has validator format {data.get('version')!r}; this workbench reads 1 to "
                             f"{VERSION}.", "Update the workbench to read it.")
    card = data.get("card")
    try:
        made = ValidatorCard(**card)
        so, daiv, oracle = made.selforacle, made.daiv, made.oracle
        float(so["thresholds"][quantile_key(so["quantile"])])
        for value in [*so["thresholds"].values(), so["shape"], so["scale"], so["n"], daiv["threshold"], daiv["f1"],
                      oracle["test_accuracy"], oracle["threshold"]]:
            float(value)
        str(oracle["name"]), str(oracle["arch"])
        for check in made.checks.values():
            int(check["n"]), float(check["selforacle"]), float(check["daiv"])
    except (TypeError, KeyError, ValueError, AttributeError) as exc:
        raise WorkbenchError(f"{path} is damaged: its thresholds or oracle are missing.",
                             "Train the validators again.", details=repr(exc)) from exc
    return made


class Validators:
    """A loaded validator set: judges images with every proxy."""

    def __init__(self, folder: Path, card: ValidatorCard, selforacle, daiv, oracle):
        self.folder, self.card = folder, card
        self.selforacle, self.daiv, self.oracle = selforacle, daiv, oracle

    @property
    def dataset(self) -> str:
        return self.card.dataset

    def loss_threshold(self, quantile: float = MAIN_QUANTILE) -> float:
        thresholds = self.card.selforacle["thresholds"]
        key = quantile_key(quantile)
        if key not in thresholds:
            raise WorkbenchError(f"The validators have no SelfOracle threshold at the quantile {key}.",
                                 f"Fitted quantiles: {', '.join(thresholds)}.")
        return float(thresholds[key])

    def to(self, device) -> "Validators":
        self.selforacle.to(device)
        self.daiv.to(device)
        self.oracle.module.to(device)
        return self

    def judge(self, ctx: JobContext, images, expected, quantile: float = MAIN_QUANTILE) -> dict[str, np.ndarray]:
        """Every proxy's score and verdict per image, as test-set columns (all named `proxy_…`)."""
        import torch

        images = np.asarray(images, dtype=np.float32)
        expected = np.asarray(expected, dtype=np.int64)
        if images.ndim != 4 or tuple(images.shape[1:]) != tuple(self.selforacle.image_shape):
            raise WorkbenchError(f"The validators of {self.dataset} judge images of shape "
                                 f"{tuple(self.selforacle.image_shape)}, not {tuple(images.shape[1:])}.",
                                 "Use the validators of the images' dataset.")
        if len(expected) != len(images):
            raise WorkbenchError(f"{len(images)} images were given with {len(expected)} intended labels.",
                                 "Give one intended label per image.")
        seed = self.card.seed
        so = self.card.selforacle
        loss = reconstruction_loss(ctx.stage(0, 3, "SelfOracle"), self.selforacle, images, so.get("samples", 0), seed)
        probability = reconstruction_probability(ctx.stage(1, 3, "DAIV"), self.daiv, images,
                                                 bool(self.card.daiv.get("use_mean", False)), seed)
        probabilities = []
        module = self.oracle.module.eval()
        device = next(module.parameters()).device if any(True for _ in module.parameters()) else "cpu"
        stage = ctx.stage(2, 3, "oracle")
        with torch.inference_mode():
            for start in range(0, len(images), 1000):
                stage.check()
                x = torch.nan_to_num(torch.from_numpy(images[start:start + 1000])).to(device)
                probabilities.append(torch.softmax(module(x).float(), dim=1).cpu().numpy())
        p = np.concatenate(probabilities) if probabilities else np.zeros((0, 1))
        threshold = float(self.card.oracle.get("threshold", ORACLE_THRESHOLD))
        return {"proxy_selforacle_loss": loss.astype(np.float32),
                "proxy_selforacle_invalid": invalid_by_loss(loss, self.loss_threshold(quantile)),
                "proxy_daiv_probability": probability.astype(np.float32),
                "proxy_daiv_invalid": invalid_by_probability(probability, float(self.card.daiv["threshold"])),
                "proxy_oracle_label": p.argmax(axis=1).astype(np.int64) if len(p) else np.zeros(0, np.int64),
                "proxy_oracle_confidence": p.max(axis=1).astype(np.float32) if len(p) else np.zeros(0, np.float32),
                "proxy_oracle_verdict": oracle_verdicts(p, expected, threshold) if len(p) else np.zeros(0, str)}


def sensitivity(validators: Validators, losses) -> dict[str, float]:
    """The share of images the SelfOracle proxy rejects at every fitted quantile."""
    losses = np.asarray(losses, dtype=np.float64)
    return {key: float(invalid_by_loss(losses, float(tau)).mean()) if len(losses) else 0.0
            for key, tau in validators.card.selforacle["thresholds"].items()}


def bundled_validator_folders() -> list[Path]:
    root = resources_dir() / "validators"
    return sorted(p for p in root.iterdir() if (p / CARD).is_file()) if root.is_dir() else []


def resolve_validators(spec: str | None, dataset: str) -> Path:
    """A validator folder, or the bundled set for `dataset` when `spec` is empty."""
    if spec:
        path = Path(str(spec)).expanduser()
        if (path / CARD).is_file():
            return path
        for folder in bundled_validator_folders():
            if folder.name == str(spec):
                return folder
        raise WorkbenchError(f"No validator set {spec!r}.",
                             "Give a folder made by `workbench train-validators`, or a bundled one ("
                             + (", ".join(f.name for f in bundled_validator_folders()) or "none") + ").")
    for folder in bundled_validator_folders():
        if folder.name == dataset:
            return folder
    raise WorkbenchError(f"No validators are bundled for {dataset!r}.",
                         f"Train them: workbench train-validators --data {dataset} --out DIR, then pass --validators DIR.")


def choose_validators(dataset, spec: str = "", proxies: bool = True) -> tuple["Validators | None", str]:
    """The validator set a generation judges its inputs with: the folder `spec`, else the bundled set of
    `dataset`; none when `proxies` is off or none is bundled (then with a note saying so)."""
    key = dataset.spec
    if not proxies:
        return None, ""
    if not spec and key not in {f.name for f in bundled_validator_folders()}:
        return None, (f"No validators are bundled for {key}, so the validity proxies are left out (train them with "
                      "`workbench train-validators` and pass --validators DIR).")
    validators = load_validators(spec or None, key)
    if validators.oracle.info.class_names and len(validators.oracle.info.class_names) != dataset.num_classes:
        raise WorkbenchError(f"The validators' oracle classifier has {len(validators.oracle.info.class_names)} classes, "
                             f"but {key} has {dataset.num_classes}.", f"Use the validators of {key}.")
    return validators, ""


def load_validators(spec: str | None = None, dataset: str = "", device=None) -> Validators:
    """Read a validator set (the bundled one for `dataset` when `spec` is empty), checked whole."""
    import json

    from workbench.core.generation.storage import load_generator
    from workbench.core.models.model_io import load_model

    folder = resolve_validators(spec, dataset)
    path = folder / CARD
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise WorkbenchError(f"{path} is damaged: it is not readable JSON.", "Train the validators again.",
                             details=str(exc)) from exc
    card = _check_card(data, path)
    if dataset and card.dataset != dataset:
        raise WorkbenchError(f"The validators in {folder} judge {card.dataset} images, not {dataset}.",
                             f"Use the validators of {dataset}.")
    selforacle = load_generator(folder / "selforacle", device=device)
    daiv = load_generator(folder / "daiv", device=device)
    oracle_file = folder / ORACLE_FILE
    if not oracle_file.is_file():
        raise WorkbenchError(f"The validator set {folder} has no oracle classifier ({ORACLE_FILE}).",
                             "Copy the whole folder again, or train the validators again.")
    oracle = load_model(oracle_file)
    validators = Validators(folder, card, selforacle, daiv, oracle)
    _check_validator_kinds(validators, folder)
    if device is not None:
        validators.to(device)
    return validators


def _check_validator_kinds(validators: Validators, folder: Path) -> None:
    if validators.selforacle.kind != "vae" or validators.selforacle.gaussian:
        raise WorkbenchError(f"{folder / 'selforacle'} is not a VAE with a Bernoulli decoder.", "Train the validators again.")
    if validators.daiv.kind != "vae" or not validators.daiv.gaussian:
        raise WorkbenchError(f"{folder / 'daiv'} is not a VAE with a Gaussian decoder.", "Train the validators again.")


def oracle_architecture(image_shape) -> str:
    """The oracle's architecture for images of `image_shape`: LeNet-4 for 28×28 grey images (the validity
    proxies' own choice), otherwise the first of the zoo's architectures made for that size (ResNet-20 for
    3×32×32), and torchvision's ResNet-18, which takes any colour size, where the zoo has none."""
    from workbench.core.models.architectures import architectures

    shape = tuple(int(s) for s in image_shape)
    if shape == (1, 28, 28):
        return ORACLE_ARCH
    made_for = [a.name for a in architectures() if a.input_shape is not None and tuple(a.input_shape) == shape]
    return made_for[0] if made_for else "torchvision:resnet18"


def train_validators(ctx: JobContext, dataset, reference, out, *, epochs: int = EPOCHS, oracle_arch: str | None = None,
                     oracle_epochs: int = ORACLE_EPOCHS, seed: int = 0, half: bool = True, samples: int = 0,
                     use_mean: bool = False, command: str = "") -> ValidatorCard:
    """Train the validator set of `dataset` into the new folder `out` (the module docstring): both VAEs
    for `epochs`, the oracle (`oracle_arch`, seeded `seed + 1`, so it is another training run than a
    model trained with the default seed; by default `oracle_architecture` of the images), then the thresholds;
    `reference` is the other domain's
    dataset. With `half` the VAEs are stored at float16, rounded before the thresholds are fitted."""
    from workbench.core.generation.storage import load_generator, save_generator
    from workbench.core.generation.training import train_generator
    from workbench.core.models.training import train_and_save
    from workbench.core.project.store import atomic_folder, library_versions, write_json

    from workbench.core.files import check_new_folder

    out = check_new_folder(out, "the validators (--out DIR)")
    _check_domains(dataset, reference)
    oracle_arch = oracle_arch or oracle_architecture(dataset.image_shape)
    key, ref_key = dataset.spec, reference.spec
    started = time.perf_counter()
    with atomic_folder(out) as tmp:
        work = tmp / "training"
        vaes = {}
        for i, (name, config) in enumerate((("selforacle", {}), ("daiv", {"decoder": "gaussian"}))):
            trained = train_generator(ctx.stage(i, 4, f"{name} VAE"), "vae", dataset, work / name, epochs=epochs,
                                      preset="validator", config=config, seed=seed, command=command)
            vae = load_generator(trained.folder)
            if half:
                vae.round_to_half()
            save_generator(vae, tmp / name, trained.card, grid=None, half=half)
            vaes[name] = load_generator(tmp / name, device=ctx.device)
        oracle, oracle_card = train_and_save(ctx.stage(2, 4, "oracle classifier"), oracle_arch, dataset,
                                             tmp / ORACLE_FILE, name=f"oracle-{oracle_arch}-{key}",
                                             epochs=oracle_epochs, seed=seed + 1, command=command)
        shutil.rmtree(work)
        selforacle, daiv, checks = fit_thresholds(ctx.stage(3, 4, "thresholds"), vaes["selforacle"], vaes["daiv"],
                                                  dataset, reference, seed, samples, use_mean)
        card = ValidatorCard(
            dataset=key, reference=ref_key, seed=int(seed),
            selforacle=selforacle, daiv=daiv,
            oracle={"name": oracle_card["name"], "arch": oracle_arch, "test_accuracy": float(oracle_card["test_accuracy"]),
                    "epochs": int(oracle_epochs), "seed": int(seed + 1), "threshold": ORACLE_THRESHOLD},
            checks=checks, command=command, created=time.strftime("%Y-%m-%dT%H:%M:%S"),
            seconds=round(time.perf_counter() - started, 1), versions=library_versions())
        write_json(tmp / CARD, {"format": FORMAT, "version": VERSION, "card": card.to_dict()}, backup=False)
        del oracle
    return card


def _check_domains(dataset, reference) -> None:
    if tuple(reference.image_shape) != tuple(dataset.image_shape):
        raise WorkbenchError(f"The reference domain {reference.name} has images of another shape than {dataset.name}.",
                             "Choose a reference dataset of the same image size.")
    if dataset.splits.get("test") is None or len(dataset.splits["test"]) < 20:
        raise WorkbenchError(f"{dataset.name} needs a test split of at least 20 images for the thresholds.",
                             "Choose a dataset with a test split.")


def fit_thresholds(ctx: JobContext, selforacle, daiv, dataset, reference, seed: int = 0, samples: int = 0,
                   use_mean: bool = False) -> tuple[dict, dict, dict]:
    """The thresholds of the module docstring and their checks: (SelfOracle's gamma fit, DAIV's F1
    threshold, the rejection rates on held-out nominal and on foreign images)."""
    key, ref_key = dataset.spec, reference.spec
    test = dataset.splits.get("test")
    order = np.random.default_rng(seed).permutation(len(test))
    fit_part, check_part = np.sort(order[:len(order) // 2]), np.sort(order[len(order) // 2:])
    fit_images, check_images = test.numpy(fit_part), test.numpy(check_part)
    foreign_split = reference.splits.get("test")
    foreign = (foreign_split if foreign_split is not None and len(foreign_split) else reference.split("train")).numpy()
    gamma = gamma_thresholds(reconstruction_loss(ctx, selforacle, fit_images, samples, seed))
    daiv_fit = reconstruction_probability(ctx, daiv, fit_images, use_mean, seed)
    daiv_foreign = reconstruction_probability(ctx, daiv, foreign, use_mean, seed)
    # as many images of each domain (seeded draws from the larger), so the F1 weighs the two alike
    n = min(len(daiv_fit), len(daiv_foreign))
    nominal_pick = np.random.default_rng(seed + 2).permutation(len(daiv_fit))[:n] if n < len(daiv_fit) else \
        np.arange(n)
    foreign_pick = np.random.default_rng(seed + 1).permutation(len(daiv_foreign))[:n]
    f1 = f1_threshold(daiv_fit[nominal_pick], daiv_foreign[foreign_pick])
    main = gamma["thresholds"][quantile_key(MAIN_QUANTILE)]
    checks = {}
    for label, images in (("nominal", check_images), ("foreign", foreign)):
        loss = reconstruction_loss(ctx, selforacle, images, samples, seed)
        prob = daiv_foreign if label == "foreign" else reconstruction_probability(ctx, daiv, images, use_mean, seed)
        checks[label] = {"n": int(len(images)), "selforacle": float(invalid_by_loss(loss, main).mean()),
                         "daiv": float(invalid_by_probability(prob, f1["threshold"]).mean()),
                         "selforacle_by_quantile": {k: float(invalid_by_loss(loss, t).mean())
                                                    for k, t in gamma["thresholds"].items()}}
    selforacle_fit = {**gamma, "quantile": MAIN_QUANTILE, "samples": int(samples),
                      "fitted_on": f"{len(fit_part)} of the {key} test images (shuffled with seed {seed}, first half)"}
    daiv_fitted = {**f1, "use_mean": bool(use_mean),
                   "fitted_on": f"{n} of those {key} test images against {n} {ref_key} images"}
    return selforacle_fit, daiv_fitted, checks


def refit_validators(ctx: JobContext, folder, dataset, reference, command: str = "") -> ValidatorCard:
    """Fit the thresholds of the validator set in `folder` again (against `reference`), keeping its models;
    the card is replaced atomically."""
    from workbench.core.project.store import write_json

    _check_domains(dataset, reference)
    validators = load_validators(folder, dataset.spec, device=ctx.device)
    if validators.folder.resolve().parent == (resources_dir() / "validators").resolve():
        raise WorkbenchError(f"{validators.folder} is a bundled validator set; it is left as it is.",
                             "Copy it to a folder of your own and fit that one again.")
    card = validators.card
    card.selforacle, card.daiv, card.checks = fit_thresholds(
        ctx, validators.selforacle, validators.daiv, dataset, reference, card.seed,
        int(card.selforacle.get("samples", 0)), bool(card.daiv.get("use_mean", False)))
    card.reference = reference.spec
    card.command = (card.command + "; " if card.command else "") + f"thresholds fitted again: {command}"
    write_json(validators.folder / CARD, {"format": FORMAT, "version": VERSION, "card": card.to_dict()}, backup=False)
    return card

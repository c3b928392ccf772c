"""The coverage job: fit criteria on training activations, then measure a test set, batch by batch.

`measure_coverage` streams the model's activations, never holding a whole split: one pass over the
training split feeds every criterion that needs fitting (`partial_fit`), then `finish_fit` (IDC
clusters here); one pass over the test set updates every criterion in chunks of `curve_every` inputs and
records how coverage grows with the number of inputs. Progress is reported per batch and the
running values are handed out as `CoverageProgress`; cancelling stops within a batch and stores
nothing. With a project, a fitted criterion and a result are stored as artifacts keyed by
everything that determines them, and an identical request reads them back.

Layers (docs/methods/classic-criteria.md#neurons-layers-and-presets and
docs/methods/idc.md#subject-layer): IDC and surprise adequacy use `layer` (default: the last
Conv/Linear before the output layer); the classic criteria use the preset's layers — `deepimportance` (every
conv, pooling and dense output incl. the logits, post-activation, channel means), `nlc` (every
Conv/Linear, pre-activation) or `dnn-tip` (the `layers` given, conv tensors flattened, dnn-tip's
semantics).
"""

from __future__ import annotations

import copy
import hashlib
import inspect
import json
from dataclasses import dataclass, field

import numpy as np

from workbench.core.coverage import artifacts
from workbench.core.coverage.idc import IDC
from workbench.core.coverage.passes import feed_batches, fit_pass, measure_pass, split_by_merging
from workbench.core.coverage.per_class import PerClass
from workbench.core.coverage.protocol import CoverageValue, Criterion
from workbench.core.coverage.registry import create_criterion, criterion_factories
from workbench.core.coverage.surprise import SurpriseCriterion
from workbench.core.data.dataset import Split
from workbench.core.errors import WorkbenchError
from workbench.core.execution.jobs import JobContext
from workbench.core.models.activations import NeuronDefinition
from workbench.core.models.layers import (
    WEIGHTED_TYPES,
    LayerInfo,
    default_layer,
    layer_catalogue,
)

PRESETS = ("deepimportance", "nlc", "dnn-tip")
#: The activation point each preset reads its layers at unless another is asked for.
PRESET_POINTS = {"deepimportance": "post", "nlc": "pre", "dnn-tip": "post"}
CONV_OR_DENSE = WEIGHTED_TYPES
BATCH_SIZE = 500  # inputs per batch of a coverage pass
POOLING = ("MaxPool1d", "MaxPool2d", "AvgPool1d", "AvgPool2d", "AdaptiveAvgPool2d", "AdaptiveMaxPool2d")


@dataclass
class CoverageResult:
    """One criterion's coverage of the test set, with the fitted criterion behind it.

    `curve` is (points, 3): inputs measured, covered items, fraction (NaN without a denominator).
    `criterion` answers the detailed questions (IDC: `layout()`, `covered()`, `inputs_in()`; per
    class: `model(c)`); input indices count the measured test inputs in order (`test_indices`
    maps them back to the split).
    """

    name: str
    criterion: Criterion
    value: CoverageValue
    curve: np.ndarray
    per_class: dict[int, CoverageValue] | None = None
    warnings: list[str] = field(default_factory=list)
    provenance: dict = field(default_factory=dict)
    test_indices: np.ndarray | None = None
    artifact: str | None = None
    fit_artifact: str | None = None
    reused: bool = False


# --- layers ----------------------------------------------------------------------------------------

def preset_layers(catalogue: list[LayerInfo], preset: str, layers=None,
                  point: str | None = None) -> tuple[list[str], str, str]:
    """(layer names, activation point, conv neuron definition) of a classic-criteria preset
    (docs/methods/classic-criteria.md#neurons-layers-and-presets); `point` ("pre" or "post" the
    activation) replaces the preset's own."""
    if preset not in PRESETS:
        raise WorkbenchError(f"Unknown preset {preset!r}.", f"Use one of {', '.join(PRESETS)}.")
    if point is not None and point not in ("pre", "post"):
        raise WorkbenchError(f"Activation point {point!r} is unknown.", "Use 'pre' or 'post'.")
    if layers:
        names = [layers] if isinstance(layers, str) else list(layers)
        known = [layer.name for layer in catalogue]  # a list: the valid layers are named in model order
        missing = [n for n in names if n not in known]
        if missing:
            raise WorkbenchError(f"The model has no layer {missing[0]!r}.", f"Valid layers: {', '.join(known)}.")
    elif preset == "deepimportance":
        names = [layer.name for layer in catalogue if layer.type in CONV_OR_DENSE + POOLING]
    elif preset == "nlc":
        names = [layer.name for layer in catalogue if layer.type in CONV_OR_DENSE]
    else:
        raise WorkbenchError("The dnn-tip preset measures the layers you name.", "Pass layers=[...].")
    point = point or PRESET_POINTS[preset]
    conv_neuron = "element" if preset == "dnn-tip" else "channel-mean"
    return names, point, conv_neuron


# --- identity of data --------------------------------------------------------------------------------

def _digest(*parts) -> str:
    h = hashlib.sha256()
    for p in parts:
        h.update(np.ascontiguousarray(p).tobytes() if isinstance(p, np.ndarray)
                 else json.dumps(p, default=str).encode())
    return h.hexdigest()[:16]


def _split_name(dataset, given: Split) -> str | None:
    """The split name of `dataset` a given test set is (a `TestSet` of one of its splits, whole), so it
    is identified, and its stored results found, as that split is; None for any other set."""
    source = getattr(given, "source", None)
    if source is not None and source.kind == "split" and source.split in dataset.splits \
            and given.images is dataset.split(source.split).images:
        return source.split
    return None


def split_identity(dataset, name: str | None, split: Split, indices=None) -> dict:
    """What identifies the inputs measured: a named split by its labels, a given split by its images too."""
    ident = {"dataset": dataset.name, "split": name or "(given)", "images": len(split),
             "labels_sha256": _digest(np.asarray(split.labels))}
    if name is None:
        ident["images_sha256"] = _digest(np.asarray(split.images))
    if indices is not None:
        ident["indices_sha256"] = _digest(np.asarray(indices, dtype=np.int64))
        ident["measured"] = int(len(indices))
    return ident


# --- checks ----------------------------------------------------------------------------------------

def _check_fit(model, dataset, test: Split, catalogue: list[LayerInfo]) -> None:
    expected = model.info.input_shape
    if expected and tuple(expected) != tuple(dataset.image_shape):
        raise WorkbenchError(f"Model {model.name!r} expects images of shape {tuple(expected)}, but dataset "
                             f"{dataset.name!r} has {tuple(dataset.image_shape)}.",
                             "Choose a model and a dataset that match.")
    if len(test) and tuple(test.image_shape) != tuple(dataset.image_shape):
        raise WorkbenchError(f"The test set's images have shape {tuple(test.image_shape)}, the model's training "
                             f"images {tuple(dataset.image_shape)}.", "Choose a test set of the same kind of images.")
    outputs = catalogue[-1].output_shape if catalogue else ()
    if len(outputs) == 1 and outputs[0] != dataset.num_classes:
        raise WorkbenchError(f"The model has {outputs[0]} outputs but dataset {dataset.name!r} has "
                             f"{dataset.num_classes} classes.", "Choose a model trained on this dataset.")
    labels = np.asarray(test.labels)
    if len(labels) and (labels.min() < 0 or labels.max() >= dataset.num_classes):
        bad = int(labels.max()) if labels.max() >= dataset.num_classes else int(labels.min())
        raise WorkbenchError(f"The test set has class {bad}, but the model knows classes 0–{dataset.num_classes - 1}.",
                             "Use a test set labelled with the model's classes.")


# --- building the criteria ----------------------------------------------------------------------------

def _accepts(factory) -> set[str]:
    try:
        return set(inspect.signature(factory).parameters)
    except (TypeError, ValueError):
        return set()


def _defaults(factory, *, layer, layers, point, conv_neuron, semantics, m, seed, per_class) -> dict:
    """The job-level settings a factory takes, for the options it accepts."""
    offered = {"layer": layer, "layers": layers, "point": point, "m": m, "seed": seed,
               "conv_neuron": conv_neuron, "semantics": semantics}
    if isinstance(factory, type) and issubclass(factory, SurpriseCriterion):
        offered["per_class"] = per_class
    accepted = _accepts(factory)
    return {k: v for k, v in offered.items() if k in accepted}


# --- the job -----------------------------------------------------------------------------------------

def measure_coverage(ctx: JobContext, model, dataset, layer: str | NeuronDefinition | None = None,
                     criteria=("idc",), *, train_split: str = "train", test_split: str | Split = "test",
                     m: int = 6, seed: int = 0, project=None, per_class: bool = False, route: str = "label",
                     preset: str = "deepimportance", layers=None, options: dict | None = None,
                     rule="lrp-0", importance=None, batch_size: int = BATCH_SIZE, curve_every: int = 100,
                     test_indices=None, states: dict | None = None,
                     preset_point: str | None = None, stored_only: bool = False) -> dict[str, CoverageResult]:
    """Measure `criteria` (names, `Criterion` objects, or (key, criterion) pairs) on a test set.

    `model` is a `LoadedModel`, `dataset` a `Dataset`; `test_split` a split name of it or a `Split`
    (e.g. generated inputs), `test_indices` a subset of it. `options` maps a criterion name to its
    options (e.g. {"kmnc": {"k": 100}}). `importance` may pass an `ImportanceResult` for IDC;
    otherwise it is computed with `rule` (and reused from the project). `states` maps a criterion key
    to a saved criterion state (`Criterion.state_dict()`, e.g. from `artifacts.load_state_file`) whose
    fit is used instead of fitting; a state made for another model, layer, data or options is refused
    by its recorded identity hash before any test input is measured. `preset_point` ("pre" or "post")
    reads the preset's layers at that activation point instead of the preset's own (`PRESET_POINTS`);
    the point of `layer` is its `NeuronDefinition`'s. `stored_only` reads what the project stored and
    measures nothing: a criterion without a stored result (IDC without a stored importance, too) is left
    out. Returns {key: CoverageResult}.
    """
    options = options or {}
    states = states or {}
    module = model.module
    catalogue = layer_catalogue(module, dataset.image_shape)  # refuses an image shape the model cannot take
    if isinstance(test_split, Split):
        test, test_name = test_split, _split_name(dataset, test_split)
    else:
        test, test_name = dataset.split(test_split), test_split
    _check_fit(model, dataset, test, catalogue)
    train = dataset.split(train_split)
    if test_indices is not None:
        test_indices = np.asarray(test_indices, dtype=np.int64)
        if len(test_indices) and (test_indices.min() < 0 or test_indices.max() >= len(test)):
            raise WorkbenchError(f"Test indices must lie in 0–{len(test) - 1}.", "Choose inputs of the test set.")

    if layer is None:
        layer = default_layer(catalogue)
        if layer is None:
            raise WorkbenchError("The model has no Conv/Linear layer before its output layer.",
                                 "Name the layer to measure coverage on.")
    definition = layer if isinstance(layer, NeuronDefinition) else NeuronDefinition(str(layer))
    if definition.layer not in {info.name for info in catalogue}:
        raise WorkbenchError(f"The model has no layer {definition.layer!r}.",
                             f"Valid layers: {', '.join(info.name for info in catalogue)}.")
    entries = _build(criteria, options, dataset.num_classes, definition,
                     lambda: preset_layers(catalogue, preset, layers, preset_point),
                     "dnn-tip" if preset == "dnn-tip" else "spec", m, seed, per_class, route)
    unknown = sorted(set(states) - {key for key, _, _ in entries})
    if unknown:
        raise WorkbenchError(f"A saved state was given for {', '.join(map(repr, unknown))}, which is not measured.",
                             f"Measured: {', '.join(key for key, _, _ in entries)}.")

    fingerprint = model.fingerprint()
    train_id = split_identity(dataset, train_split, train)
    test_id = split_identity(dataset, test_name, test, test_indices)

    if any(isinstance(_inner(c), IDC) for _, c, _ in entries):
        if importance is None:
            from workbench.core.importance.neuron_importance import compute_importance

            importance = compute_importance(ctx, model, dataset, definition, rule, per_class=per_class,
                                            project=project, split=train_split, stored_only=stored_only)
            if importance is None:  # none stored: IDC has no stored result either
                entries = [entry for entry in entries if not isinstance(_inner(entry[1]), IDC)]
        elif importance.layer != definition.layer:
            raise WorkbenchError(f"The importance given is for layer {importance.layer!r}, not {definition.layer!r}.",
                                 "Compute importance for the layer IDC is measured on.")
        if per_class and importance.per_class is None:
            raise WorkbenchError("Per-class IDC needs per-class importance.", "Compute importance in per-class mode.")
    for _, criterion, point in entries:
        if isinstance(criterion, SurpriseCriterion):
            criterion.to(ctx.device)
        _use_importance(criterion, importance)
        imp = importance.provenance.get("cache_key") if importance is not None and isinstance(
            _inner(criterion), IDC) else None
        criterion.bind(model=fingerprint, train=train_id, activation_point=point, preset=preset,
                       **({"importance": imp, "rule": importance.rule} if imp else {}))

    results: dict[str, CoverageResult] = {}
    how_common = {"model": model.name, "model_fingerprint": fingerprint, "dataset": dataset.name,
                  "train": train_id, "test": test_id, "per_class": bool(per_class), "route": route,
                  "preset": preset, "seed": int(seed), "curve_every": int(curve_every),
                  "versions": _versions()}
    todo_fit, todo_test, given_fits, fit_names = [], [], [], {}
    for key, criterion, point in entries:
        if key in states:  # refused unless its recorded identity hash is this criterion's
            criterion.load_state_dict(states[key])
            if criterion.needs_fit and not criterion.fitted:
                raise WorkbenchError(f"The saved {criterion.name} state holds no fitted criterion.",
                                     "Save the state of a criterion after measuring with it.")
        fit_key = criterion.identity_hash
        inner = _inner(criterion)
        kept = {k: getattr(inner, k, None) for k in inner.bookkeeping}  # what the stored result must hold
        result_key = _digest(fit_key, test_id, int(curve_every), kept)
        if project is not None:
            found = project.find_artifact(artifacts.RESULT_KIND, cache_key=result_key)
            stored = _stored_state(ctx, project, found, criterion, "measured again")
            if stored is not None:
                state, how, curve = stored
                criterion.load_state_dict(state)
                results[key] = _result(key, criterion, curve, how, test_indices,
                                       artifact=found, fit_artifact=how.get("fit_artifact"), reused=True)
                continue
        if stored_only:
            continue
        found = project.find_artifact(artifacts.FIT_KIND, cache_key=fit_key) \
            if criterion.needs_fit and project is not None else None
        stored = _stored_state(ctx, project, found, criterion, "fitted again") if key not in states else None
        if found is not None and (stored is not None or key in states):  # a given state is the same fit already
            if stored is not None:
                criterion.load_state_dict(stored[0])
            fit_names[key] = found
        elif key in states and criterion.needs_fit:
            given_fits.append((key, criterion, point))  # stored with the result, like a fit made here
        elif criterion.needs_fit:
            todo_fit.append((key, criterion, point))
        todo_test.append((key, criterion, point, fit_key, result_key))

    if todo_test and project is not None:
        project.ensure_writable()  # before any work, not after it
    if todo_fit:
        split_by_merging(ctx, todo_fit, lambda c, entries: fit_pass(c, module, train, catalogue, entries, batch_size,
                                                                     dataset.image_shape))
    if todo_test:
        curves = split_by_merging(ctx, [(k, c, p) for k, c, p, _, _ in todo_test], lambda c, entries: measure_pass(
            c, module, test, test_indices, catalogue, entries, batch_size, curve_every, dataset.image_shape))
        if project is not None:  # stored only once everything is done: a cancelled run stores nothing
            for key, criterion, point in todo_fit + given_fits:
                name = f"coverage-fit-{model.name}-{key}-{criterion.identity_hash[:8]}"
                fit_names[key] = artifacts.save_fit(project, name, criterion.state_dict(include_cover=False),
                                                    cache_key=criterion.identity_hash, criterion=criterion.name,
                                                    **how_common)
        for key, criterion, point, fit_key, result_key in todo_test:
            how = {**how_common, "identity": criterion.identity, "cache_key": result_key, "fit_key": fit_key,
                   "activation_point": point, "criterion": criterion.name}
            name = None
            if project is not None:
                name = artifacts.save_result(project, f"coverage-{model.name}-{key}-{result_key[:8]}",
                                             criterion.state_dict(), fit_names.get(key), curves[key], **how)
            results[key] = _result(key, criterion, curves[key], how, test_indices, artifact=name,
                                   fit_artifact=fit_names.get(key))
    return {key: results[key] for key, _, _ in entries if key in results}


def _inner(criterion: Criterion) -> Criterion:
    return criterion.members[0] if isinstance(criterion, PerClass) else criterion


def _use_importance(criterion: Criterion, importance) -> None:
    if isinstance(criterion, PerClass) and isinstance(criterion.members[0], IDC):
        for c, member in enumerate(criterion.members):
            if member.neurons is None:
                member.use_importance(importance, c)
    elif isinstance(criterion, IDC) and criterion.neurons is None:
        criterion.use_importance(importance)


def _build(criteria, options, classes, definition, preset, semantics, m, seed, per_class,
           route) -> list[tuple[str, Criterion, str]]:
    """(key, criterion, activation point) for each requested criterion; `preset()` gives the classic
    criteria's (layers, point, conv neuron), resolved only when one is asked for."""
    factories = criterion_factories()
    entries, keys = [], set()
    for item in criteria:
        key, given = (item if isinstance(item, tuple) else (None, item))
        if isinstance(given, Criterion):
            made, name = given, given.name
            single = isinstance(given, (IDC, SurpriseCriterion))
            if single:  # the job's layer where the criterion names none
                point = getattr(given, "point", None) or definition.point
                if isinstance(given, IDC) and given.layer is None:
                    given.layer = definition.layer
                elif isinstance(given, SurpriseCriterion) and given.layers is None:
                    given.layers = [definition.layer]
            else:
                point = getattr(given, "point", None) or preset()[1]
                if getattr(given, "layers", "") is None:
                    given.layers = preset()[0]
            make = lambda c, given=given: copy.deepcopy(given)  # noqa: E731
        else:
            name = str(given).lower()
            if name not in factories:
                raise WorkbenchError(f"Unknown coverage criterion {given!r}.",
                                     f"Known criteria: {', '.join(factories)}.")
            factory = factories[name]
            single = isinstance(factory, type) and issubclass(factory, (IDC, SurpriseCriterion))
            if single:
                layer_list, point, conv_neuron = [definition.layer], definition.point, definition.conv_neuron
            else:
                layer_list, point, conv_neuron = preset()
            opts = {**_defaults(factory, layer=definition.layer, layers=layer_list, point=point,
                                conv_neuron=conv_neuron, semantics=semantics, m=m, seed=seed, per_class=per_class),
                    **options.get(name, {})}
            made = create_criterion(name, **opts)
            make = lambda c, name=name, opts=opts: create_criterion(name, **opts)  # noqa: E731
        if per_class and not isinstance(made, SurpriseCriterion):  # surprise coverage splits by class itself
            made = PerClass(make, classes, route)
        key = key or name
        if key in keys:
            key = f"{key}-{len([k for k in keys if k.startswith(key)]) + 1}"
        keys.add(key)
        entries.append((key, made, point))
    return entries


def _stored_state(ctx: JobContext, project, found: str | None, criterion: Criterion, again: str):
    """(state, provenance, curve) of stored coverage result or fit `found`, once it is known to load into
    `criterion` (tried on a copy, so a state that does not fit leaves the criterion as it was); None
    when there is none, or it is damaged or holds what this criterion cannot load (said as a notice)."""
    if found is None:
        return None
    try:
        state, how = artifacts.read_state(project, found)
        curve = artifacts.read_curve(project, found)
        _check_round_trip(found, criterion, state, curve)
    except WorkbenchError as exc:
        ctx.notice(f"{exc.message} The {criterion.name} criterion is {again}.")
        return None
    except (KeyError, TypeError, ValueError, IndexError, AttributeError) as exc:
        ctx.notice(f"The stored coverage result {found!r} does not hold what a {criterion.name} state holds "
                   f"({str(exc)[:200] or type(exc).__name__}). The criterion is {again}.")
        return None
    return state, how, curve



def _check_round_trip(found: str, criterion: Criterion, state: dict, curve: np.ndarray) -> None:
    """A stored state fits `criterion` when a copy loads it and saves it back with the same arrays (none
    missing, the same shapes, numbers still numbers), and a result's covered count is the one its growth
    curve recorded when it was measured."""
    trial = copy.deepcopy(criterion).load_state_dict(state)
    echo = trial.state_dict()["arrays"]
    stored = state["arrays"]
    result = "cover" in state.get("meta", {})  # a result holds what was covered, a fit does not
    expected = [key for key in echo if result or key.startswith("fit.")]
    for key in expected:
        back, value = echo[key], stored.get(key)
        if value is None or np.shape(back) != np.shape(value) or \
                (np.asarray(back).dtype.kind in "biuf") != (np.asarray(value).dtype.kind in "biuf"):
            raise WorkbenchError(f"The stored coverage result {found!r} does not hold what a {criterion.name} "
                                 f"state holds: its {key!r} array does not fit.", "It is measured again.")
    if result and len(curve) and int(curve[-1, 1]) != trial.coverage().covered:
        raise WorkbenchError(f"The stored coverage result {found!r} covers {trial.coverage().covered} items, but "
                             f"recorded {int(curve[-1, 1])} when it was measured.", "It is measured again.")


def _result(key, criterion, curve, how, test_indices, **extra) -> CoverageResult:
    per_class = criterion.per_class_coverage() if hasattr(criterion, "per_class_coverage") and (
        isinstance(criterion, PerClass) or getattr(criterion, "per_class", False)) else None
    return CoverageResult(key, criterion, criterion.coverage(), np.asarray(curve), per_class, criterion.warnings,
                          how, test_indices, **extra)


def _versions() -> dict:
    from importlib.metadata import version

    import torch

    # read from the installed packages' metadata: importing scikit-learn only for its version takes 1.5 s
    return {"torch": torch.__version__, "scikit-learn": version("scikit-learn"), "scipy": version("scipy"),
            "numpy": np.__version__}


# --- groups of criteria, as a view measures them ------------------------------------------------------

@dataclass
class SetCoverage:
    """Every criterion measured on one test set: results by criterion key, and the criteria that
    could not be measured with the error that stopped them (a group of criteria shares one error)."""

    results: dict = field(default_factory=dict)  # criterion key → core CoverageResult
    errors: dict = field(default_factory=dict)  # criterion key → WorkbenchError
    test: object = None  # the stored test set measured, read by name (None for a split or a given set)


def measure_groups(ctx: JobContext, model, dataset, test_split, test_indices, layer: str,
                   groups: list[tuple[str, ...]], m: int, importance, project=None,
                   stored_only: bool = False) -> "SetCoverage":
    """Measure each group of criteria on one test set (core `measure_coverage`), a group at a time.

    Groups fail on their own: an m the layer cannot give stops IDC, a singular density stops surprise
    adequacy, and the other criteria are still measured; when every group fails, the job fails with
    what stopped each (never a finished job that measured nothing). Fits and results stored in the project
    are reused; new ones are saved to `project` (`stored_only`: only read, see `measure_coverage`).
    `test_split` is a split name of `dataset`, the name of a project test set, or a `Split` (any `TestSet`).
    """
    if isinstance(test_split, str) and test_split not in dataset.splits:  # a project test set, by name
        from workbench.core.labeling.labelled_sets import resolve

        test_split = resolve(project, test_split, dataset)
    if project is not None and project.read_only and not stored_only:
        project = None  # a read-only project is measured, not stored
    measured = SetCoverage(test=None if isinstance(test_split, str) else test_split)
    for criteria in groups:
        try:
            measured.results.update(measure_coverage(
                ctx, model, dataset, layer, criteria, train_split=dataset.fit_split, test_split=test_split,
                test_indices=test_indices, m=m,
                importance=importance if "idc" in criteria else None, project=project, stored_only=stored_only))
        except WorkbenchError as exc:
            measured.errors.update({name: exc for name in criteria})
    if measured.errors and not measured.results:  # nothing measured: the job failed, and says why
        failures = {}
        for name, exc in measured.errors.items():
            failures.setdefault(id(exc), (exc, []))[1].append(name)
        if len(failures) == 1:
            raise next(iter(failures.values()))[0]
        raise WorkbenchError("No criterion could be measured: " + "; ".join(
            f"{', '.join(names).upper()}: {exc.message}" for exc, names in failures.values()),
            next(iter(failures.values()))[0].hint)
    return measured


def input_profiles(ctx: JobContext, model, dataset, test: Split, results: dict[str, CoverageResult],
                   batch_size: int = BATCH_SIZE) -> dict[str, np.ndarray]:
    """Per criterion of `results` (fitted by `measure_coverage`), what each input of `test` covers
    (`Criterion.profile`: IDC's combination code, NC's covered neurons, KMNC's section per neuron, …),
    in one pass over the inputs with the activations captured as the coverage job captures them. The
    criteria's covered items are left as they were."""
    catalogue = layer_catalogue(model.module, dataset.image_shape)
    entries = [(key, r.criterion, r.provenance.get("activation_point", "post")) for key, r in results.items()]
    parts: dict[str, list] = {key: [] for key, _, _ in entries}
    total = len(test)
    ctx.progress(0, total, "coverage profiles")
    for start, feeds, labels, predictions in feed_batches(ctx, model.module, test, None, catalogue, entries,
                                                          batch_size, dataset.image_shape):
        for key, criterion, _ in entries:
            parts[key].append(criterion.profile(feeds[key], labels, predictions))
        ctx.progress(start + len(predictions), total, "coverage profiles")
    return {key: np.concatenate(chunks) if chunks else np.zeros((0,)) for key, chunks in parts.items()}


def kmnc_sections(ctx: JobContext, model, dataset, test_split, test_indices, kmnc,
                  point: str, batch_size: int = BATCH_SIZE) -> np.ndarray:
    """(inputs, neurons) the KMNC section each measured input covers at each neuron (−1: none), in the
    order the inputs were measured: which inputs fall in a cell of the neuron × section matrix.

    The activations are captured exactly as the coverage job captured them (whole layer tensors at the
    same activation point), so a cell's inputs are the ones its count was made of.
    """
    from workbench.core.models.activations import stream_activations

    split = dataset.split(test_split) if isinstance(test_split, str) else test_split
    shapes = {info.name: tuple(info.output_shape) for info in layer_catalogue(model.module, dataset.image_shape)}
    captures = {name: NeuronDefinition(name, point, "element") for name in kmnc.layers}
    total = len(split) if test_indices is None else len(test_indices)
    sections = np.full((total, kmnc.neurons), -1, dtype=np.int16 if kmnc.k < 32768 else np.int32)
    for start, acts, predictions in stream_activations(ctx, model.module, split, list(captures.values()),
                                                       dataset.image_shape, batch_size, test_indices):
        n = len(predictions)
        layers = {name: acts[d].reshape((n,) + shapes[name]) for name, d in captures.items()}
        sections[start:start + n] = kmnc.profile(layers)
    return sections

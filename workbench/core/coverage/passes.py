"""The coverage job's passes over the inputs: gathering training activations for the fits, and
measuring a test set, batch by batch, on this machine or as shards (`core.execution.sharding`).

A pass captures each (layer, activation point) the criteria read once per batch, as the full layer
tensor, and hands each criterion its layers (`capture_definitions`, `layer_feeds`).

**As shards.** Both passes split the inputs into contiguous ranges that start at multiples of the
batch size, so every batch holds the inputs it holds in one pass. A fit's shard gathers on a copy of
the unfitted criteria and the job merges the copies in order (`Criterion.merge_fit`); IDC's k-means
then runs one shard per important neuron (`sharded_clustering`) before each criterion finishes its
fit here; a test shard measures from empty and sends back what it covered
(`Criterion.cover_state`), which the job merges in order (`Criterion.merge_cover`), so the state is
the one a single pass leaves: the same covered items and counts, per-input records in input order.
The growth curve of a sharded pass is exact wherever it has a point: every `curve_every` inputs
within the first shard (which starts from empty, as the whole pass does), then at each later
shard's end. Where activations are computed with another number of threads (a cluster's workers
use one), the float sums inside a layer can round differently, and a value on a section boundary can
fall on the other side of it: KMNC's count can then differ by a few cells of tens of thousands.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import numpy as np

from workbench.core.coverage.clustering import NeuronClusters, cluster_neuron
from workbench.core.coverage.idc import IDC
from workbench.core.coverage.per_class import PerClass
from workbench.core.coverage.protocol import CoverageValue, Criterion
from workbench.core.data.dataset import Split
from workbench.core.errors import WorkbenchError
from workbench.core.execution.shard_plan import ShardPlan, range_inputs, range_plan
from workbench.core.execution.sharding import input_ranges, run_plan, running_here, sharding
from workbench.core.models.activations import NeuronDefinition, stream_activations


@dataclass
class CoverageProgress:
    """Handed out after each chunk of test inputs: the running coverage of every criterion."""

    done: int
    total: int
    values: dict[str, CoverageValue]


def layers_of(criterion: Criterion) -> list[str]:
    inner = criterion.members[0] if isinstance(criterion, PerClass) else criterion
    names = inner._layer_names()
    if not names:
        raise WorkbenchError(f"Criterion {inner.name!r} names no layer.", "Give it a layer or layers option.")
    return names




def capture_definitions(entries, catalogue) -> dict[tuple[str, str], NeuronDefinition]:
    """One full-tensor capture per (layer, point): each criterion reduces it as it needs."""
    defs = {}
    for _, criterion, point in entries:
        for name in layers_of(criterion):
            defs[(name, point)] = NeuronDefinition(name, point, "element")
    return defs


def layer_feeds(entries, defs, catalogue, acts) -> dict[str, dict[str, np.ndarray]]:
    shapes = {info.name: info.output_shape for info in catalogue}
    raw = {key: a.reshape((len(a),) + tuple(shapes[key[0]])) for key, a in
           ((k, acts[d]) for k, d in defs.items())}
    return {key: {name: raw[(name, point)] for name in layers_of(criterion)} for key, criterion, point in entries}


def fit_pass(ctx, module, train: Split, catalogue, entries, batch_size, input_shape) -> None:
    """Fit `entries` ((key, criterion, activation point)) on the training split: one pass that feeds every
    criterion's `partial_fit` (as shards when the job's context asks: `sharded_gather`), then `finish_fit`."""
    if sharding(ctx):
        sharded_gather(ctx, module, train, catalogue, entries, batch_size, input_shape)
        sharded_clustering(ctx, entries)
    else:
        gather(ctx, module, train, None, catalogue, entries, batch_size, input_shape)
    for i, (key, criterion, _) in enumerate(entries):
        ctx.progress(i, len(entries), f"coverage: fitting {key}")
        criterion.finish_fit(check=ctx.check)
    ctx.progress(len(entries), len(entries), "coverage: fitted")


def feed_batches(ctx, module, split: Split, indices, catalogue, entries, batch_size, input_shape):
    """Yield (start, {key: the criterion's layers}, labels, predictions) per batch of the inputs `indices` of
    `split` (all when None), stopping at a cancel."""
    defs = capture_definitions(entries, catalogue)
    for start, acts, predictions in stream_activations(ctx.quiet(), module, split, list(defs.values()),
                                                       input_shape, batch_size, indices):
        ctx.check()
        rows = np.arange(start, start + len(predictions))
        labels = np.asarray(split.labels[rows if indices is None else indices[rows]], dtype=np.int64)
        yield start, layer_feeds(entries, defs, catalogue, acts), labels, predictions


def gather(ctx, module, train: Split, indices, catalogue, entries, batch_size, input_shape) -> None:
    """`start_fit`, then `partial_fit` on the training inputs `indices` (all when None), in order."""
    for _, criterion, _ in entries:
        criterion.start_fit()
    total = len(train) if indices is None else len(indices)
    ctx.progress(0, total, "coverage: training activations")
    for start, feeds, labels, predictions in feed_batches(ctx, module, train, indices, catalogue, entries,
                                                          batch_size, input_shape):
        for key, criterion, _ in entries:
            criterion.partial_fit(feeds[key], labels, predictions)
        ctx.progress(start + len(predictions), total, "coverage: training activations")


def measure_pass(ctx, module, test: Split, indices, catalogue, entries, batch_size, curve_every,
                 input_shape) -> dict[str, np.ndarray]:
    """Measure the test inputs `indices` of `test` (all when None) with the fitted `entries`, from empty;
    returns each criterion's growth curve ((points, 3): inputs, covered, fraction), a point every
    `curve_every` inputs within each batch. As shards when the job's context asks (`sharded_measure_pass`)."""
    if sharding(ctx):
        return sharded_measure_pass(ctx, module, test, indices, catalogue, entries, batch_size, curve_every,
                                    input_shape)
    return measure_in_one_pass(ctx, module, test, indices, catalogue, entries, batch_size, curve_every, input_shape)


def measure_in_one_pass(ctx, module, test: Split, indices, catalogue, entries, batch_size, curve_every,
                        input_shape) -> dict[str, np.ndarray]:
    """`measure_pass` here, in one pass."""
    for _, criterion, _ in entries:
        criterion.reset()
    curves: dict[str, list] = {key: [] for key, _, _ in entries}
    total = len(test) if indices is None else len(indices)
    step = max(1, int(curve_every))
    done = 0
    ctx.progress(0, total, "coverage: test inputs")
    for _, feeds, labels, predictions in feed_batches(ctx, module, test, indices, catalogue, entries, batch_size,
                                                      input_shape):
        for lo in range(0, len(predictions), step):  # chunks give the growth curve its resolution
            part = slice(lo, lo + step)
            for key, criterion, _ in entries:
                criterion.update({n: a[part] for n, a in feeds[key].items()}, labels[part], predictions[part])
                value = criterion.coverage()
                curves[key].append((done + min(lo + step, len(predictions)), value.covered,
                                    np.nan if value.fraction is None else value.fraction))
        done += len(predictions)
        ctx.progress(done, total, "coverage: test inputs")
        ctx.partial(CoverageProgress(done, total, {key: c.coverage() for key, c, _ in entries}))
    return {key: np.asarray(points, dtype=np.float64).reshape(-1, 3) for key, points in curves.items()}


# --- as shards -----------------------------------------------------------------------------------------

@dataclass
class PassInputs:
    """What every shard of a pass needs, sent once: the model, the inputs, the criteria and the settings."""

    module: object
    split: Split
    indices: np.ndarray | None
    catalogue: list
    entries: list
    batch_size: int
    curve_every: int
    input_shape: tuple


@dataclass
class MeasuredShard:
    """A test shard's result: each criterion's covered state and its own growth curve."""

    states: dict[str, dict]
    curves: dict[str, np.ndarray]


def gather_shard(ctx, shared: PassInputs, piece: tuple[int, int]) -> dict[str, Criterion]:
    """One fit shard: a copy of the unfitted criteria after `partial_fit` on its training inputs."""
    entries = copy.deepcopy(shared.entries)  # shards run here share one object; each gathers on its own
    gather(ctx, shared.module, shared.split, range_inputs(shared.indices, piece), shared.catalogue, entries,
           shared.batch_size, shared.input_shape)
    return {key: criterion for key, criterion, _ in entries}


def measure_shard(ctx, shared: PassInputs, piece: tuple[int, int]) -> MeasuredShard:
    """One test shard: what each fitted criterion covers of its inputs, from empty, and its curve."""
    entries = copy.deepcopy(shared.entries)
    curves = measure_in_one_pass(ctx, shared.module, shared.split, range_inputs(shared.indices, piece), shared.catalogue,
                                 entries, shared.batch_size, shared.curve_every, shared.input_shape)
    return MeasuredShard({key: criterion.cover_state() for key, criterion, _ in entries}, curves)


def sharded_gather(ctx, module, train: Split, catalogue, entries, batch_size, input_shape) -> None:
    """`gather` over every training input as shards, merged into `entries` in order."""
    ranges = input_ranges(ctx, len(train), batch_size)
    shared = PassInputs(module, train, None, catalogue, list(entries), batch_size, 1, input_shape)
    parts = run_plan(ctx, range_plan("coverage: training activations", shared, ranges, gather_shard, list))
    for key, criterion, _ in entries:
        criterion.start_fit()
        for part in parts:
            criterion.merge_fit(part[key])


def _idcs(entries) -> list[IDC]:
    """The IDC criteria among `entries`, a per-class IDC's classes included."""
    found = []
    for _, criterion, _ in entries:
        members = criterion.members if isinstance(criterion, PerClass) else [criterion]
        found += [member for member in members if isinstance(member, IDC)]
    return found


def cluster_shard(ctx, shared: list[tuple], piece: tuple[int, int]) -> NeuronClusters:
    """One neuron of one IDC clustered (`clustering.cluster_neuron`, seeded, one thread: the same anywhere)."""
    criterion, j = piece
    values, options, neurons = shared[criterion]
    return cluster_neuron(values[:, j], int(neurons[j]), check=ctx.check, **options)


def sharded_clustering(ctx, entries) -> None:
    """IDC's k-means after a sharded gather, one shard per important neuron (and class), so the fit's
    longest step is not left to the driver; each IDC then finishes its fit with the clusters given."""
    idcs = _idcs(entries)
    pieces = [(i, j) for i, idc in enumerate(idcs) for j in range(len(idc.neurons))]
    if not pieces:
        return
    shared = [(*idc.clustering_inputs(), np.asarray(idc.neurons)) for idc in idcs]
    clusters = run_plan(ctx, ShardPlan("coverage: IDC clusters", shared, pieces, cluster_shard, list,
                                       [1] * len(pieces), units="neurons",
                                       describe=lambda piece: f"neuron {int(shared[piece[0]][2][piece[1]])}"))
    for i, idc in enumerate(idcs):
        idc.use_clusters([c for (owner, _), c in zip(pieces, clusters) if owner == i])


def sharded_measure_pass(ctx, module, test: Split, indices, catalogue, entries, batch_size, curve_every,
                         input_shape) -> dict[str, np.ndarray]:
    """`measure_pass` as shards (the module docstring): the criteria in `entries` end holding the merged state."""
    total = len(test) if indices is None else len(indices)
    ranges = input_ranges(ctx, total, batch_size)
    for _, criterion, _ in entries:
        criterion.reset()
    shared = PassInputs(module, test, None if indices is None else np.asarray(indices, np.int64), catalogue,
                        list(entries), batch_size, int(curve_every), input_shape)
    running = copy.deepcopy(entries)  # merged as shards finish, in any order: the values views show meanwhile
    merged_already: set[int] = set()

    def partial(parts: dict[int, MeasuredShard]) -> list[CoverageProgress]:
        for index in sorted(set(parts) - merged_already):
            for key, criterion, _ in running:
                criterion.merge_cover(parts[index].states[key])
            merged_already.add(index)
        done = sum(ranges[i][1] - ranges[i][0] for i in merged_already)
        return [CoverageProgress(done, total, {key: c.coverage() for key, c, _ in running})]

    parts = run_plan(ctx, range_plan("coverage: test inputs", shared, ranges, measure_shard, list, partial=partial))
    curves: dict[str, list] = {key: [] for key, _, _ in entries}
    for (start, stop), part in zip(ranges, parts):
        for key, criterion, _ in entries:
            criterion.merge_cover(part.states[key])
            if start == 0:  # the first shard started from empty, as the whole pass does: its curve holds
                curves[key].extend(map(tuple, part.curves[key]))
            else:
                value = criterion.coverage()
                curves[key].append((stop, value.covered, np.nan if value.fraction is None else value.fraction))
    return {key: np.asarray(points, dtype=np.float64).reshape(-1, 3) for key, points in curves.items()}


def split_by_merging(ctx, entries, run):
    """`run(ctx, entries)`, except that when the job runs as shards the criteria whose shards cannot merge
    (a plugin's) are run on this machine, with a notice; the results of both are combined."""
    if not sharding(ctx):
        return run(ctx, entries)
    local = [entry for entry in entries if not entry[1].mergeable]
    out = {}
    if len(local) < len(entries):
        out.update(run(ctx, [entry for entry in entries if entry[1].mergeable]) or {})
    if local:
        ctx.notice(f"{', '.join(key for key, _, _ in local)} cannot merge what shards of a set cover, so "
                   "it is measured on this machine.")
        out.update(run(running_here(ctx), local) or {})
    return out

"""What a latent search minimises, and when a seed has succeeded (docs/methods/generation.md#objectives).

An objective scores a batch of decoded individuals in one pass of the classifier and returns, per
individual, its **fitness** (minimised), whether it **succeeds** (the seed's search stops at the
first generation with a success), the classifier's predicted label and logit margin, and its IDC
combination where the objective reads one.

- `Misbehaviour` — the benchmark's objective: fitness is the logit margin
  m = ℓ_y − max_{c≠y} ℓ_c, success is m < 0 (the classifier predicts another class). With it the
  search is the benchmark's loop exactly.
- `NewCombination` — importance-driven: a success is an input whose IDC combination (of the chosen
  layer's m most relevant neurons, fitted on the training set) the reference test set leaves
  uncovered, classified as intended or not; the fitness is the Euclidean distance from the input's
  important-neuron values to the nearest uncovered combination's centroid vector. With
  `misbehave=True` ("both") a success must also be a misbehaviour, and the fitness adds max(m, 0).

The target cells are fixed for the whole run (those the reference set leaves uncovered), so every
seed searches alike alone or beside others and a run can be split into shards of seeds.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from workbench.core.errors import WorkbenchError
from workbench.core.execution.jobs import JobContext
from workbench.core.generation.assessment import classifier_logits

OBJECTIVES = ("misbehaviour", "idc", "both")
MAX_TARGETS = 2 ** 20  # combinations an IDC objective may enumerate (m = 10 neurons of 4 clusters)


@dataclass
class Scores:
    """An objective's verdict on a batch of individuals (CPU tensors, one value per individual)."""

    fitness: "object"
    success: "object"
    predicted: "object"
    margin: "object"
    code: "object | None" = None  # the IDC combination of each individual, for objectives that read one


def margins(logits, labels):
    """ℓ_y − max_{c≠y} ℓ_c per row, vectorised (negative: the classifier predicts another class)."""
    own = logits.gather(1, labels[:, None]).squeeze(1)
    others = logits.clone()
    others.scatter_(1, labels[:, None], float("-inf"))
    return own - others.max(dim=1).values


def predicted_labels(logits, labels, m):
    """The classifier's labels: the intended one where the margin is not negative (a tie is not a
    misbehaviour, whichever class argmax would pick), else the top class."""
    import torch

    return torch.where(m >= 0, labels.to(logits.device), logits.argmax(1)).cpu()


class Misbehaviour:
    """The benchmark's objective: minimise the logit margin; a success is a misclassification."""

    name = "misbehaviour"

    def describe(self) -> dict:
        return {"objective": self.name}

    def evaluate(self, ctx: JobContext, classifier, images, labels) -> Scores:
        logits = classifier_logits(ctx, classifier, images)
        m = margins(logits, labels.to(logits.device))
        return Scores(m.cpu(), (m < 0).cpu(), predicted_labels(logits, labels, m), m.cpu())


@dataclass
class NewCombination:
    """Reach an IDC combination the reference test set leaves uncovered (and, with `misbehave`, be
    misclassified too). `idc` is a fitted, measured `IDC` of the classifier's layer `definition`."""

    idc: object
    definition: object  # the NeuronDefinition IDC reads
    catalogue: list
    misbehave: bool = False
    reference: str = ""
    _targets: object = field(default=None, repr=False)
    _uncovered: np.ndarray | None = field(default=None, repr=False)

    def __post_init__(self):
        import torch

        idc = self.idc
        if idc.empty:
            raise WorkbenchError("The IDC model has no important neurons, so no combination can be targeted.",
                                 "Choose another layer for the IDC objective.")
        if idc.incc_size > MAX_TARGETS:
            raise WorkbenchError(f"IDC with m = {len(idc.neurons)} has {idc.incc_size:,} combinations, too many to "
                                 f"target one by one (at most {MAX_TARGETS:,}).", "Use a smaller m (6 to 10).")
        covered = np.zeros(idc.incc_size, dtype=bool)
        covered[idc.covered()[0]] = True
        self._uncovered = np.flatnonzero(~covered)
        if not len(self._uncovered):
            raise WorkbenchError(f"The reference set {self.reference or ''} covers every IDC combination already, so "
                                 "there is no new one to reach.", "Use the misbehaviour objective, or a larger m.")
        self._targets = torch.from_numpy(idc.centroid_values(self._uncovered).astype(np.float32))

    @property
    def name(self) -> str:
        return "both" if self.misbehave else "idc"

    @property
    def uncovered(self) -> np.ndarray:
        """The codes of the combinations the reference set leaves uncovered (the targets)."""
        return self._uncovered

    def describe(self) -> dict:
        idc = self.idc
        return {"objective": self.name, "layer": self.definition.layer, "point": self.definition.point,
                "m": int(len(idc.neurons)), "neurons": [int(n) for n in idc.neurons], "incc": int(idc.incc_size),
                "reference": self.reference, "reference_covered": int(idc.incc_size - len(self._uncovered))}

    def evaluate(self, ctx: JobContext, classifier, images, labels) -> Scores:
        import torch

        from workbench.core.models.activations import hook_point, neuron_values
        from workbench.core.models.hooks import hook_layer

        pieces = []
        captured = {}
        handle = hook_layer(classifier.module, hook_point(self.catalogue, self.definition), lambda mod, inp, out:
                            captured.__setitem__("values", neuron_values(out.detach(), self.definition.conv_neuron)))
        try:
            logits = classifier_logits(ctx, classifier, images, on_batch=lambda: pieces.append(
                captured["values"].float().cpu()))
        finally:
            handle.remove()
        values = torch.cat(pieces)
        codes = self.idc.profile({self.definition.layer: values.numpy()})
        important = values[:, torch.from_numpy(np.asarray(self.idc.neurons))]
        # to the nearest target's centroids; computed directly, not through a matrix product, whose rounding
        # would depend on how many individuals share the batch (a seed must search alike alone or batched)
        distance = torch.cat([torch.cdist(piece, self._targets, compute_mode="donot_use_mm_for_euclid_dist")
                              .min(dim=1).values for piece in torch.split(important, 256)])
        new = torch.from_numpy(np.isin(codes, self._uncovered))
        m = margins(logits, labels.to(logits.device))
        predicted, m = predicted_labels(logits, labels, m), m.cpu()
        if self.misbehave:
            return Scores(distance + m.clamp(min=0), new & (m < 0), predicted, m, torch.from_numpy(codes))
        return Scores(distance, new, predicted, m, torch.from_numpy(codes))


def idc_objective(ctx: JobContext, classifier, dataset, layer: str | None = None, m: int = 6, misbehave: bool = False,
                  reference: str = "test", seed: int = 0, importance=None) -> NewCombination:
    """Fit IDC of `classifier`'s `layer` (the default coverage layer when None) on `dataset`'s training
    split, measure the `reference` split, and target the combinations it leaves uncovered."""
    from workbench.core.coverage.measure import measure_coverage
    from workbench.core.models.activations import NeuronDefinition
    from workbench.core.models.layers import default_layer, layer_catalogue

    catalogue = layer_catalogue(classifier.module, dataset.image_shape)
    layer = layer or default_layer(catalogue)
    if layer is None:
        raise WorkbenchError("The classifier has no Conv/Linear layer before its output layer for IDC.",
                             "Name the layer for the IDC objective.")
    definition = NeuronDefinition(str(layer))
    result = measure_coverage(ctx, classifier, dataset, definition, ["idc"], test_split=reference, m=m, seed=seed,
                              importance=importance)["idc"]
    return NewCombination(result.criterion, definition, catalogue, misbehave,
                          f"{dataset.name}:{reference}")

"""What a comparison keeps per input of a test set: covered items, correctness, FOL, uncertainty, novelty.

A `SetProfile` is computed once per test set, model and fitted criteria and stored in the project
(kind `comparison-profile`, keyed by all of them), so comparing again — other sets beside it, other
resamples, a report — reads it back instead of passing the inputs through the model. Per input it
holds:

- the items it covers for every criterion (`items.item_matrix`), from the criteria `measure_coverage`
  fitted (their fits are stored and reused too);
- the model's prediction and whether it is correct; its DeepGini uncertainty;
- FOL∞ at ε with the input itself as the starting point, ε·‖∇ₓJ‖₁ (the first-order loss the RobOT
  fuzzer ranks seeds by, docs/methods/fol-and-selection.md);
- its **novelty**: the L2 pixel distance to the nearest training input, among a seeded sample of the
  training split (all of it when it is smaller than the sample).

What a human or a proxy says about validity is not stored with it: labels change as raters answer,
so `validity_mask` reads them each time.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field

import numpy as np
from scipy import sparse

from workbench.core.comparison.items import item_matrix
from workbench.core.errors import WorkbenchError
from workbench.core.execution.jobs import JobContext
from workbench.core.project.store import text_column
from workbench.core.sampling import seeded_sample

KIND = "comparison-profile"
NOVELTY_SAMPLE = 10_000
CHUNK = 2000  # inputs scored and measured at a time
FOL_EPS = 0.1
#: criteria a comparison can take: each has a total of items and a per-input profile
COMPARABLE = ("idc", "nc", "kmnc", "nbc", "snac", "tknc")


@dataclass
class SetProfile:
    """A test set's per-input record for one model and one set of fitted criteria (module docstring)."""

    name: str
    source: str
    ids: np.ndarray
    labels: np.ndarray
    predictions: np.ndarray
    fol: np.ndarray
    gini: np.ndarray
    novelty: np.ndarray
    items: dict[str, sparse.csr_matrix]
    class_names: list[str] = field(default_factory=list)
    provenance: dict = field(default_factory=dict)
    artifact: str = ""
    reused: bool = False
    key: str = ""  # what the profile is stored under (the set, model, fits and settings it was made with)

    def __len__(self) -> int:
        return len(self.labels)

    @property
    def correct(self) -> np.ndarray:
        return self.predictions == self.labels

    def totals(self) -> dict[str, int]:
        return {key: int(m.shape[1]) for key, m in self.items.items()}

    def arrays(self) -> dict[str, np.ndarray]:
        out = {"ids": self.ids.astype(str), "labels": self.labels, "predictions": self.predictions, "fol": self.fol,
               "gini": self.gini, "novelty": self.novelty}
        for key, m in self.items.items():
            coo = m.tocoo()
            out[f"items_{key}_rows"] = coo.row.astype(np.int32)
            out[f"items_{key}_cols"] = coo.col.astype(np.int64)
        return out


def _digest(*parts) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()


def testset_identity(testset) -> str:
    """The inputs a set holds, by their stable ids and labels (not by name: a renamed copy is the same)."""
    h = hashlib.sha256()
    h.update("\n".join(map(str, testset.ids)).encode())
    h.update(np.ascontiguousarray(testset.labels, dtype=np.int64).tobytes())
    return h.hexdigest()


def profile_key(testset, model, results: dict, eps: float, novelty_sample: int, seed: int) -> str:
    fits = {key: r.criterion.identity_hash for key, r in results.items()}
    return _digest(testset_identity(testset), model.fingerprint(), fits, float(eps), int(novelty_sample), int(seed))


def nearest_distances(ctx: JobContext, images: np.ndarray, train, sample: int, seed: int,
                      chunk: int = 1024) -> np.ndarray:
    """(n,) the L2 pixel distance of each input to its nearest training input among a seeded sample."""
    import torch

    picked = seeded_sample(len(train), sample, [int(seed), 0x4E0E])
    reference = train.numpy(picked if picked is not None else slice(None))
    device = ctx.device
    ref = torch.as_tensor(reference.reshape(len(reference), -1), dtype=torch.float32, device=device)
    x = np.asarray(images, dtype=np.float32).reshape(len(images), -1)
    out = np.empty(len(x), dtype=np.float32)
    for start in range(0, len(x), chunk):
        ctx.check()
        block = torch.as_tensor(x[start:start + chunk], device=device)
        out[start:start + len(block)] = torch.cdist(block, ref).min(dim=1).values.cpu().numpy()
    return out


def compute_profile(ctx: JobContext, model, dataset, testset, results: dict, eps: float = FOL_EPS,
                    novelty_sample: int = NOVELTY_SAMPLE, seed: int = 0) -> SetProfile:
    """Pass `testset` through the model: its covered items per criterion, predictions, FOL, DeepGini and
    novelty (see the module docstring)."""
    from workbench.core.coverage.measure import input_profiles
    from workbench.core.robustness.scores import score_inputs

    if len(testset) == 0:
        raise WorkbenchError(f"Test set {testset.name!r} holds no inputs.", "Compare sets that hold inputs.")
    ctx.progress(0, 3, f"{testset.name}: covered items")
    profiles = input_profiles(ctx, model, dataset, testset, results)
    items = {}
    for key, r in results.items():
        total = r.criterion.coverage().total
        if total is None:
            continue
        items[key] = item_matrix(profiles[key], int(total), int(getattr(r.criterion, "items_per_neuron", 1)))
    ctx.progress(1, 3, f"{testset.name}: FOL, uncertainty and novelty")
    train = dataset.split(dataset.fit_split)
    parts: dict[str, list] = {"fol": [], "gini": [], "predictions": [], "novelty": []}
    for start in range(0, len(testset), CHUNK):  # chunk by chunk: the set is never held whole
        rows = np.arange(start, min(start + CHUNK, len(testset)))
        x = testset.numpy(rows)
        scores = score_inputs(ctx.quiet(), model, x, testset.labels[rows], x0=x, eps=eps)
        parts["fol"].append(scores["fol_linf"])
        parts["gini"].append(scores["deepgini"])
        parts["predictions"].append(scores["probs_matrix"].argmax(axis=1))
        parts["novelty"].append(nearest_distances(ctx, x, train, novelty_sample, seed))
    fol, gini, novelty = (np.concatenate(parts[k]).astype(np.float64) for k in ("fol", "gini", "novelty"))
    predictions = np.concatenate(parts["predictions"]).astype(np.int64)
    ctx.progress(3, 3, f"{testset.name}: profiled")
    how = {"testset": testset.name, "identity": testset_identity(testset), "model": model.name,
           "model_fingerprint": model.fingerprint(), "criteria": {k: r.criterion.identity for k, r in results.items()
                                                                   if k in items},
           "fit_keys": {k: r.criterion.identity_hash for k, r in results.items()}, "fol_eps": float(eps),
           "fol": "eps * ||grad_x J||_1 at the input (x0 = x)", "novelty_sample": int(novelty_sample),
           "novelty_split": dataset.fit_split, "seed": int(seed)}
    return SetProfile(testset.name, testset.source.describe(), np.asarray(testset.ids).astype(str),
                      np.asarray(testset.labels, np.int64), predictions, fol, gini, novelty, items,
                      list(testset.class_names or dataset.class_names), how)


def read_profile(project, name: str, testset, totals: dict[str, int]) -> SetProfile:
    artifact = project.load_artifact(name, kind=KIND)
    how = artifact.provenance
    items = {}
    for key, total in totals.items():
        rows, cols = artifact[f"items_{key}_rows"], artifact[f"items_{key}_cols"]
        items[key] = sparse.csr_matrix((np.ones(len(rows), bool), (rows, cols)), shape=(len(testset), total),
                                       dtype=bool)
    ids = text_column(artifact["ids"])
    return SetProfile(testset.name, testset.source.describe(), ids, artifact["labels"].astype(np.int64),
                      artifact["predictions"].astype(np.int64), artifact["fol"], artifact["gini"], artifact["novelty"],
                      items, list(testset.class_names or []), dict(how), name, reused=True)


def profile_testset(ctx: JobContext, project, model, dataset, testset, results: dict, eps: float = FOL_EPS,
                    novelty_sample: int = NOVELTY_SAMPLE, seed: int = 0) -> SetProfile:
    """The set's profile, read back from the project when it was made before, else computed (and stored)."""
    key = profile_key(testset, model, results, eps, novelty_sample, seed)
    totals = {k: int(r.criterion.coverage().total) for k, r in results.items()
              if r.criterion.coverage().total is not None}  # as `compute_profile` keeps them
    if project is not None:
        found = project.find_artifact(KIND, cache_key=key)
        if found is not None:
            try:
                profile = read_profile(project, found, testset, totals)
                profile.class_names = list(testset.class_names or dataset.class_names)
                profile.key = key
                return profile
            except (WorkbenchError, KeyError):
                pass  # a damaged or older profile is made again
    profile = compute_profile(ctx, model, dataset, testset, results, eps, novelty_sample, seed)
    profile.key = key
    if project is not None and not project.read_only:
        name = f"comparison-profile-{model.name}-{testset.name}-{key[:8]}"
        project.save_artifact(KIND, name, profile.arrays(), cache_key=key, **profile.provenance)
        profile.artifact = name
    return profile


@dataclass
class Validity:
    """Which inputs count as valid (`valid`), which were judged at all (`judged`), and by whom: the human
    consensus ("human", judged = the items it has decided) or both validity proxies ("proxy", every input).
    The human consensus also says which valid inputs keep their label (`preserving`)."""

    valid: np.ndarray
    judged: np.ndarray
    source: str
    preserving: np.ndarray | None = None


def validity_mask(project, testset) -> Validity | None:
    """The set's validity judgement: the human consensus once it has decided an item, else the two
    validity proxies where the set has their verdicts, else None."""
    from workbench.core.labeling.label_store import LabelStore, store_path
    from workbench.core.labeling.validated import human_judgement

    if project is not None and store_path(project).exists():
        try:
            with LabelStore(store_path(project), read_only=True) as store:
                labelled = testset.name in store.labelled_testsets()
            judged = human_judgement(project, testset) if labelled else None
        except WorkbenchError:
            judged = None  # a damaged store is reported where labels are read; here the proxies stand in
        if judged is not None:
            valid, preserving, decided = (np.zeros(len(testset), dtype=bool) for _ in range(3))
            valid[judged[0]], preserving[judged[1]], decided[judged[2]] = True, True, True
            return Validity(valid, decided, "human", preserving)
    columns = testset.columns
    if "proxy_selforacle_invalid" in columns and "proxy_daiv_invalid" in columns:
        valid = ~(np.asarray(columns["proxy_selforacle_invalid"], bool)
                  | np.asarray(columns["proxy_daiv_invalid"], bool))
        return Validity(valid, np.ones(len(testset), dtype=bool), "proxy")
    return None

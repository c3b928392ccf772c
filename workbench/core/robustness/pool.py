"""The candidate pool: successful adversarials with every score selection needs.

Method: docs/methods/fol-and-selection.md#candidate-pool.

A pool is what FGSM and PGD (and the fuzzer) produced against one model, each candidate carrying
its source index, attack, ground truth, both FOL kinds and the uncertainty scores. Pools are stored
in a project as `testset` artifacts (arrays `x` and `y` plus the scores), so coverage, selection and
retraining can all read them back. `holdout` splits off the checkpointing part
(docs/methods/fuzzing-and-retraining.md#held-out-split): grouped by source image, stratified by
which attacks succeeded on it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from workbench.core.errors import WorkbenchError
from workbench.core.robustness.attacks import (
    ATTACKS,
    attack_batch,
    attack_split,
    check_eps,
)
from workbench.core.execution.shard_plan import range_inputs, range_plan
from workbench.core.execution.sharding import input_ranges, run_plan, sharding
from workbench.core.robustness.scores import UNCERTAINTY_SCORES, score_inputs

#: Provenance keys the store adds (not how the pool was made), left out when a stored pool is read back.
STORE_KEYS = ("kind", "role", "created", "versions")
#: Per-candidate scores a pool carries; `probs` (N×K) is kept too, for MCP.
SCORE_NAMES = ("fol_linf", "fosc_l2", "grad_l2", *UNCERTAINTY_SCORES)


@dataclass
class CandidatePool:
    """Candidates (N×C×H×W in [0,1]) with ground truth, origin, scores and how they were made."""

    images: np.ndarray
    labels: np.ndarray
    source_index: np.ndarray
    attack: np.ndarray
    scores: dict[str, np.ndarray]
    probs: np.ndarray
    params: dict = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.labels)

    def subset(self, indices) -> "CandidatePool":
        indices = np.asarray(indices, dtype=np.int64)
        return CandidatePool(self.images[indices], self.labels[indices], self.source_index[indices],
                             self.attack[indices], {k: v[indices] for k, v in self.scores.items()},
                             self.probs[indices], dict(self.params))

    def attack_counts(self) -> dict[str, int]:
        names, counts = np.unique(self.attack, return_counts=True)
        return {str(n): int(c) for n, c in zip(names, counts)}

    def summary(self) -> dict:
        fol = self.scores.get("fol_linf", np.zeros(0))
        return {"candidates": len(self), "by_attack": self.attack_counts(),
                "fol_linf_mean": float(np.nanmean(fol)) if fol.size else None,
                "fol_linf_median": float(np.nanmedian(fol)) if fol.size else None}

    def to_arrays(self) -> dict[str, np.ndarray]:
        """Arrays for a `testset` artifact: `x`, `y` (what every test-set reader takes) plus the scores."""
        return {"x": self.images, "y": self.labels, "source_index": self.source_index,
                "attack": self.attack.astype(str), "probs": self.probs,
                **{f"score_{k}": v for k, v in self.scores.items()}}

    @classmethod
    def from_artifact(cls, artifact) -> "CandidatePool":
        """A pool read back from a project artifact written by `to_arrays`."""
        needed = {"x", "y", "source_index", "attack", "probs"}
        missing = needed - set(artifact.names)
        if missing:
            raise WorkbenchError(f"Test set {artifact.path.stem!r} is not a candidate pool: it lacks "
                                 f"{', '.join(sorted(missing))}.",
                                 "Choose a pool made by `workbench attack` or the Robustness view.")
        y = artifact.numbers("y", ndim=1)
        n = len(y)
        x = artifact.numbers("x", length=n)
        probs = artifact.numbers("probs", ndim=2, length=n)
        if x.ndim != 4:
            raise artifact.wrong_contents(f"its images are shaped {x.shape}, not (N, C, H, W)")
        if n and not 0 <= y.min() <= y.max() < probs.shape[1]:
            raise artifact.wrong_contents("its labels are outside the classes of its probabilities")
        attack = artifact["attack"]
        if len(attack) != n:
            raise artifact.wrong_contents(f"its 'attack' column has {len(attack)} rows, not {n}")
        scores = {name[len("score_"):]: artifact.numbers(name, ndim=1, length=n)
                  for name in artifact.names if name.startswith("score_")}
        params = {k: v for k, v in artifact.provenance.items() if k not in STORE_KEYS}
        return cls(x.astype(np.float32), y.astype(np.int64), artifact.numbers("source_index", ndim=1, length=n)
                   .astype(np.int64), np.asarray(attack).astype(str), scores, probs, params)


def score_candidates(ctx, model, images, labels, x0, eps: float, loss_mode: str = "logits",
                     batch_size: int = 256) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """(scores, softmax probabilities) for candidates whose clean inputs are `x0`."""
    out = score_inputs(ctx, model, images, labels, x0=x0, eps=eps, loss_mode=loss_mode, batch_size=batch_size)
    probs = out.pop("probs_matrix")
    out.pop("params")
    return {k: np.asarray(out[k], dtype=np.float64) for k in SCORE_NAMES if k in out}, probs


def build_pool(ctx, model, split, eps: float, attacks=ATTACKS, seed: int = 0, batch_size: int = 256,
               indices=None, loss_mode: str = "logits", what: str = "") -> CandidatePool:
    """Attack `split` (or `indices` of it) with FGSM and PGD, keep the successes and score them.

    FOL∞ uses the clean input and ground truth with the same ε that made the candidate, so FOL∞ ≥ 0
    for every candidate. An input can contribute one candidate per attack.
    """
    eps = check_eps(eps)
    inputs = PoolInputs(model, split, None if indices is None else np.asarray(indices, np.int64), eps,
                        tuple(attacks), int(seed), batch_size, loss_mode)
    n = len(split) if indices is None else len(indices)
    pool = _sharded_pool(ctx, inputs, n) if sharding(ctx) else attack_and_score(ctx, inputs, indices)
    if len(pool) == 0:
        raise WorkbenchError(f"No attack succeeded on {what or 'the inputs'} at eps={eps:g}: the pool is empty.",
                             "Raise eps, attack more inputs, or check that the model is not already robust.")
    pool.params.update(what=what, attacked_inputs=int(n))
    return pool


@dataclass
class PoolInputs:
    """What attacking and scoring needs, sent once to every shard of a pool."""

    model: object
    split: object
    indices: np.ndarray | None
    eps: float
    attacks: tuple
    seed: int
    batch_size: int
    loss_mode: str


def attack_and_score(ctx, inputs: PoolInputs, indices, after_batches: int = 0) -> CandidatePool:
    """Attack the inputs `indices` of the split (all when None) and score the successes (an empty pool if none)."""
    attacked = attack_split(ctx, inputs.model, inputs.split, inputs.eps, attacks=inputs.attacks, seed=inputs.seed,
                            batch_size=inputs.batch_size, indices=indices, loss_mode=inputs.loss_mode,
                            successful_only=True, after_batches=after_batches)
    ctx.check()
    if len(attacked) == 0:
        scores, probs = {}, np.zeros((0, 0), dtype=np.float32)
    else:
        scores, probs = score_candidates(ctx, inputs.model, attacked.images, attacked.labels,
                                         attacked.clean_images(inputs.split), inputs.eps, inputs.loss_mode,
                                         inputs.batch_size)
    return CandidatePool(attacked.images, attacked.labels, attacked.source_index, attacked.attack,
                         scores, probs, dict(attacked.params))


def pool_shard(ctx, inputs: PoolInputs, piece: tuple[int, int]) -> CandidatePool:
    """One shard of a pool: the inputs at positions piece[0]..piece[1], with the random starts they get in
    one pass (the earlier batches' draws skipped)."""
    indices = range_inputs(inputs.indices, piece)
    return attack_and_score(ctx, inputs, indices, after_batches=piece[0] // attack_batch(inputs.batch_size))


def joined_pools(parts: list[CandidatePool]) -> CandidatePool:
    """The shards' pools as one, in shard order, with their attempt and success counts added up."""
    kept = [p for p in parts if len(p)] or parts[:1]
    params = dict(parts[0].params)
    for count in ("attempted", "succeeded"):
        params[count] = {name: sum(p.params[count][name] for p in parts) for name in params[count]}
    names = sorted(set.intersection(*(set(p.scores) for p in kept)))
    return CandidatePool(np.concatenate([p.images for p in kept]), np.concatenate([p.labels for p in kept]),
                         np.concatenate([p.source_index for p in kept]), np.concatenate([p.attack for p in kept]),
                         {k: np.concatenate([p.scores[k] for p in kept]) for k in names},
                         np.concatenate([p.probs for p in kept]), params)


def _sharded_pool(ctx, inputs: PoolInputs, n: int) -> CandidatePool:
    """`attack_and_score` over all the inputs as shards aligned to the attack batch: each input gets the same
    random start as in one pass, so the candidates are the same, and their scores too within float rounding."""
    step = attack_batch(inputs.batch_size)
    return run_plan(ctx, range_plan("attacks", inputs, input_ranges(ctx, n, step), pool_shard, joined_pools))


def fuzzer_candidates(ctx, model, tests, x0, eps: float, loss_mode: str = "logits", batch_size: int = 256,
                      what: str = "fuzzer tests") -> CandidatePool:
    """The fuzzer's tests (a `FuzzResult`) as pool candidates, scored like the attacks' against their
    clean seeds `x0`, so they can join a pool and be selected (attack "fuzz")."""
    from workbench.core.robustness.fuzzing import ATTACK_NAME

    scores, probs = score_candidates(ctx, model, tests.images, tests.labels, x0, eps, loss_mode, batch_size)
    return CandidatePool(tests.images, tests.labels, tests.seed_index, np.full(len(tests), ATTACK_NAME), scores,
                         probs, {"eps": eps, "loss_mode": loss_mode, "what": what})


#: the `attack` of a generated set's misbehaviours in a pool
GENERATED = "generated"


def generated_misbehaviours(arrays: dict) -> tuple[np.ndarray, np.ndarray]:
    """(rows, source_index) of a generated set's misbehaviours (`arrays`: its `x`, `y`, `found`, `predicted`,
    `generator` and `seed`): the inputs the search found and the model gets wrong. Each seed of each generator is
    one source for the held-out split; their indices are negative (−1, −2, …), so that they never meet a training
    image's index when the candidates join an attack pool."""
    y = np.asarray(arrays["y"], dtype=np.int64)
    rows = np.flatnonzero(np.asarray(arrays["found"], dtype=bool) & (np.asarray(arrays["predicted"]) != y))
    origins = [f"{g}\0{s}" for g, s in zip(np.asarray(arrays["generator"])[rows], np.asarray(arrays["seed"])[rows])]
    _, source = np.unique(np.array(origins, dtype=str), return_inverse=True)
    return rows, -1 - source.astype(np.int64)


def generated_candidates(ctx, model, arrays: dict, eps: float, loss_mode: str = "logits", batch_size: int = 256,
                         what: str = "a generated set") -> CandidatePool:
    """A generated set's misbehaviours (`generated_misbehaviours`) as pool candidates (attack "generated"),
    labelled with the class they were generated as and scored like an attack's candidates, each as its own clean
    input: FOL∞ = ε·‖∇ₓℓ‖₁, how much its loss can still rise within ε. Not against its seed's image: the search
    moves in latent space, so an input lies far outside any ε-ball of its seed, and the first-order term toward
    the seed, −∇ₓℓ·(x − x₀), approximates nothing there (it made FOL∞ negative on a colour set)."""
    rows, source = generated_misbehaviours(arrays)
    if not len(rows):
        raise WorkbenchError(f"{what[:1].upper()}{what[1:]} holds no misbehaviour of the model to retrain with.",
                             "Generate with a larger budget or more seeds, or choose another set.")
    x = np.asarray(arrays["x"], dtype=np.float32)[rows]
    y = np.asarray(arrays["y"], dtype=np.int64)[rows]
    scores, probs = score_candidates(ctx, model, x, y, x, eps, loss_mode, batch_size)
    return CandidatePool(x, y, source, np.full(len(rows), GENERATED), scores, probs,
                         {"eps": eps, "loss_mode": loss_mode, "what": what})


def merge_pools(first: CandidatePool, second: CandidatePool) -> CandidatePool:
    """One pool from two (e.g. attacks and fuzzer tests); both must score FOL the same way."""
    for key in ("eps", "loss_mode"):
        if first.params.get(key) != second.params.get(key):
            raise WorkbenchError(f"The two pools were scored with different {key} ({first.params.get(key)} and "
                                 f"{second.params.get(key)}).", "Score both pools with the same settings.")
    common = sorted(set(first.scores) & set(second.scores))
    return CandidatePool(np.concatenate([first.images, second.images]),
                         np.concatenate([first.labels, second.labels]),
                         np.concatenate([first.source_index, second.source_index]),
                         np.concatenate([first.attack, second.attack]),
                         {k: np.concatenate([first.scores[k], second.scores[k]]) for k in common},
                         np.concatenate([first.probs, second.probs]),
                         {**first.params, "merged_with": second.params.get("what", "")})


def holdout(pool: CandidatePool, fraction: float = 0.1, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """(selectable, held-out) pool indices: `fraction` of the source images held out for checkpointing.

    Grouping by source image keeps both attack versions of an input on one side; stratifying by the
    set of attacks that succeeded on it keeps the FGSM/PGD mix of both sides alike.
    """
    return held_out_split(pool.source_index, pool.attack, fraction, seed)


def held_out_split(source_index, attack, fraction: float = 0.1,
                   seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """`holdout` of candidates given by their source indices and attacks (before they are scored)."""
    if not 0.0 < fraction < 1.0:
        raise WorkbenchError(f"The held-out fraction {fraction} is not between 0 and 1.", "Use e.g. 0.1.")
    rng = np.random.default_rng(seed)
    attack = np.asarray(attack)
    sources, inverse = np.unique(np.asarray(source_index), return_inverse=True)
    signature = np.zeros(len(sources), dtype=np.int64)
    for k, name in enumerate(sorted(set(attack.tolist()))):
        hit = np.zeros(len(sources), dtype=bool)
        hit[inverse[attack == name]] = True
        signature |= hit.astype(np.int64) << k
    held_sources = np.zeros(len(sources), dtype=bool)
    for value in np.unique(signature):
        members = np.flatnonzero(signature == value)
        take = int(round(fraction * len(members)))
        held_sources[rng.choice(members, size=take, replace=False)] = True
    held = held_sources[inverse]
    return np.flatnonzero(~held), np.flatnonzero(held)


# --- in a project ---------------------------------------------------------------------------------

def save_pool(project, name: str, pool: CandidatePool, **how) -> dict:
    """Store a pool as a project test set (arrays `x`, `y` and the scores), atomically."""
    from workbench.core.testsets import save_testset

    return save_testset(project, name, pool.to_arrays(), **{**pool.params, "role": "candidate-pool", **how})


def load_pool(project, name: str) -> CandidatePool:
    """A pool stored by `save_pool`, read back."""
    return CandidatePool.from_artifact(project.load_artifact(name, kind="testset"))

"""The latent-space genetic test generator: search a generator's latent space for inputs the classifier
under test misclassifies (after SINVAD and the GenAI-TIG benchmark; docs/methods/generation.md#the-latent-search).

**Seeds.** A VAE starts from real test images (z₀ = µ(x), the label y is the image's own); a
class-conditional generator from prior draws z₀ ~ N(0, I) with labels y spread over the classes. A
seed is kept only if the classifier predicts y for its decoded image.

**Fitness.** The logit margin m = ℓ_y − max_{c≠y} ℓ_c of a decoded genome, minimised; m < 0 exactly
when the classifier no longer predicts y (a tie is not a misbehaviour).

**Loop, per kept seed** (population 25, elite 10, budget 250 generations):

    P = clamp(z₀ + p₀·N(0, I), 25 times);  prev = best = +∞;  σ = e;  p₀ = 2e
    for g = 1 … budget:
        m = margins(classifier(decode(P, y)), y)
        keep the best image and genome seen;  E = the 10 lowest m
        stop if min(m) < 0 (found at generation g)
        σ = 2σ if min(m) == prev (a stall doubles the step) else p₀
        15 children: parents a ≠ b from E, a cut k uniform in [0, D): c = a[:k] ++ b[k:] + σ·N(0, I)
        P = clamp(E ++ children);  prev = min(m)

The elite survive unchanged, so the best fitness never rises and a stall is exact equality. Genes
are clamped to the generator's measured latent range [low, high], the first population included;
the extent e is range / 1000 ("high") or range / 10 000 ("low"), as the card records. (The
benchmark's scripts also masked the mutation to genes that differ from the seed's, which all do
after the first perturbation: the mask is left out.)

**Other objectives** (`objectives`): an objective gives each individual a fitness and says whether
it succeeds; the loop stops at the first success, ranks successes first and then by fitness, and
keeps as best the first success or else the lowest fitness. Under the benchmark's objective
(fitness = m, success = m < 0) that is the loop above exactly; under an IDC objective the fitness is
a distance and a success a new combination, and the trace may rise once, at the success.

**A stop** (the job cancelled) ends the search where it is: the seeds still searching keep the best
input found so far, marked unfinished, and the job keeps what was found (`keep_what_was_found`).

**Batched across seeds.** Each generation decodes and classifies the populations of every seed still
searching as one batch, in inference mode on the job's device; a seed that stops leaves the batch.
Each seed draws from its own random stream (seeded by the run's seed and the seed's index), so a
seed's search is the same whichever other seeds share its batches: a run can be split into shards
of seeds and joined again. That is exact for generators and classifiers whose outputs do not depend
on the batch an image is computed in (the VAE, the cDCGAN and LeNet-5: a test compares them bit for
bit); the diffusion UNet's convolutions round differently with the batch size (by about 10⁻⁶ in a
pixel), so there a seed whose individuals' margins lie that close can take another path.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from workbench.core.errors import Cancelled, WorkbenchError
from workbench.core.generation.assessment import (
    classify,
    decode_in_batches,
    draw_indices,
    encode_in_batches,
)
from workbench.core.execution.jobs import JobContext
from workbench.core.execution.shard_plan import ShardPlan, split_list
from workbench.core.execution.sharding import planned_shards, run_plan, sharding
from workbench.core.generation.objectives import Misbehaviour
from workbench.core.generation.protocol import Generator, check_fits

POPULATION, ELITE, BUDGET = 25, 10, 250
EXTENTS = {"high": 1000.0, "low": 10000.0}  # the latent range divided by this is the mutation extent


@dataclass
class Seeds:
    """The seeds of a run: their genomes, intended labels, decoded images and whether the classifier kept them."""

    genomes: np.ndarray  # (n, D) float32
    labels: np.ndarray  # (n,) int64, the intended classes
    images: np.ndarray  # (n, C, H, W) float32 in [0, 1]
    predicted: np.ndarray  # (n,) the classifier's labels for the seed images
    source_index: np.ndarray  # (n,) the test image a VAE seed encodes, −1 for prior draws

    @property
    def kept(self) -> np.ndarray:
        return self.predicted == self.labels


@dataclass
class SeedResult:
    """One kept seed's search: what the benchmark records per seed, and the latent distance travelled."""

    seed: int  # its index among the run's seeds
    label: int  # intended
    predicted: int  # the classifier's label for the best image
    found: bool  # a misbehaviour: the best image is classified as another class
    generations: int  # generations used (1-based stop generation, or the budget)
    best_margin: float  # the best fitness (the logit margin under the benchmark's objective); NaN before any
    fitness: list = field(default_factory=list)  # the best margin after each generation
    best_image: np.ndarray | None = None
    best_genome: np.ndarray | None = None
    distance: float = 0.0  # ‖best genome − seed genome‖₂
    finished: bool = True  # False: the run was stopped while this seed searched
    generator: str = ""  # the run's generator, for a partial result shown as it comes
    seed_image: np.ndarray | None = None
    steps: list = field(default_factory=list)  # the mutation step σ of each generation's children
    margin: float = float("nan")  # the classifier's logit margin of the best input
    code: int = -1  # its IDC combination, when the objective reads one


def extent_of(latent_range: dict, extent: str) -> float:
    """The mutation extent of a card's latent range: range / 1000 ("high") or range / 10 000 ("low")."""
    if extent not in EXTENTS:
        raise WorkbenchError(f"The extent {extent!r} is not one of {', '.join(EXTENTS)}.", "Use high or low.")
    width = float(latent_range["high"]) - float(latent_range["low"])
    if not width > 0:
        raise WorkbenchError("The generator's latent range is empty, so no mutation can move a gene.",
                             "Measure the latent range again (train or export the generator).")
    return width / EXTENTS[extent]


def draw_seeds(ctx: JobContext, generator: Generator, classifier, n: int, seed: int = 0, images=None) -> Seeds:
    """`n` seeds drawn from `seed`: test images (`images`, a split) encoded for a generator with an
    encoder and no class conditioning (the VAE), else prior draws with labels spread over the classes;
    each decoded and classified once."""
    import torch

    if n < 1:
        raise WorkbenchError(f"A run needs at least one seed (got {n}).", "Ask for 1 seed or more.")
    check_fits(generator, classifier=classifier)
    if not generator.conditional:
        if not generator.can_encode or images is None or not len(images):
            raise WorkbenchError(f"The {generator.title or generator.kind} generator starts its seeds from encoded "
                                 "test images, and none were given.", "Give the dataset's test split.")
        pick = draw_indices(len(images), n, seed)
        genomes = encode_in_batches(ctx, generator, images.tensor(pick), "seeds: encoding test images")
        labels = torch.from_numpy(np.asarray(images.labels[pick], dtype=np.int64))
        source = pick.astype(np.int64)
    else:
        stream = torch.Generator().manual_seed(int(seed))
        genomes = generator.sample_latent(n, stream)
        labels = torch.randint(0, generator.num_classes, (n,), generator=stream)
        source = np.full(n, -1, dtype=np.int64)
    decoded = decode_in_batches(ctx, generator, genomes, labels if generator.conditional else None, "seeds: decoding",
                                seeds=True)
    predicted, _ = classify(ctx, classifier, decoded, "seeds: classifying")
    return Seeds(genomes.numpy().astype(np.float32), labels.numpy(), decoded.numpy(), predicted.numpy(), source)


def search(ctx: JobContext, generator: Generator, classifier, seeds: Seeds, low: float, high: float, extent: float,
           budget: int = BUDGET, seed: int = 0, which=None, label: str = "", objective=None,
           tell_stop: bool = True) -> list[SeedResult]:
    """The loop of the module docstring for the kept seeds (or the seeds `which` names), batched
    across seeds; one `SeedResult` per searched seed, in seed order, each also handed out as a
    partial result when its search ends (`label` names the generator in them). `objective` (see
    `objectives`) is the benchmark's misbehaviour objective unless another is given. A stop keeps what
    was found, and says so in a notice unless `tell_stop` is off."""
    import torch

    if budget < 1:
        raise WorkbenchError(f"A search needs a budget of at least one generation (got {budget}).",
                             "Give --budget 1 or more (the benchmark: 250).")
    if not extent > 0:
        raise WorkbenchError(f"The mutation extent must be positive (got {extent}).", "Use the high or low extent.")
    objective = objective or Misbehaviour()
    order = np.flatnonzero(seeds.kept) if which is None else np.asarray(which, dtype=np.int64)
    d = seeds.genomes.shape[1]
    p0 = 2.0 * extent
    streams = {int(s): torch.Generator().manual_seed(int(seed) * 1_000_003 + int(s)) for s in order}
    state = {}
    for s in order:
        s = int(s)
        z0 = torch.from_numpy(seeds.genomes[s])
        start = z0 + p0 * torch.randn(POPULATION, d, generator=streams[s])
        state[s] = {"z0": z0, "population": start.clamp(low, high), "prev": float("inf"), "best": float("inf"),
                    "sigma": extent, "fitness": [], "steps": [], "image": None, "genome": None,
                    "label": label, "hit": False}
    results: dict[int, SeedResult] = {}
    active = [int(s) for s in order]
    try:
        _evolve(ctx, generator, classifier, objective, seeds, state, streams, results, active, low, high, p0, budget,
                d)
    except Cancelled:  # a stop: the seeds still searching end with what they found so far
        ctx.keep_what_was_found()
        for s in order:
            s = int(s)
            if s not in results:
                st = state[s]
                results[s] = _result(s, seeds, st, found=False, generations=len(st["fitness"]), finished=False)
        if tell_stop:
            ctx.notice(f"The search was stopped: {sum(r.finished for r in results.values())} of {len(order)} "
                       "seeds had finished; the others keep the best input found so far, marked unfinished.")
    ctx.progress(budget, budget, "search finished")
    return [results[int(s)] for s in order]


def _evolve(ctx, generator, classifier, objective, seeds, state, streams, results, active, low, high, p0, budget,
            d) -> None:
    """The generations of `search`, for the seeds in `active`, filling `results` as seeds finish."""
    import torch

    for generation in range(1, budget + 1):
        if not active:
            break
        ctx.progress(generation - 1, budget, f"generation {generation}: {len(active)} seeds searching")
        z = torch.cat([state[s]["population"] for s in active])
        y = torch.from_numpy(np.repeat(seeds.labels[active], POPULATION))
        with torch.inference_mode():
            images = decode_in_batches(ctx.quiet(), generator, z, y if generator.conditional else None)
            scores = objective.evaluate(ctx, classifier, images, y)
        still = []
        for i, s in enumerate(active):
            st = state[s]
            part = slice(i * POPULATION, (i + 1) * POPULATION)
            mine, hits = scores.fitness[part], scores.success[part]
            order_ = torch.argsort(mine, stable=True)  # by fitness, successes first (for the margin: the same)
            order_ = order_[torch.argsort((~hits[order_]).to(torch.uint8), stable=True)]
            first = int(order_[0])
            low_m, hit = float(mine[first]), bool(hits[first])
            if (not hit, low_m) < (not st["hit"], st["best"]):
                st["best"], st["hit"] = low_m, hit
                st["image"] = images[part][first].numpy().copy()
                st["genome"] = st["population"][first].numpy().copy()
                st["predicted"] = int(scores.predicted[part][first])
                st["margin"] = float(scores.margin[part][first])
                st["code"] = int(scores.code[part][first]) if scores.code is not None else -1
            st["fitness"].append(st["best"])
            if hit or generation == budget:
                results[s] = _result(s, seeds, st, found=hit, generations=generation)
                ctx.partial(results[s])
                continue
            elite = st["population"][order_[:ELITE]]
            st["sigma"] = 2.0 * st["sigma"] if low_m == st["prev"] else p0
            st["steps"].append(st["sigma"])
            st["population"] = torch.cat([elite, _children(elite, st["sigma"], streams[s], d)]).clamp(low, high)
            st["prev"] = low_m
            still.append(s)
        active[:] = still


def _children(elite, sigma: float, stream, d: int):
    """POPULATION − ELITE children: one-point crossover of two distinct elite parents on the flat genome,
    then Gaussian mutation of step `sigma`, all from the seed's own stream."""
    import torch

    count = POPULATION - ELITE
    first = torch.randint(0, len(elite), (count,), generator=stream)
    second = (first + torch.randint(1, len(elite), (count,), generator=stream)) % len(elite)  # another parent
    cuts = torch.randint(0, d, (count,), generator=stream)
    left = torch.arange(d)[None, :] < cuts[:, None]
    children = torch.where(left, elite[first], elite[second])
    return children + sigma * torch.randn(count, d, generator=stream)


def _result(s: int, seeds: Seeds, st: dict, found: bool, generations: int, finished: bool = True) -> SeedResult:
    genome, image = st["genome"], st["image"]
    if genome is None:  # stopped before its first generation was classified: the seed itself is its best
        genome, image = seeds.genomes[s].copy(), seeds.images[s].copy()
    return SeedResult(s, int(seeds.labels[s]), int(st.get("predicted", seeds.labels[s])), bool(found), generations,
                      float(st["best"]) if st["fitness"] else float("nan"), list(st["fitness"]), image, genome,
                      float(np.linalg.norm(genome - seeds.genomes[s])), finished, st.get("label", ""),
                      seeds.images[s], list(st["steps"]), float(st.get("margin", float("nan"))),
                      int(st.get("code", -1)))


@dataclass
class SearchInputs:
    """What searching from seeds needs, sent once to every shard: generator, classifier, seeds and settings."""

    generator: Generator
    classifier: object
    seeds: Seeds
    low: float
    high: float
    extent: float
    budget: int
    seed: int
    label: str
    objective: object


def search_part(ctx: JobContext, inputs: SearchInputs, which, tell_stop: bool = True) -> list[SeedResult]:
    """`search` from the kept seeds `which` names (all kept ones when None)."""
    return search(ctx, inputs.generator, inputs.classifier, inputs.seeds, inputs.low, inputs.high, inputs.extent,
                  inputs.budget, inputs.seed, which=which, label=inputs.label, objective=inputs.objective,
                  tell_stop=tell_stop)


def search_shard(ctx: JobContext, inputs: SearchInputs, which: list[int]) -> list[SeedResult]:
    """One shard of a search: its seeds. A stop is told once, for the whole search (`sharded_search`)."""
    return search_part(ctx, inputs, which, tell_stop=False)


def sharded_search(ctx: JobContext, inputs: SearchInputs) -> list[SeedResult]:
    """`search` with the kept seeds in shards. Each seed searches from its own random stream, so a seed's
    search is the one it has in a single run; only the batches its images are decoded and classified in
    differ, which can move a logit in its last bits. A stop keeps the seeds finished in the shards that
    ended, and the others' seeds as unfinished."""
    order = [int(s) for s in np.flatnonzero(inputs.seeds.kept)]
    if not order:
        return []
    pieces = split_list(order, planned_shards(ctx, len(order)))
    shown: set[int] = set()

    def partial(parts: dict) -> list[SeedResult]:  # a finished shard's seeds, as a search hands them out
        new = [r for i in sorted(set(parts) - shown) for r in parts[i]]
        shown.update(parts)
        return new

    def on_stop(parts: dict) -> list[SeedResult]:
        found = {r.seed: r for part in parts.values() for r in part}
        results = [found.get(s) or unfinished(s, inputs.seeds, inputs.label) for s in order]
        ctx.notice(f"The search was stopped: {sum(r.finished for r in results)} of {len(order)} seeds had "
                   "finished; the others keep their seed, marked unfinished.")
        return results

    return run_plan(ctx, ShardPlan("search", inputs, pieces, search_shard,
                                   lambda parts: [r for part in parts for r in part], [len(p) for p in pieces],
                                   units="seeds", partial=partial, on_stop=on_stop,
                                   describe=lambda piece: f"seeds {piece[0]}–{piece[-1]}"))


def unfinished(s: int, seeds: Seeds, label: str) -> SeedResult:
    """A seed whose search never ran: its own image and genome, marked unfinished."""
    return _result(s, seeds, {"genome": None, "image": None, "fitness": [], "steps": [], "best": float("nan"),
                              "label": label}, found=False, generations=0, finished=False)


@dataclass
class GenerationRun:
    """One generator's run: its seeds, the searches of the kept ones, and how it was made."""

    generator: str
    extent: str
    seeds: Seeds
    results: list
    params: dict = field(default_factory=dict)

    def summary(self) -> dict:
        """The benchmark's per-generator figures: seeds kept, misbehaviours, mean generations used."""
        kept = int(self.seeds.kept.sum())
        found = [r for r in self.results if r.found]
        return {"generator": self.generator, "extent": self.extent, "seeds": int(len(self.seeds.labels)),
                "kept": kept, "found": len(found), "misbehaviours": sum(r.predicted != r.label for r in self.results),
                "mean_generations": float(np.mean([r.generations for r in found])) if found else None,
                "mean_distance": float(np.mean([r.distance for r in found])) if found else None}


def generate(ctx: JobContext, generator: Generator, classifier, n_seeds: int, extent: str = "high",
             budget: int = BUDGET, seed: int = 0, images=None, name: str = "", objective=None) -> GenerationRun:
    """Draw `n_seeds` seeds and search the latent space from every kept one (the module docstring),
    with the extent and clamp bounds of the generator's card, for `objective` (the benchmark's
    misbehaviour objective when None)."""
    objective = objective or Misbehaviour()
    card = generator.card
    if card is None or not card.latent_range:
        raise WorkbenchError(f"The generator {name or generator.kind!r} has no measured latent range on its card.",
                             "Export it again, or finish its training: the card's measures come at the end.")
    step = extent_of(card.latent_range, extent)
    seeds = draw_seeds(ctx.stage(0, 2, "seeds"), generator, classifier, n_seeds, seed, images)
    if not seeds.kept.any():
        ctx.notice(f"The classifier {classifier.name!r} labels none of the {n_seeds} seed images of "
                   f"{name or generator.kind} as intended, so nothing was searched.")
    inputs = SearchInputs(generator, classifier, seeds, float(card.latent_range["low"]),
                          float(card.latent_range["high"]), step, budget, seed, name or generator.kind, objective)
    searching = ctx.stage(1, 2, "search", partials=True)
    results = sharded_search(searching, inputs) if sharding(ctx) else search_part(searching, inputs, None)
    params = {**objective.describe(), "generator": name or generator.kind, "kind": generator.kind, "classifier": classifier.name,
              "classifier_fingerprint": classifier.fingerprint(), "seeds": int(n_seeds), "extent": extent,
              "step": step, "budget": int(budget), "seed": int(seed), "population": POPULATION, "elite": ELITE,
              "low": float(card.latent_range["low"]), "high": float(card.latent_range["high"])}
    return GenerationRun(name or generator.kind, extent, seeds, results, params)

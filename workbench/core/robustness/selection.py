"""Test selection from a candidate pool (docs/methods/fol-and-selection.md#selection-strategies).

Strategies: BE-ST, KM-ST, DeepGini top-n, random, MCP, the ICSE artifact's KM-ST variant
(`kmst_legacy`) and a coverage-guided baseline (`coverage_greedy`, with `neuron_coverage_items` to
build its input). Every strategy takes a score vector (or matrix) over the pool and a budget (an
absolute count, or a string such as "5%" of the pool), drops NaN scores (counted in the result),
and returns the chosen pool indices with the parameters that produced them. A budget larger than
the usable pool, or an empty pool, is refused with a `WorkbenchError` rather than silently shrunk.

`STRATEGIES` names them all; `select(strategy, scores, budget, seed)` dispatches by name, taking
what the strategy needs from a dict of the pool's scores.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from workbench.core.errors import WorkbenchError

KMST_DEFAULT_SECTIONS = 4  # the Testing4AI rewrite's k; QuoTe used 100


@dataclass
class Selection:
    """Chosen pool indices (unique), the strategy and its parameters, and how many NaN scores were dropped."""

    indices: np.ndarray
    strategy: str
    params: dict = field(default_factory=dict)
    excluded_nan: int = 0


def resolve_budget(budget, pool_size: int | None) -> int:
    """An absolute budget from an int, or from a percentage string "p%" of `pool_size` (rounded down).
    Without a pool size, only whether the budget is well formed and selects something is checked."""
    if isinstance(budget, str) and budget.strip().endswith("%"):
        try:
            percent = float(budget.strip()[:-1])
        except ValueError as exc:
            raise WorkbenchError(f"The budget {budget!r} is not a percentage.", "Write it like 5%.") from exc
        if not (math.isfinite(percent) and 0 < percent <= 100):
            raise WorkbenchError(f"The budget {budget!r} is not a percentage in (0, 100].", "Write it like 5%.")
        if pool_size is None:
            return 1
        count = math.floor(percent / 100.0 * pool_size + 1e-9)
    else:
        try:
            count = int(budget)
        except (TypeError, ValueError) as exc:
            raise WorkbenchError(f"The budget {budget!r} is not a count.",
                                 "Give a whole number or a percentage like 5%.") from exc
        if count != budget:
            raise WorkbenchError(f"The budget {budget!r} is not a whole number.",
                                 "Give a count or a percentage like 5%.")
    if count < 1:
        pool = "" if pool_size is None else f" from a pool of {pool_size:,}"
        raise WorkbenchError(f"The budget {budget!r} selects no test{pool}.", "Give a budget of at least one test.")
    return count


def _prepare(scores, budget, name: str):
    """(valid pool indices in ascending order, their scores, absolute budget, NaN count)."""
    scores = np.asarray(scores, dtype=np.float64).reshape(-1)
    if scores.size == 0:
        raise WorkbenchError(f"{name}: the candidate pool is empty.",
                             "Generate candidates first (attack the training set or run the fuzzer).")
    valid = np.flatnonzero(~np.isnan(scores))
    nan_count = scores.size - valid.size
    if valid.size == 0:
        raise WorkbenchError(f"{name}: every score in the pool is NaN.", "Recompute the scores; check the model.")
    n = resolve_budget(budget, valid.size)
    if n > valid.size:
        raise WorkbenchError(f"{name}: the budget {n} is larger than the pool of {valid.size} candidates"
                             + (f" ({nan_count} NaN scores dropped)." if nan_count else "."),
                             "Lower the budget or generate more candidates.")
    return valid, scores[valid], n, nan_count


def be_st(fol, budget, compat: bool = False) -> Selection:
    """BE-ST: the ⌊n/2⌋ lowest and ⌈n/2⌉ highest FOL (stable ascending sort, ties to the lower index).

    `compat=True` reproduces the RobOT code's n//2 from each end (n − 1 items for odd n;
    docs/methods/fol-and-selection.md#be-st).
    """
    valid, values, n, nan_count = _prepare(fol, budget, "BE-ST")
    order = valid[np.argsort(values, kind="stable")]
    low = n // 2
    high = n // 2 if compat else n - low
    chosen = np.concatenate([order[:low], order[order.size - high:]]) if high else order[:low]
    return Selection(chosen.astype(np.int64), "be-st", {"budget": n, "compat": compat}, nan_count)


def kmst_sections(values: np.ndarray, k: int, lo: float | None = None) -> tuple[np.ndarray, float, float]:
    """Section number of each value over [lo, hi] cut into k equal widths, the last closed at hi.

    `lo` defaults to `min(0, min values)`, `hi` is `max values`; if hi = lo everything is section 0.
    """
    hi = float(values.max())
    lo = min(0.0, float(values.min())) if lo is None else float(lo)
    if lo > float(values.min()):
        raise WorkbenchError(f"KM-ST: the range start {lo} is above the smallest score {values.min()}.",
                             "Leave lo at its default min(0, min FOL).")
    if hi == lo:
        return np.zeros(values.size, dtype=np.int64), lo, hi
    edges = lo + np.arange(k + 1) * ((hi - lo) / k)
    sections = np.searchsorted(edges, values, side="right") - 1
    return np.clip(sections, 0, k - 1).astype(np.int64), lo, hi


def km_st(fol, budget, k: int = KMST_DEFAULT_SECTIONS, seed: int = 0, lo: float | None = None) -> Selection:
    """KM-ST: quota ⌊n/k⌋ per FOL section, then a top-up without replacement
    (docs/methods/fol-and-selection.md#km-st).

    Random draws are pinned: one `numpy.random.default_rng(seed)`; sections in ascending order, each
    with at least q members drawing `rng.choice(members, q, replace=False)` over its members in
    ascending index order (a smaller section gives all its members, no draw); then one
    `rng.choice` over the not-yet-selected candidates, in ascending index order, for the shortfall.
    """
    if int(k) != k or k < 1:
        raise WorkbenchError(f"KM-ST needs a positive whole number of sections (got {k}).", "Use k = 4.")
    k = int(k)
    valid, values, n, nan_count = _prepare(fol, budget, "KM-ST")
    sections, lo, hi = kmst_sections(values, k, lo)
    rng = np.random.default_rng(seed)
    quota = n // k
    picked = []
    if quota:
        for i in range(k):
            members = valid[sections == i]
            if members.size >= quota:
                picked.append(rng.choice(members, size=quota, replace=False))
            else:
                picked.append(members)
    chosen = np.concatenate(picked).astype(np.int64) if picked else np.zeros(0, np.int64)
    shortfall = n - chosen.size
    if shortfall:
        remaining = np.setdiff1d(valid, chosen)  # sorted ascending
        chosen = np.concatenate([chosen, rng.choice(remaining, size=shortfall, replace=False)])
    params = {"budget": n, "k": k, "seed": seed, "lo": lo, "hi": hi, "quota": quota, "topped_up": int(shortfall)}
    return Selection(chosen.astype(np.int64), "km-st", params, nan_count)


def deepgini_top(gini, budget) -> Selection:
    """The n highest DeepGini ξ = 1 − Σp² (most uncertain first; ties to the lower index)."""
    valid, values, n, nan_count = _prepare(gini, budget, "DeepGini")
    chosen = valid[np.argsort(-values, kind="stable")[:n]]
    return Selection(chosen.astype(np.int64), "deepgini", {"budget": n}, nan_count)


def random_select(scores_or_size, budget, seed: int = 0) -> Selection:
    """n candidates uniformly without replacement: `default_rng(seed).choice(valid, n, replace=False)`.

    Takes the pool size, or a score vector whose NaN entries are excluded like the other strategies.
    """
    if np.ndim(scores_or_size) == 0:
        scores = np.zeros(int(scores_or_size))
    else:
        scores = scores_or_size
    valid, _, n, nan_count = _prepare(scores, budget, "Random")
    chosen = np.random.default_rng(seed).choice(valid, size=n, replace=False)
    return Selection(chosen.astype(np.int64), "random", {"budget": n, "seed": seed}, nan_count)


def mcp(probs, budget) -> Selection:
    """MCP (Shen et al., ASE 2020): balanced selection over (top-1, top-2) class-pair buckets
    (docs/methods/fol-and-selection.md#mcp).

    Priority inside a bucket is `p_(2)/p_(1)` (closer to the decision boundary first; ties to the
    lower index). While the remaining budget covers every non-empty bucket, each bucket gives its
    head, buckets in ascending (top-1, top-2) order; the rest is filled with the highest-priority
    current heads. Rows with a NaN probability are excluded.
    """
    probs = np.asarray(probs, dtype=np.float64)
    if probs.ndim != 2 or (probs.size and probs.shape[1] < 2):
        raise WorkbenchError(f"MCP needs an N×K probability matrix with K ≥ 2 (got shape {probs.shape}).",
                             "Pass the softmax probabilities of the pool.")
    order = np.argsort(-probs, axis=1, kind="stable") if probs.size else np.zeros((0, 2), np.int64)
    rows = np.arange(len(probs))
    top1 = probs[rows, order[:, 0]] if len(probs) else np.zeros(0)
    top2 = probs[rows, order[:, 1]] if len(probs) else np.zeros(0)
    with np.errstate(divide="ignore", invalid="ignore"):
        priority = np.where(np.isnan(probs).any(axis=1), np.nan, top2 / top1)
    valid, values, n, nan_count = _prepare(priority, budget, "MCP")
    buckets: dict[tuple[int, int], list[int]] = {}
    for i in valid[np.argsort(-values, kind="stable")]:
        buckets.setdefault((int(order[i, 0]), int(order[i, 1])), []).append(int(i))
    queues = {key: buckets[key] for key in sorted(buckets)}
    chosen: list[int] = []
    while len(chosen) < n:
        heads = [(key, q[0]) for key, q in queues.items() if q]
        remaining = n - len(chosen)
        if remaining >= len(heads):
            for key, i in heads:
                chosen.append(i)
                queues[key].pop(0)
        else:
            best = sorted(heads, key=lambda kh: (-priority[kh[1]], kh[1]))[:remaining]
            chosen.extend(i for _, i in best)
    return Selection(np.asarray(chosen, dtype=np.int64), "mcp", {"budget": n, "buckets": len(buckets)}, nan_count)


# --- the ICSE artifact's KM-ST variant ------------------------------------------------------------------

KMST_LEGACY_BLOCKS = 1000  # the ICSE artifact's k


def kmst_legacy(fol, budget, blocks: int = KMST_LEGACY_BLOCKS, seed: int = 0) -> Selection:
    """KM-ST as the ICSE artifact does it: whole equal-count FOL rank blocks drawn at random
    (docs/methods/fol-and-selection.md#km-st-legacy).

    The valid candidates are ranked by a stable ascending sort of FOL (ties to the lower index) and
    cut into k = min(blocks, N) blocks of w = ⌊N/k⌋ consecutive ranks; block b holds ranks
    [b·w, (b+1)·w). The N − k·w highest ranks (the "tail") belong to no block, as in the artifact.
    The artifact takes ⌊n/w⌋ blocks whole, which gives ⌊n/w⌋·w ≤ n items; rounding is resolved so
    that exactly n unique indices come back:

    - m = min(⌊n/w⌋, k) blocks are taken whole, r = n − m·w items remain;
    - if r > 0 and m < k (then r < w), one more block gives r of its members;
    - if r > 0 and m = k (only when n > k·w), the tail gives them.

    Random draws are pinned: one `numpy.random.default_rng(seed)`; `rng.permutation(k)` orders the
    blocks, the first m are taken whole (in that order, each in ascending rank), then the partial
    draw is `rng.choice(members, r, replace=False)` over the (m+1)-th block of the permutation, or
    over the tail, its members in ascending rank. k < `blocks` only when the pool holds fewer than
    `blocks` candidates (the artifact divides by zero there).
    """
    if int(blocks) != blocks or blocks < 1:
        raise WorkbenchError(f"KM-ST (legacy) needs a positive whole number of blocks (got {blocks}).",
                             f"Use {KMST_LEGACY_BLOCKS}, the artifact's value.")
    valid, values, n, nan_count = _prepare(fol, budget, "KM-ST (legacy)")
    order = valid[np.argsort(values, kind="stable")]
    k = min(int(blocks), order.size)
    width = order.size // k
    full = min(n // width, k)
    rest = n - full * width
    rng = np.random.default_rng(seed)
    permutation = rng.permutation(k)
    parts = [order[b * width:(b + 1) * width] for b in permutation[:full]]
    partial_from = None
    if rest:
        if full < k:
            b = int(permutation[full])
            members, partial_from = order[b * width:(b + 1) * width], f"block {b}"
        else:
            members, partial_from = order[k * width:], "tail"
        parts.append(rng.choice(members, size=rest, replace=False))
    chosen = np.concatenate(parts) if parts else np.zeros(0, np.int64)
    params = {"budget": n, "blocks": int(blocks), "blocks_used": k, "block_size": width, "whole_blocks": full,
              "partial": int(rest), "partial_from": partial_from, "tail": int(order.size - k * width), "seed": seed}
    return Selection(chosen.astype(np.int64), "kmst-legacy", params, nan_count)


# --- coverage-guided baseline ------------------------------------------------------------------------

COVERAGE_FILLS = ("reset", "total")
_BITWISE_COUNT = getattr(np, "bitwise_count", None)  # numpy ≥ 2.0; a byte table otherwise
_BYTE_BITS = np.array([b.bit_count() for b in range(256)], dtype=np.uint8)


def _bits_per_column(words: np.ndarray, mask: np.ndarray | None = None) -> np.ndarray:
    """Set bits of `words & mask` per column of a (words, columns) uint64 array, as int32.

    The loop runs over the few words; each step is one contiguous vector operation over the columns.
    """
    out = np.zeros(words.shape[1], dtype=np.int32)
    buffer = np.empty(words.shape[1], dtype=np.uint64)
    for w in range(words.shape[0]):
        row = words[w] if mask is None else np.bitwise_and(words[w], mask[w], out=buffer)
        if _BITWISE_COUNT is not None:
            out += _BITWISE_COUNT(row)
        else:
            out += _BYTE_BITS[row.view(np.uint8)].reshape(-1, 8).sum(axis=1, dtype=np.int32)
    return out


def _pack_columns(items: np.ndarray) -> np.ndarray:
    """(⌈items/64⌉, rows) uint64: each row's booleans as bits (padded with zeros), one column per row."""
    packed = np.packbits(items, axis=1)
    pad = (-packed.shape[1]) % 8 if packed.shape[1] else 8
    packed = np.pad(packed, ((0, 0), (0, pad)))
    return np.ascontiguousarray(np.ascontiguousarray(packed).view(np.uint64).T)


def coverage_greedy(covers, budget, fill: str = "reset") -> Selection:
    """Greedy additional coverage over a boolean candidates × items matrix (the coverage baseline).

    `covers[i, j]` says whether candidate i covers item j (an NC neuron, a KMNC section, …; see
    `neuron_coverage_items`). Repeatedly the candidate adding the most not-yet-covered items is
    taken, ties to the lower index. Once no remaining candidate adds anything:

    - `fill="reset"` (default): the covered set is emptied and the additional greedy starts again
      on the remaining candidates — the "additional" prioritisation of Rothermel, Untch, Chu and
      Harrold (IEEE TSE 2001). After saturation the rest of the budget thus keeps spreading over
      items instead of piling onto the most popular ones;
    - `fill="total"`: the rest is filled with the candidates covering the most items in total
      (ties to the lower index).

    Candidates covering nothing come last, in index order. Rows of a float matrix holding NaN are
    excluded and counted. Every step recomputes the exact gains (rows packed as bits), but only of
    the candidates that still added something at the previous step: within one round between
    resets a gain never grows, so a candidate at zero stays there. `params` records the number of
    items, how many the selection covers and how many any candidate covers, `saturated_at` (how
    many had been chosen when coverage first stopped growing; None if it never did) and `resets`.
    """
    if fill not in COVERAGE_FILLS:
        raise WorkbenchError(f"Unknown coverage fill {fill!r}.", f"Use one of: {', '.join(COVERAGE_FILLS)}.")
    covers = np.asarray(covers)
    if covers.ndim != 2 or covers.dtype.kind not in "biuf":
        raise WorkbenchError(f"Coverage-greedy needs a candidates × items matrix of booleans (got shape "
                             f"{covers.shape}, dtype {covers.dtype}).",
                             "Build it with neuron_coverage_items, or pass which items each candidate covers.")
    bad = np.isnan(covers).any(axis=1) if covers.dtype.kind == "f" else np.zeros(len(covers), bool)
    valid, _, n, nan_count = _prepare(np.where(bad, np.nan, 0.0), budget, "Coverage-greedy")
    items = covers[valid] != 0
    coverable = items.any(axis=0)
    words = _pack_columns(items[:, coverable])  # items nobody covers never change a gain
    totals = _bits_per_column(words)
    full = np.full(words.shape[0], np.iinfo(np.uint64).max, dtype=np.uint64)
    uncovered = full.copy()
    count = len(valid)
    taken = np.zeros(count, bool)
    chosen: list[int] = []
    # Candidates that may still add coverage in this round: None when a round starts, a boolean
    # mask while most of the pool is left (one pass over all columns is cheaper than gathering),
    # then their indices.
    alive = None
    resets, saturated_at = 0, None
    while len(chosen) < n:
        candidates = None
        if alive is None:  # nothing covered yet: the gains are the totals
            gains = np.where(taken, -1, totals)
        elif alive.dtype == bool:
            gains = _bits_per_column(words, uncovered)
            gains[~alive] = -1
        else:
            candidates = alive
            gains = _bits_per_column(words[:, candidates], uncovered)
        best = int(np.argmax(gains)) if gains.size else -1  # the first maximum: the lowest index
        if best < 0 or gains[best] <= 0:  # nothing adds coverage any more
            saturated_at = len(chosen) if saturated_at is None else saturated_at
            rest = np.flatnonzero(~taken)
            if alive is not None and fill == "reset":
                resets += 1
                uncovered[:], alive = full, None
                continue
            if fill == "total":  # by total coverage, ties (and candidates covering nothing) in index order
                rest = rest[np.argsort(-totals[rest], kind="stable")]
            chosen.extend(int(j) for j in rest[:n - len(chosen)])
            break
        i = best if candidates is None else int(candidates[best])
        taken[i] = True
        chosen.append(i)
        uncovered &= ~words[:, i]
        keep = gains > 0
        keep[best] = False
        if candidates is not None:
            alive = candidates[keep]
        elif np.count_nonzero(keep) * 8 >= count:
            alive = keep
        else:
            alive = np.flatnonzero(keep)
    picked = np.asarray(chosen, dtype=np.int64)
    union = int(np.count_nonzero(items[picked].any(axis=0))) if len(picked) else 0
    params = {"budget": n, "fill": fill, "items": int(items.shape[1]), "covered_items": union,
              "coverable_items": int(np.count_nonzero(coverable)), "saturated_at": saturated_at, "resets": resets}
    return Selection(valid[picked].astype(np.int64), "coverage-greedy", params, nan_count)


def neuron_coverage_items(ctx, model, layer, images, threshold: float = 0.0, batch_size: int = 256,
                          point: str = "post", scaling: str = "layer_elements") -> np.ndarray:
    """(N, neurons) bool: which NC neurons each image covers, for `coverage_greedy`.

    The neuron definition is our NC criterion's (`workbench.core.coverage.neuron.NC`,
    docs/methods/classic-criteria.md#nc): per input and layer the values are min-max scaled (`scaling`,
    default the whole layer tensor, then channel means for conv layers) and a neuron is covered when
    its scaled value exceeds `threshold`; an input whose layer is constant covers nothing there.
    `layer` is a layer name or a list of them (neurons numbered in that order); activations are
    taken after the layer's activation function (`point="post"`) by default. The default threshold
    0 marks the neurons active above the layer's minimum (DeepXplore's t = 0); the coverage reports'
    NC uses 0.75. `images` are N×C×H×W in [0, 1] (or a `Split`); the model must be in eval mode.
    """
    from workbench.core.coverage.neuron import NC
    from workbench.core.data.dataset import Split, as_image_array
    from workbench.core.models.activations import NeuronDefinition, stream_activations
    from workbench.core.models.layers import layer_catalogue
    from workbench.core.robustness.scores import check_eval, torch_module

    module = torch_module(model)
    check_eval(module)
    if isinstance(images, Split):
        split = images
    else:
        images = as_image_array(np.asarray(images), "the candidate images")
        split = Split(images, np.zeros(len(images), np.int64))
    if len(split) == 0:
        raise WorkbenchError("There are no candidate images to measure coverage on.", "Generate candidates first.")
    names = [layer] if isinstance(layer, str) else list(layer)
    if not names:
        raise WorkbenchError("No layer was given for neuron coverage.", "Name one layer or several.")
    catalogue = layer_catalogue(module, split.image_shape)
    shapes = {info.name: tuple(info.output_shape) for info in catalogue}
    missing = [name for name in names if name not in shapes]
    if missing:
        raise WorkbenchError(f"The model has no layer {missing[0]!r}.", f"Valid layers: {', '.join(shapes)}.")
    nc = NC(threshold=threshold, scaling=scaling, layers=names, conv_neuron="channel-mean")
    definitions = {name: NeuronDefinition(name, point, "element") for name in names}
    out = None
    for start, acts, _ in stream_activations(ctx, module, split, list(definitions.values()), split.image_shape,
                                             batch_size):
        ctx.check()
        raw = {name: acts[d].reshape((len(acts[d]),) + shapes[name]) for name, d in definitions.items()}
        rows = nc.profile(raw)
        if out is None:
            out = np.zeros((len(split), rows.shape[1]), dtype=bool)
        out[start:start + len(rows)] = rows
    return out


# --- the registry --------------------------------------------------------------------------------------

#: Every strategy by name, with a one-line description for menus and `--help`.
STRATEGIES = {
    "be-st": "BE-ST: the lowest and the highest FOL, half each (RobOT)",
    "km-st": "KM-ST: equal quotas from k equal-width FOL sections, default k = 4 (RobOT)",
    "deepgini": "DeepGini: the highest Gini impurity 1 − Σp² (most uncertain first)",
    "random": "Random: uniform without replacement",
    "mcp": "MCP: balanced over (top-1, top-2) class-pair buckets, nearest the boundary first",
    "coverage-greedy": "Coverage-guided: greedy additional neuron coverage, restarted once saturated",
    "kmst-legacy": "KM-ST as in the ICSE artifact: whole blocks drawn at random from 1,000 equal-count FOL rank blocks",
}
#: The FOL kinds a FOL strategy can rank by; one kind for the whole pool, never mixed
#: (docs/methods/fol-and-selection.md#grad-l2).
FOL_KINDS = ("fol_linf", "grad_l2", "fosc_l2")
#: Score keys whose arrays run over the pool (their lengths must agree).
POOL_KEYS = FOL_KINDS + ("deepgini", "probs", "covers", "margin", "least_confidence", "entropy")
_OPTIONS = {"be-st": {"compat", "fol_kind"}, "km-st": {"k", "lo", "fol_kind"}, "kmst-legacy": {"blocks", "fol_kind"},
            "deepgini": set(), "random": set(), "mcp": set(), "coverage-greedy": {"fill"}}


def _pool_size(scores) -> int | None:
    sizes = {key: len(np.asarray(scores[key])) for key in POOL_KEYS if scores.get(key) is not None}
    if scores.get("pool_size") is not None:
        sizes["pool_size"] = int(scores["pool_size"])
    if len(set(sizes.values())) > 1:
        listed = ", ".join(f"{k} {v}" for k, v in sizes.items())
        raise WorkbenchError(f"The scores describe pools of different sizes ({listed}).",
                             "Pass the scores of one candidate pool, computed together.")
    return next(iter(sizes.values()), None)


def _need(scores, key: str, strategy: str):
    if scores.get(key) is None:
        held = ", ".join(k for k in scores if scores.get(k) is not None) or "nothing"
        raise WorkbenchError(f"Strategy {strategy!r} needs the pool's {key!r} scores, but they hold {held}.",
                             "Score the pool first: score_inputs gives fol_linf (with x0 and eps), grad_l2 and "
                             "deepgini; the softmax gives probs; neuron_coverage_items gives covers.")
    return scores[key]


def _plain_budget(budget):
    if isinstance(budget, (np.integer, np.floating)):
        return budget.item()
    return budget if isinstance(budget, (int, float, str)) else str(budget)


def select(strategy: str, scores: dict, budget, seed: int = 0, **options) -> Selection:
    """Run a strategy of `STRATEGIES` by name on a pool's scores.

    `scores` maps score names to arrays over the pool: `fol_linf` (FOSC L∞, the default for BE-ST,
    KM-ST and KM-ST legacy; `fol_kind="grad_l2"` or `"fosc_l2"` ranks by that kind instead — one kind
    for the whole pool, never mixed), `deepgini` (or `probs`, from which ξ is computed), `probs`
    (N × K softmax, MCP), `covers` (N × items bool, coverage-greedy); `pool_size` may stand in for
    them for random selection, which draws from the whole pool. The output of `score_inputs` can be
    passed as it is. Options: `compat` (BE-ST), `k` and `lo` (KM-ST), `blocks` (KM-ST legacy),
    `fill` (coverage-greedy). The result's `params` record the strategy, the budget as given and as
    an absolute count, the seed, the FOL kind (None where no FOL is used) and the pool size; the
    seed is recorded for every strategy but only random, KM-ST and KM-ST legacy draw from it.
    """
    key = str(strategy).lower()
    if key not in STRATEGIES:
        raise WorkbenchError(f"Unknown selection strategy {strategy!r}.",
                             f"Known strategies: {', '.join(STRATEGIES)}.")
    unknown = sorted(set(options) - _OPTIONS[key])
    if unknown:
        allowed = ", ".join(sorted(_OPTIONS[key])) or "none"
        raise WorkbenchError(f"Strategy {key!r} has no option(s) {', '.join(unknown)}.", f"Its options: {allowed}.")
    if not hasattr(scores, "get"):
        raise WorkbenchError("The scores must be a dict of arrays over the pool.",
                             "Pass e.g. {'fol_linf': ..., 'deepgini': ..., 'probs': ...}.")
    pool = _pool_size(scores)
    fol_kind = None
    if key in ("be-st", "km-st", "kmst-legacy"):
        fol_kind = options.pop("fol_kind", "fol_linf")
        if fol_kind not in FOL_KINDS:
            raise WorkbenchError(f"Unknown FOL kind {fol_kind!r}.", f"Use one of: {', '.join(FOL_KINDS)}.")
        fol = _need(scores, fol_kind, key)
        if key == "be-st":
            result = be_st(fol, budget, **options)
        elif key == "km-st":
            result = km_st(fol, budget, seed=seed, **options)
        else:
            result = kmst_legacy(fol, budget, seed=seed, **options)
    elif key == "deepgini":
        if scores.get("deepgini") is None and scores.get("probs") is not None:
            from workbench.core.robustness.scores import deepgini

            result = deepgini_top(deepgini(np.asarray(scores["probs"], dtype=np.float64)), budget)
            result.params["from"] = "probs"
        else:
            result = deepgini_top(_need(scores, "deepgini", key), budget)
    elif key == "random":
        if pool is None:
            raise WorkbenchError("Random selection needs the pool's size, but the scores hold no array over the pool.",
                                 "Pass any score of the pool, or pool_size.")
        result = random_select(pool, budget, seed=seed)
    elif key == "mcp":
        result = mcp(_need(scores, "probs", key), budget)
    else:
        result = coverage_greedy(_need(scores, "covers", key), budget, **options)
    result.params = {"strategy": key, "budget_given": _plain_budget(budget), **result.params, "seed": seed,
                     "fol_kind": fol_kind, "pool_size": pool}
    return result

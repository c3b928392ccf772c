"""FOL-guided fuzzing, RobOT's test generator.

Method: docs/methods/fuzzing-and-retraining.md#the-fuzzer.

From each seed x0 a FIFO queue of mutants grows by raw gradient-ascent steps on
`obj(x) = ‖∇_x J(x, ŷ)‖₂ − p_ŷ(x)` (ŷ = the model's prediction on x0), two successive mutations per
popped input. A mutant that raises the seed's folMAX while `‖x − x0‖₂/‖x0‖₂ < max_dist` is
enqueued; one whose prediction differs from ŷ inside that bound is recorded as a test with the
seed's ground-truth label. `∇_x obj` needs double backprop, hence eval mode.

`fuzz` runs all seeds as one batch (each with its own queue, folMAX and random stream) under the
workbench's budgets — 300 s, 200 mutations per seed, optionally a test count — and returns a
`FuzzResult` carrying grad-L2 and FOL∞ for every test. How and why it departs from the RobOT code
(recording rule, seed filter, optional ε-ball projection, stop reasons) is on the method page
(#differences-from-the-robot-code); `compat=True` restores the original's recording rule and seed
filter.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field

import numpy as np

from workbench.core.errors import WorkbenchError
from workbench.core.robustness.attacks import check_eps, project
from workbench.core.robustness.scores import (
    GRAD_L2_LABEL,
    check_eval,
    check_finite_logits,
    check_loss_mode,
    fol_linf,
    grad_l2,
    per_input_loss,
    torch_module,
)
from workbench.core.sampling import seeded_sample

#: A seed is "static" (dropped) when ‖∇_x J(x0, y) + 1e-20‖₂ is at most this.
STATIC_GRAD_THRESHOLD = 1e-3
NORM_EPS = 1e-20  # inside the square root of the objective's norm, so it is differentiable at 0
BALL_TOL = 1e-6
STOP_REASONS = ("exhausted", "mutations", "time", "max_tests")
ATTACK_NAME = "fuzz"  # the `attack` of fuzzer tests when they join a candidate pool
PARTIAL_INTERVAL_S = 0.25

DOUBLE_BACKPROP_HINT = ("The model must support double backprop: avoid in-place ops and custom autograd "
                        "functions without a double backward (e.g. marked @once_differentiable).")


@dataclass
class FuzzResult:
    """The fuzzer's tests (each a label flip of its seed) with both FOL kinds, and how they were made."""

    images: np.ndarray                # N×C×H×W float32 in [0, 1]
    labels: np.ndarray                # ground truth of the seed, int64
    seed_index: np.ndarray            # index of the seed in the split
    predicted_seed_label: np.ndarray  # ŷ, the model's label for the seed
    adversarial_label: np.ndarray     # argmax f(x) when the test was recorded (≠ ŷ)
    grad_l2: np.ndarray               # ‖∇_x J(x, ŷ)‖₂, the original's "fol"
    fol_linf: np.ndarray              # FOSC L∞ with (x0, y, ε)
    inside_ball: np.ndarray           # ‖x − x0‖∞ ≤ ε + 1e-6
    dist_l2: np.ndarray               # ‖x − x0‖₂ / ‖x0‖₂
    mutation: np.ndarray              # the seed's mutation count (1-based) at which it was recorded
    params: dict = field(default_factory=dict)

    ARRAY_KEYS = ("seed_index", "predicted_seed_label", "adversarial_label", "grad_l2", "fol_linf",
                  "inside_ball", "dist_l2", "mutation")

    def __len__(self) -> int:
        return len(self.labels)

    def to_arrays(self) -> dict[str, np.ndarray]:
        """Arrays for a `testset` artifact: `x`, `y` (what test-set readers take), the per-test fields,
        and `source_index`/`attack` so the tests can join a candidate pool."""
        out = {"x": self.images, "y": self.labels}
        out.update({k: getattr(self, k) for k in self.ARRAY_KEYS})
        out["source_index"] = self.seed_index
        out["attack"] = np.full(len(self), ATTACK_NAME)
        return out

    @classmethod
    def from_arrays(cls, arrays, params: dict | None = None) -> FuzzResult:
        """Back from `to_arrays` output (or an artifact read back); a missing array is an error."""
        missing = [k for k in ("x", "y", *cls.ARRAY_KEYS) if k not in arrays]
        if missing:
            raise WorkbenchError(f"The stored fuzzing result lacks {', '.join(missing)}.",
                                 "Run the fuzzer again to regenerate it.")
        dtypes = {"seed_index": np.int64, "predicted_seed_label": np.int64, "adversarial_label": np.int64,
                  "grad_l2": np.float32, "fol_linf": np.float32, "inside_ball": bool, "dist_l2": np.float32,
                  "mutation": np.int64}
        n = len(arrays["y"])
        uneven = [k for k in ("x", *cls.ARRAY_KEYS) if np.ndim(arrays[k]) == 0 or len(arrays[k]) != n]
        if uneven or np.ndim(arrays["x"]) != 4:
            raise WorkbenchError(f"The stored fuzzing result's arrays do not fit together "
                                 f"({', '.join(uneven) or 'x'} against {n} labels).",
                                 "Run the fuzzer again to regenerate it.")
        return cls(np.asarray(arrays["x"], dtype=np.float32), np.asarray(arrays["y"], dtype=np.int64),
                   **{k: np.asarray(arrays[k], dtype=dtypes[k]) for k in cls.ARRAY_KEYS}, params=dict(params or {}))


# --- the objective and its gradient -------------------------------------------------------------------

def _model_error(exc: Exception) -> WorkbenchError:
    """A gradient failure of the model, as a WorkbenchError that says what to change."""
    import torch

    if isinstance(exc, torch.cuda.OutOfMemoryError):
        return WorkbenchError("The device ran out of memory while fuzzing.",
                              "Lower the batch size or use fewer seeds.", details=str(exc))
    return WorkbenchError("Fuzzing could not differentiate the model (it needs double backprop).",
                          DOUBLE_BACKPROP_HINT, details=str(exc))


def objective_gradient(model, x, yhat, loss_mode: str = "logits"):
    """(∇_x obj, ‖∇_x J(x, ŷ)‖₂, argmax f(x)) per row for `obj = ‖∇_x J(x, ŷ)‖₂ − p_ŷ(x)`.

    One double backprop for the whole batch: the inner gradient of Σ_i J(x_i, ŷ_i) is taken with
    `create_graph=True` (rows independent in eval mode), the norm is `√(Σg² + 1e-20)`, and Σ_i obj_i
    is differentiated again. A model whose gradient graph cannot be differentiated is refused.
    """
    import torch

    module = torch_module(model)
    check_eval(module)
    x = x.detach().clone().requires_grad_(True)
    try:
        with torch.enable_grad():
            logits = module(x)
            check_finite_logits(logits)
            loss = per_input_loss(logits, yhat, loss_mode).sum()
            (g,) = torch.autograd.grad(loss, x, create_graph=True)
            if not g.requires_grad:
                raise WorkbenchError("The model's input gradient is not differentiable (no double backprop).",
                                     DOUBLE_BACKPROP_HINT)
            norm = torch.sqrt(g.flatten(1).pow(2).sum(1) + NORM_EPS)
            p = torch.softmax(logits, dim=1).gather(1, yhat[:, None])[:, 0]
            (grad_obj,) = torch.autograd.grad((norm - p).sum(), x)
    except RuntimeError as exc:
        raise _model_error(exc) from exc
    if not bool(torch.isfinite(grad_obj).all()):
        raise WorkbenchError("The gradient of the fuzzing objective is NaN or infinite.",
                             "Check the model for operations without a finite second derivative. "
                             + DOUBLE_BACKPROP_HINT)
    return grad_obj.detach(), grad_l2(g.detach()), logits.detach().argmax(1)


def check_double_backprop(model, x, yhat, loss_mode: str = "logits") -> None:
    """Refuse a model whose input gradient is not differentiable w.r.t. the input, before fuzzing.

    Autograd only walks paths to x, so a layer marked `@once_differentiable` (its error node hangs off
    a detached copy) or a backward computed outside autograd would silently drop the gradient-norm
    term of the objective instead of failing; this looks for both once, on a few seeds.
    """
    import torch

    module = torch_module(model)
    x = x.detach().clone().requires_grad_(True)
    try:
        with torch.enable_grad():
            logits = module(x)
            check_finite_logits(logits)
            (g,) = torch.autograd.grad(per_input_loss(logits, yhat, loss_mode).sum(), x, create_graph=True)
            broken = _error_node(g.grad_fn)
            if broken is None and g.requires_grad:
                (dg,) = torch.autograd.grad(g.pow(2).sum(), x, allow_unused=True)
                broken = "the input gradient does not depend on the input" if dg is None else None
            elif broken is None:
                broken = "the input gradient has no graph"
    except RuntimeError as exc:
        raise _model_error(exc) from exc
    if broken is not None:
        raise WorkbenchError(f"The model does not support double backprop ({broken}).", DOUBLE_BACKPROP_HINT)


def _error_node(fn, limit: int = 100_000):
    """The name of a node of the gradient graph that raises when differentiated, if there is one."""
    seen, stack = set(), [fn]
    while stack and len(seen) < limit:
        node = stack.pop()
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        name = node.name()
        if "Error" in name:
            return f"a layer that can be differentiated only once: {name}"
        stack.extend(next_fn for next_fn, _ in node.next_functions)
    return None


def _first_order(module, x, y, loss_mode):
    """(∇_x J(x, y), logits) with the model's failures turned into WorkbenchErrors."""
    import torch

    x = x.detach().clone().requires_grad_(True)
    try:
        with torch.enable_grad():
            logits = module(x)
            check_finite_logits(logits)
            (g,) = torch.autograd.grad(per_input_loss(logits, y, loss_mode).sum(), x)
    except RuntimeError as exc:
        raise _model_error(exc) from exc
    return g.detach(), logits.detach()


# --- the fuzzer -------------------------------------------------------------------------------------------

class _Seed:
    """One seed's state: its clean input, labels, queue, folMAX, mutation count and u-stream."""

    __slots__ = ("count", "folmax", "index", "pos", "queue", "rng", "state", "x0", "x0_norm", "y", "yhat")

    def __init__(self, pos, index, x0, y, yhat, seed):
        self.pos, self.index, self.x0, self.y, self.yhat = pos, index, x0, y, yhat
        self.x0_norm = float(x0.flatten().norm())
        self.rng = np.random.default_rng([int(seed), int(index)])
        self.queue = deque([x0])
        self.folmax = 0.0
        self.count = 0
        self.state = "live"  # → "exhausted" (queue ran empty) or "capped" (mutation budget)


class _Fuzzer:
    def __init__(self, ctx, module, *, lr, max_dist, cap, time_budget_s, max_tests, project_linf, eps, compat,
                 batch_size, loss_mode, started):
        self.ctx, self.module = ctx, module
        self.lr, self.max_dist, self.cap = lr, max_dist, cap
        self.time_budget_s, self.max_tests = time_budget_s, max_tests
        self.project_linf, self.eps, self.compat = project_linf, eps, compat
        self.batch_size, self.loss_mode, self.started = batch_size, loss_mode, started
        self.tests: list[dict] = []
        self.n_tests = 0
        self.mutations = 0
        self.enqueued = 0
        self.enqueued_dist_max = 0.0
        self.enqueued_linf_max = 0.0
        self.stop_reason: str | None = None
        self.seeds: list[_Seed] = []
        self._last_report = -1.0

    # budgets and reporting
    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def budget_hit(self) -> bool:
        if self.max_tests is not None and self.n_tests >= self.max_tests:
            self.stop_reason = "max_tests"
        elif self.time_budget_s is not None and self.elapsed() >= self.time_budget_s:
            self.stop_reason = "time"
        return self.stop_reason is not None

    def report(self, force: bool = False) -> None:
        self.ctx.check()
        now = self.elapsed()
        if not force and now - self._last_report < PARTIAL_INTERVAL_S:
            return
        self._last_report = now
        live = sum(s.state == "live" for s in self.seeds)
        if self.cap is not None:
            done = sum(self.cap if s.state != "live" else s.count for s in self.seeds)
            total = self.cap * len(self.seeds)
        else:
            done, total = len(self.seeds) - live, len(self.seeds)
        self.ctx.progress(done, total, f"fuzzing: {self.n_tests} tests")
        self.ctx.partial({"stage": "fuzzing", "tests": self.n_tests, "seeds_active": live,
                          "seeds_total": len(self.seeds), "mutations": self.mutations, "elapsed_s": now})

    # one mutation
    def step(self, x, grad, seeds, x0):
        import torch

        u = torch.tensor([s.rng.uniform(0.5, 1.5) for s in seeds], dtype=x.dtype, device=x.device)
        x = torch.clamp(x + self.lr * u.view(-1, *([1] * (x.dim() - 1))) * grad, 0.0, 1.0)
        return project(x, x0, self.eps) if self.project_linf else x

    def book(self, seeds, x, x0, fol, pred, second: bool) -> None:
        """Enqueue/record the mutants `x` of `seeds` (one row each) and count the mutation.

        A seed reaching its mutation budget is "capped" only if the budget cut something off (a
        pending second mutation or queue entry); otherwise it ran out on its own, "exhausted".
        """
        import torch

        diff = (x - x0).flatten(1)
        x0_norm = torch.tensor([s.x0_norm for s in seeds], dtype=x.dtype, device=x.device)
        dist_abs = diff.norm(dim=1)
        dist = torch.where(x0_norm > 0, dist_abs / x0_norm.clamp_min(1e-30),
                           torch.where(dist_abs > 0, torch.full_like(dist_abs, float("inf")), torch.zeros_like(dist_abs)))
        linf = diff.abs().max(dim=1).values
        inside = linf <= self.eps + BALL_TOL
        in_bound = dist < self.max_dist
        if self.project_linf:
            in_bound = in_bound & inside
        fol_np, pred_np = fol.cpu().numpy(), pred.cpu().numpy()
        bound_np, dist_np, linf_np, inside_np = (t.cpu().numpy() for t in (in_bound, dist, linf, inside))
        rec_rows = []
        for r, s in enumerate(seeds):
            s.count += 1
            self.mutations += 1
            wants_queue = bool(fol_np[r] > s.folmax and bound_np[r])
            if wants_queue:
                s.folmax = float(fol_np[r])
                if self.cap is None or s.count < self.cap:  # a capped seed pops nothing more
                    s.queue.append(x[r].detach().clone())
                    self.enqueued += 1
                    self.enqueued_dist_max = max(self.enqueued_dist_max, float(dist_np[r]))
                    self.enqueued_linf_max = max(self.enqueued_linf_max, float(linf_np[r]))
            if pred_np[r] != s.yhat and (bound_np[r] or self.compat):
                rec_rows.append(r)
            if self.cap is not None and s.count >= self.cap:
                s.state = "capped" if (s.queue or wants_queue or not second) else "exhausted"
                s.queue.clear()
        if rec_rows:
            rows = np.asarray(rec_rows)
            self.tests.append({
                "x": x[torch.as_tensor(rows, device=x.device)].detach().cpu().numpy(),
                "pos": np.array([seeds[r].pos for r in rec_rows], dtype=np.int64),
                "mutation": np.array([seeds[r].count for r in rec_rows], dtype=np.int64),
                "grad_l2": fol_np[rows], "adversarial_label": pred_np[rows].astype(np.int64),
                "dist_l2": dist_np[rows], "inside_ball": inside_np[rows]})
            self.n_tests += len(rec_rows)

    def pop_and_mutate(self, seeds) -> None:
        """Pop each seed's queue head and apply the two successive mutations."""
        import torch

        device = seeds[0].x0.device
        x = torch.stack([s.queue.popleft() for s in seeds])
        x0 = torch.stack([s.x0 for s in seeds])
        yhat = torch.tensor([s.yhat for s in seeds], dtype=torch.long, device=device)
        grad, _, _ = objective_gradient(self.module, x, yhat, self.loss_mode)
        x1 = self.step(x, grad, seeds, x0)
        # the objective at x1 also gives its fol and label, and the second mutation's direction
        grad1, fol1, pred1 = objective_gradient(self.module, x1, yhat, self.loss_mode)
        self.book(seeds, x1, x0, fol1, pred1, second=False)
        rows = [r for r, s in enumerate(seeds) if s.state == "live"]
        if not rows:
            return
        idx = torch.as_tensor(rows, device=device)
        cont = [seeds[r] for r in rows]
        x2 = self.step(x1[idx], grad1[idx], cont, x0[idx])
        g2, logits2 = _first_order(self.module, x2, yhat[idx], self.loss_mode)
        self.book(cont, x2, x0[idx], grad_l2(g2), logits2.argmax(1), second=True)

    def run(self, seeds) -> bool:
        """Fuzz `seeds` together until their queues are empty or capped; False if a global budget hit."""
        while True:
            for s in seeds:
                if s.state == "live" and not s.queue:
                    s.state = "exhausted"
            active = [s for s in seeds if s.state == "live"]
            if not active:
                return True
            for start in range(0, len(active), self.batch_size):
                if self.budget_hit():
                    return False
                self.pop_and_mutate(active[start:start + self.batch_size])
                self.report()


def _check_positive(name, value, integer=False, allow_none=False):
    if value is None and allow_none:
        return None
    try:
        ok = float(value) > 0 and np.isfinite(float(value)) and (not integer or int(value) == value)
    except (TypeError, ValueError):
        ok = False
    if not ok:
        kind = "a positive whole number" if integer else "a positive number"
        raise WorkbenchError(f"The fuzzing setting {name}={value!r} is not {kind}.",
                             f"Give {name} as {kind}" + (" or leave it unset." if allow_none else "."))
    return int(value) if integer else float(value)


def _select_seeds(split, n_seeds, seed, seed_indices):
    if seed_indices is not None:
        idx = np.asarray(seed_indices, dtype=np.int64).reshape(-1)
        if idx.size == 0:
            raise WorkbenchError("No seed inputs were given.", "Give at least one index, or leave seed_indices unset.")
        if idx.min() < 0 or idx.max() >= len(split):
            raise WorkbenchError(f"Seed indices must lie in 0..{len(split) - 1}.", "Give indices into the split.")
        if len(np.unique(idx)) != len(idx):
            raise WorkbenchError("A seed index is given twice.", "Give each seed input once.")
        return idx
    if len(split) == 0:
        raise WorkbenchError("The split holds no inputs to fuzz.", "Choose a split with images.")
    return seeded_sample(len(split), min(n_seeds, len(split)), seed, sort=False, always=True).astype(np.int64)


def fuzz(ctx, model, split, *, eps: float, n_seeds: int = 1000, seed: int = 0, lr: float = 0.1,
         max_dist: float = 0.5, mutations_per_seed: int | None = 200, time_budget_s: float | None = 300.0,
         max_tests: int | None = None, project_linf: bool = False, compat: bool = False, batch_size: int = 256,
         seed_indices=None, per_seed: bool = False, loss_mode: str = "logits") -> FuzzResult:
    """Run RobOT's FOL-guided fuzzer from seeds of `split` on `ctx.device`; returns its tests.

    `eps` is the dataset's L∞ budget: it scores FOL∞ for every test and bounds the projection when
    `project_linf` is on. Seeds are `n_seeds` inputs drawn with `default_rng(seed)` (or `seed_indices`),
    filtered (docs/methods/fuzzing-and-retraining.md#seeds). `mutations_per_seed`, `time_budget_s` and `max_tests` bound the run (None:
    no bound); `compat` restores the original's recording rule and seed filter; `per_seed` fuzzes the
    seeds one at a time (same tests, for checking the batching).
    """
    import torch

    started = time.monotonic()
    eps = check_eps(eps)
    check_loss_mode(loss_mode)
    n_seeds = _check_positive("n_seeds", n_seeds, integer=True)
    lr = _check_positive("lr", lr)
    max_dist = _check_positive("max_dist", max_dist)
    cap = _check_positive("mutations_per_seed", mutations_per_seed, integer=True, allow_none=True)
    time_budget_s = _check_positive("time_budget_s", time_budget_s, allow_none=True)
    max_tests = _check_positive("max_tests", max_tests, integer=True, allow_none=True)
    batch_size = _check_positive("batch_size", batch_size, integer=True)
    if not isinstance(seed, (int, np.integer)) or seed < 0:
        raise WorkbenchError(f"The seed {seed!r} is not a non-negative whole number.", "Give e.g. seed=0.")
    module = torch_module(model)
    check_eval(module)
    device = ctx.device
    module.to(device)
    # inputs take the model's floating dtype (a float64 model fuzzes in float64; results are float32)
    dtype = next((p.dtype for p in module.parameters() if p.is_floating_point()), torch.float32)

    # seeds: drop those with a vanishing gradient and (unless compat) the misclassified ones
    drawn = _select_seeds(split, n_seeds, seed, seed_indices)
    labels_all = np.asarray(split.labels, dtype=np.int64)
    static = np.zeros(len(drawn), dtype=bool)
    predicted = np.zeros(len(drawn), dtype=np.int64)
    ctx.progress(0, len(drawn), "fuzzing: checking seeds")
    for start in range(0, len(drawn), batch_size):
        ctx.check()
        part = drawn[start:start + batch_size]
        xb = split.tensor(part).to(device, dtype)
        yb = torch.from_numpy(labels_all[part]).to(device)
        g, logits = _first_order(module, xb, yb, loss_mode)
        static[start:start + len(part)] = (grad_l2(g + 1e-20) <= STATIC_GRAD_THRESHOLD).cpu().numpy()
        predicted[start:start + len(part)] = logits.argmax(1).cpu().numpy()
    correct = predicted == labels_all[drawn]
    keep = ~static & (correct | compat)
    dropped_static = int(static.sum())
    dropped_misclassified = int((~static & ~correct).sum()) if not compat else 0
    if not keep.any():
        why = [f"{dropped_static} have a vanishing loss gradient (‖∇J‖₂ ≤ {STATIC_GRAD_THRESHOLD:g})"]
        if not compat:
            why.append(f"{dropped_misclassified} are misclassified")
        raise WorkbenchError(f"No usable seed among the {len(drawn)} drawn: " + " and ".join(why) + ".",
                             "Use more seeds, another split, or a model that classifies the seeds correctly "
                             "(compat mode also keeps misclassified seeds).")

    fuzzer = _Fuzzer(ctx, module, lr=lr, max_dist=max_dist, cap=cap, time_budget_s=time_budget_s,
                     max_tests=max_tests, project_linf=project_linf, eps=eps, compat=compat,
                     batch_size=batch_size, loss_mode=loss_mode, started=started)
    used = drawn[keep]
    x0_all = split.tensor(used).to(device, dtype)
    yhat_used = torch.from_numpy(predicted[keep][:8]).to(device)
    check_double_backprop(module, x0_all[:8], yhat_used, loss_mode)
    fuzzer.seeds = [_Seed(pos, int(index), x0_all[pos], int(labels_all[index]), int(yhat), seed)
                    for pos, (index, yhat) in enumerate(zip(used, predicted[keep]))]
    fuzzer.report(force=True)
    groups = [[s] for s in fuzzer.seeds] if per_seed else [fuzzer.seeds]
    for group in groups:
        if not fuzzer.run(group):
            break
    if fuzzer.stop_reason is None:
        fuzzer.stop_reason = "mutations" if any(s.state == "capped" for s in fuzzer.seeds) else "exhausted"
    fuzzer.report(force=True)
    result = _collect(fuzzer, split, used, labels_all, module, device, dtype, eps, loss_mode, batch_size)
    result.params.update({
        "eps": eps, "n_seeds": n_seeds, "seed": int(seed), "lr": lr, "max_dist": max_dist,
        "mutations_per_seed": cap, "time_budget_s": time_budget_s, "max_tests": max_tests,
        "project_linf": bool(project_linf), "compat": bool(compat), "batch_size": batch_size,
        "seed_indices_given": seed_indices is not None, "per_seed": bool(per_seed), "loss_mode": loss_mode,
        "grad_l2_label": GRAD_L2_LABEL, "device": str(device),
        "seeds_drawn": len(drawn), "seeds_used": len(used), "dropped_static": dropped_static,
        "dropped_misclassified": dropped_misclassified,
        "seeds_capped": sum(s.state == "capped" for s in fuzzer.seeds),
        "seeds_exhausted": sum(s.state == "exhausted" for s in fuzzer.seeds),
        "stop_reason": fuzzer.stop_reason, "elapsed_s": time.monotonic() - started,
        "mutations_total": fuzzer.mutations, "enqueued": fuzzer.enqueued,
        "enqueued_dist_max": fuzzer.enqueued_dist_max, "enqueued_linf_max": fuzzer.enqueued_linf_max,
        "tests_found": fuzzer.n_tests, "tests": len(result)})
    return result


def _collect(fuzzer, split, used, labels_all, module, device, dtype, eps, loss_mode, batch_size) -> FuzzResult:
    """The recorded tests in seed order (then mutation), truncated to max_tests, with FOL∞ added."""
    import torch

    shape = (0,) + tuple(split.image_shape)
    if fuzzer.tests:
        parts = {k: np.concatenate([t[k] for t in fuzzer.tests]) for k in fuzzer.tests[0]}
    else:
        parts = {"x": np.zeros(shape, np.float32), "pos": np.zeros(0, np.int64), "mutation": np.zeros(0, np.int64),
                 "grad_l2": np.zeros(0, np.float32), "adversarial_label": np.zeros(0, np.int64),
                 "dist_l2": np.zeros(0, np.float32), "inside_ball": np.zeros(0, bool)}
    if fuzzer.max_tests is not None:
        parts = {k: v[:fuzzer.max_tests] for k, v in parts.items()}  # in the order they were found
    order = np.lexsort((parts["mutation"], parts["pos"]))
    parts = {k: v[order] for k, v in parts.items()}
    seed_index = used[parts["pos"]]
    labels = labels_all[seed_index]
    predicted_seed = np.array([fuzzer.seeds[p].yhat for p in parts["pos"]], dtype=np.int64)
    fol = np.zeros(len(labels), dtype=np.float32)
    for start in range(0, len(labels), batch_size):
        fuzzer.ctx.check()
        xb = torch.from_numpy(parts["x"][start:start + batch_size]).to(device, dtype)
        x0b = split.tensor(seed_index[start:start + batch_size]).to(device, dtype)
        yb = torch.from_numpy(labels[start:start + batch_size]).to(device)
        g, _ = _first_order(module, xb, yb, loss_mode)
        fol[start:start + len(yb)] = fol_linf(g, xb, x0b, eps).cpu().numpy()
    return FuzzResult(parts["x"].astype(np.float32), labels.astype(np.int64), seed_index.astype(np.int64),
                      predicted_seed, parts["adversarial_label"].astype(np.int64),
                      parts["grad_l2"].astype(np.float32), fol, parts["inside_ball"].astype(bool),
                      parts["dist_l2"].astype(np.float32), parts["mutation"].astype(np.int64))

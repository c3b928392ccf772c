"""FOL-guided fuzzing (docs/methods/fuzzing-and-retraining.md#the-fuzzer): the recording rule and the distance bound,
both FOL kinds, the double-backprop gradient, batching and seeding, budgets, refusals and storage."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
from torch import nn
from torch.autograd.function import once_differentiable

from workbench.core.data.dataset import Split
from workbench.core.errors import Cancelled, WorkbenchError
from workbench.core.execution.jobs import JobContext
from workbench.core.robustness import fuzzing as F
from workbench.core.robustness.scores import fol_linf, grad_l2, input_gradients

EPS = 0.3


def _run(model, split, **kw):
    kw.setdefault("eps", EPS)
    kw.setdefault("n_seeds", 30)
    kw.setdefault("mutations_per_seed", 20)
    return F.fuzz(JobContext("cpu"), model, split, **kw)


def _x0(split, result):
    return split.numpy(result.seed_index)


def _flat_norm(a):
    return np.linalg.norm(a.reshape(len(a), -1), axis=1)


def _predict(model, images):
    module = getattr(model, "module", model)
    dtype = next(module.parameters()).dtype
    with torch.no_grad():
        return module(torch.from_numpy(images).to(dtype)).argmax(1).numpy()


# --- the recording rule, the bound and both FOL kinds ------------------------------------------------

def test_tests_flip_the_seed_label_inside_the_bound(digits_model, digits):
    split = digits.split("train")
    r = _run(digits_model, split)
    p = r.params
    assert len(r) > 0 and p["tests"] == len(r) and p["seeds_used"] > 0 and p["enqueued"] > 0
    assert p["seeds_used"] + p["dropped_static"] + p["dropped_misclassified"] == p["seeds_drawn"] == 30
    assert r.images.shape[1:] == (1, 8, 8) and r.images.dtype == np.float32
    assert r.images.min() >= 0 and r.images.max() <= 1
    x0 = _x0(split, r)
    dist = _flat_norm(r.images - x0) / _flat_norm(x0)
    assert (dist < 0.5).all() and np.allclose(dist, r.dist_l2, atol=1e-5)
    assert p["enqueued_dist_max"] < 0.5  # every enqueued input respected the bound too
    # ground truth, seed prediction (= ground truth: misclassified seeds are filtered) and the flip
    np.testing.assert_array_equal(r.labels, split.labels[r.seed_index])
    np.testing.assert_array_equal(r.predicted_seed_label, r.labels)
    np.testing.assert_array_equal(_predict(digits_model, x0), r.predicted_seed_label)
    adv = _predict(digits_model, r.images)
    np.testing.assert_array_equal(adv, r.adversarial_label)
    assert (adv != r.predicted_seed_label).all()
    # both FOL kinds, finite and equal to a recomputation
    xt, x0t = torch.from_numpy(r.images), torch.from_numpy(x0)
    g_hat, _ = input_gradients(digits_model, xt, torch.from_numpy(r.predicted_seed_label))
    np.testing.assert_allclose(grad_l2(g_hat).numpy(), r.grad_l2, rtol=1e-4, atol=1e-5)
    g_true, _ = input_gradients(digits_model, xt, torch.from_numpy(r.labels))
    np.testing.assert_allclose(fol_linf(g_true, xt, x0t, EPS).numpy(), r.fol_linf, rtol=1e-4, atol=1e-4)
    assert np.isfinite(r.grad_l2).all() and np.isfinite(r.fol_linf).all()
    linf = np.abs(r.images - x0).reshape(len(r), -1).max(1)
    np.testing.assert_array_equal(r.inside_ball, linf <= EPS + 1e-6)
    # sorted by seed, then by mutation; each seed records at most one test per mutation
    key = list(zip(r.seed_index.tolist(), r.mutation.tolist()))
    assert len(set(key)) == len(key) and (r.mutation >= 1).all() and (r.mutation <= 20).all()
    assert p["grad_l2_label"] == "grad-L2 (RobOT fuzzer FOL)"


def test_projection_keeps_everything_inside_the_ball(digits_model, digits):
    split = digits.split("train")
    eps = 0.1
    r = _run(digits_model, split, eps=eps, project_linf=True, lr=1.0)
    assert len(r) > 0 and r.params["enqueued"] > 0
    x0 = _x0(split, r)
    assert np.abs(r.images - x0).max() <= eps + 1e-6
    assert r.params["enqueued_linf_max"] <= eps + 1e-6 and r.params["enqueued_dist_max"] < 0.5
    assert r.inside_ball.all()
    assert (r.fol_linf >= -1e-6 * (1 + eps * 64 * r.grad_l2)).all()  # FOL∞ ≥ 0 inside the ball (Hölder)
    assert (_flat_norm(r.images - x0) / _flat_norm(x0) < 0.5).all()


def test_compat_records_flips_outside_the_bound(digits_model, digits):
    split = digits.split("train")
    # a tiny relative bound and a big step: nothing is enqueued beyond the first pair, but labels flip
    kw = {"lr": 5.0, "max_dist": 1e-3, "mutations_per_seed": None}
    strict = _run(digits_model, split, **kw)
    assert len(strict) == 0 and strict.params["enqueued"] == 0
    assert strict.params["mutations_total"] == 2 * strict.params["seeds_used"]
    assert strict.params["stop_reason"] == "exhausted"
    compat = _run(digits_model, split, compat=True, **kw)
    assert len(compat) > 0 and (compat.dist_l2 >= 1e-3).all()
    assert (_predict(digits_model, compat.images) != compat.predicted_seed_label).all()
    # compat also keeps misclassified seeds
    assert compat.params["dropped_misclassified"] == 0
    assert compat.params["seeds_used"] >= strict.params["seeds_used"]


# --- the objective's double-backprop gradient ---------------------------------------------------------

def _objective_single(module, x, yhat):
    """obj(x) = ‖∇_x J(x, ŷ)‖₂ − p_ŷ(x) for one input (C×H×W), computed on its own."""
    if not x.requires_grad:
        x = x.detach().clone().requires_grad_(True)
    logits = module(x[None])
    (g,) = torch.autograd.grad(nn.functional.cross_entropy(logits, yhat[None], reduction="sum"), x,
                               create_graph=True)
    return torch.sqrt(g.pow(2).sum() + 1e-20) - torch.softmax(logits, 1)[0, yhat]


def test_objective_gradient_matches_per_input_autograd_and_finite_differences():
    torch.manual_seed(0)
    module = nn.Sequential(nn.Flatten(), nn.Linear(64, 16), nn.Tanh(), nn.Linear(16, 10)).double().eval()
    x = torch.rand(5, 1, 8, 8, dtype=torch.float64)
    yhat = torch.tensor([0, 3, 3, 7, 9])
    grad, fol, pred = F.objective_gradient(module, x, yhat)
    for i in range(len(x)):
        xi = x[i].detach().clone().requires_grad_(True)
        (ref,) = torch.autograd.grad(_objective_single(module, xi, yhat[i]), xi)
        torch.testing.assert_close(grad[i], ref, rtol=1e-10, atol=1e-12)
        # central differences on a few coordinates
        for flat in (0, 17, 42, 63):
            e = torch.zeros_like(x[i]).view(-1)
            e[flat] = 1e-6
            e = e.view_as(x[i])
            plus = _objective_single(module, x[i] + e, yhat[i]).item()
            minus = _objective_single(module, x[i] - e, yhat[i]).item()
            assert grad[i].view(-1)[flat].item() == pytest.approx((plus - minus) / 2e-6, rel=1e-5, abs=1e-8)
    g_ref, logits = input_gradients(module, x, yhat)
    torch.testing.assert_close(fol, grad_l2(g_ref))
    torch.testing.assert_close(pred, logits.argmax(1))


def test_objective_gradient_on_the_digits_net(digits_model, digits):
    module = digits_model.module.eval()
    x = digits.split("test").tensor(slice(0, 6))
    yhat = module(x).argmax(1).detach()
    grad, _, _ = F.objective_gradient(module, x, yhat)
    for i in range(len(x)):
        xi = x[i].detach().clone().requires_grad_(True)
        (ref,) = torch.autograd.grad(_objective_single(module, xi, yhat[i]), xi)
        torch.testing.assert_close(grad[i], ref, rtol=1e-4, atol=1e-6)


# --- batching and seeding -----------------------------------------------------------------------------

def test_batched_equals_per_seed(digits_model, digits):
    split = digits.split("train")
    model64 = copy.deepcopy(digits_model.module).double().eval()  # float64: no batch-size rounding noise
    kw = {"n_seeds": 12, "lr": 1.0, "mutations_per_seed": 16, "seed": 3}
    runs = [_run(model64, split, **kw), _run(model64, split, per_seed=True, **kw),
            _run(model64, split, batch_size=5, **kw)]
    assert len(runs[0]) > 0
    for other in runs[1:]:
        for key in ("seed_index", "mutation", "adversarial_label", "labels", "inside_ball"):
            np.testing.assert_array_equal(getattr(other, key), getattr(runs[0], key))
        for key in ("images", "grad_l2", "fol_linf", "dist_l2"):
            np.testing.assert_allclose(getattr(other, key), getattr(runs[0], key), rtol=1e-6, atol=1e-6)
        for key in ("mutations_total", "enqueued", "stop_reason", "seeds_used"):
            assert other.params[key] == runs[0].params[key]
    # the seed drives the draws: another seed fuzzes other inputs
    again = _run(model64, split, **{**kw, "seed": 4})
    assert set(again.seed_index) != set(runs[0].seed_index)


def test_explicit_seed_indices(digits_model, digits):
    split = digits.split("train")
    r = _run(digits_model, split, seed_indices=[5, 1, 9, 40], lr=1.0)
    assert set(r.seed_index) <= {5, 1, 9, 40} and r.params["seeds_drawn"] == 4
    assert r.params["seed_indices_given"]
    for bad in ([], [1, 1], [len(split)]):
        with pytest.raises(WorkbenchError, match="(?i)seed"):
            _run(digits_model, split, seed_indices=bad)


# --- budgets, progress and cancellation ---------------------------------------------------------------

def test_budgets_stop_it_with_their_reason(digits_model, digits, monkeypatch):
    split = digits.split("train")
    one = _run(digits_model, split, mutations_per_seed=1)
    assert one.params["stop_reason"] == "mutations"
    assert one.params["mutations_total"] == one.params["seeds_used"] == one.params["seeds_capped"]
    assert (one.mutation == 1).all() and one.params["enqueued"] == 0
    three = _run(digits_model, split, mutations_per_seed=3)
    assert three.params["mutations_total"] <= 3 * three.params["seeds_used"] and (three.mutation <= 3).all()
    capped = _run(digits_model, split, max_tests=5)
    assert len(capped) == 5 and capped.params["stop_reason"] == "max_tests"
    assert capped.params["tests_found"] >= 5
    unbounded = _run(digits_model, split, mutations_per_seed=None, time_budget_s=None)
    assert unbounded.params["stop_reason"] == "exhausted" and unbounded.params["seeds_capped"] == 0
    assert _run(digits_model, split, time_budget_s=1e-9).params["stop_reason"] == "time"
    # a fake clock that advances 0.1 s per reading stops the run after a few steps
    clock = iter(np.arange(0, 1e6, 0.1))
    monkeypatch.setattr(F.time, "monotonic", lambda: float(next(clock)))
    timed = _run(digits_model, split, mutations_per_seed=None, time_budget_s=3.0)
    assert timed.params["stop_reason"] == "time"
    assert 0 < timed.params["mutations_total"] < unbounded.params["mutations_total"]


def test_progress_partial_and_cancellation(digits_model, digits):
    split = digits.split("train")
    partials, progress = [], []
    ctx = JobContext("cpu", on_progress=lambda d, t, m: progress.append((d, t)), on_partial=partials.append)
    r = F.fuzz(ctx, digits_model, split, eps=EPS, n_seeds=20, mutations_per_seed=10)
    assert partials and {"tests", "seeds_active", "elapsed_s", "mutations"} <= set(partials[-1])
    assert partials[-1]["tests"] == r.params["tests_found"] and partials[-1]["seeds_active"] == 0
    assert progress[-1][0] == progress[-1][1]

    ctx = JobContext("cpu")
    ctx = JobContext("cpu", on_partial=lambda _: ctx.cancel())
    with pytest.raises(Cancelled):
        F.fuzz(ctx, digits_model, split, eps=EPS, n_seeds=20, mutations_per_seed=10)


# --- errors ---------------------------------------------------------------------------------------------

class _Square(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    @once_differentiable
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return 2 * x * g


class _OnceDifferentiable(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(64, 16), nn.Linear(16, 10)

    def forward(self, x):
        return self.b(_Square.apply(self.a(x.flatten(1))))


class _InPlace(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(64, 10)

    def forward(self, x):
        e = self.a(x.flatten(1)).exp()
        e.add_(1.0)  # exp's backward needs its output: autograd refuses
        return e.log()


def _random_split(n=20, seed=0):
    rng = np.random.default_rng(seed)
    return Split(rng.random((n, 1, 8, 8)).astype(np.float32), rng.integers(0, 10, n))


def test_models_without_double_backprop_or_with_nan_are_refused(digits_model, digits):
    split = _random_split()
    for cls in (_OnceDifferentiable, _InPlace):
        torch.manual_seed(0)
        with pytest.raises(WorkbenchError, match="double backprop") as info:
            F.fuzz(JobContext("cpu"), cls().eval(), split, eps=0.1, n_seeds=5, compat=True)
        assert "in-place" in info.value.hint
    module = digits_model.module
    with torch.no_grad():
        module.fc1.weight.fill_(float("nan"))
    with pytest.raises(WorkbenchError, match="NaN"):
        _run(digits_model, digits.split("train"))


def test_empty_seed_set_and_bad_settings(digits_model, digits):
    split = _random_split()
    flat = nn.Sequential(nn.Flatten(), nn.Linear(64, 10)).eval()
    with torch.no_grad():
        flat[1].weight.zero_()  # constant logits: every loss gradient vanishes
    with pytest.raises(WorkbenchError, match="vanishing loss gradient"):
        F.fuzz(JobContext("cpu"), flat, split, eps=0.1, n_seeds=10)
    with torch.no_grad():
        flat[1].weight.normal_()
        flat[1].bias.zero_()
        flat[1].bias[0] = 100.0  # everything is predicted 0
    not_zero = np.flatnonzero(split.labels != 0)
    with pytest.raises(WorkbenchError, match="misclassified"):
        F.fuzz(JobContext("cpu"), flat, split, eps=0.1, seed_indices=not_zero)
    train = digits.split("train")
    for bad in ({"lr": 0}, {"max_dist": -1}, {"mutations_per_seed": 0}, {"n_seeds": 2.5},
                {"max_tests": 0}, {"time_budget_s": float("nan")}, {"eps": 0}, {"seed": -1},
                {"loss_mode": "probs"}):
        with pytest.raises(WorkbenchError):
            _run(digits_model, train, **bad)
    digits_model.module.train()
    with pytest.raises(WorkbenchError, match="training mode"):
        _run(digits_model, train)


def test_keras_compat_loss_mode_runs(digits_model, digits):
    r = _run(digits_model, digits.split("train"), loss_mode="keras_compat", lr=1.0)
    assert r.params["loss_mode"] == "keras_compat"
    assert np.isfinite(r.grad_l2).all() and np.isfinite(r.fol_linf).all()


# --- storage ----------------------------------------------------------------------------------------------

def test_arrays_round_trip_through_a_project_artifact(digits_model, digits, tmp_project):
    r = _run(digits_model, digits.split("train"), lr=1.0)
    arrays = r.to_arrays()
    assert {"x", "y", "seed_index", "grad_l2", "fol_linf", "inside_ball", "dist_l2", "mutation",
            "source_index", "attack"} <= set(arrays)
    assert (arrays["attack"] == "fuzz").all()
    tmp_project.save_artifact("testset", "fuzzed", arrays, how="fuzzing")
    stored = tmp_project.load_artifact("fuzzed", kind="testset")
    back = F.FuzzResult.from_arrays({k: stored[k] for k in stored.names}, r.params)
    for key in ("images", "labels", *F.FuzzResult.ARRAY_KEYS):
        np.testing.assert_array_equal(getattr(back, key), getattr(r, key))
    assert back.params["stop_reason"] == r.params["stop_reason"]
    with pytest.raises(WorkbenchError, match="lacks"):
        F.FuzzResult.from_arrays({"x": arrays["x"]})

"""FOL and uncertainty scores (docs/methods/fol-and-selection.md#fol-linf to #uncertainty-scores): one backward pass
gives every input's own gradient, training mode is refused, FOL∞ ≥ 0 inside the ball, an analytic case,
keras_compat saturation, sort directions, and the scoring job."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from workbench.core.errors import Cancelled, WorkbenchError
from workbench.core.execution.jobs import JobContext
from workbench.core.robustness import scores as S


def _digits_batch(digits, n=24):
    split = digits.split("test")
    return split.tensor(slice(0, n)), torch.from_numpy(split.labels[:n].astype(np.int64))


def test_sum_trick_equals_per_input_loop(digits_model, digits):
    module = digits_model.module.eval()
    x, y = _digits_batch(digits)
    for mode in S.LOSS_MODES:
        grad, _ = S.input_gradients(module, x, y, mode)
        for i in range(len(x)):
            xi = x[i:i + 1].clone().requires_grad_(True)
            loss = S.per_input_loss(module(xi), y[i:i + 1], mode).sum()
            (gi,) = torch.autograd.grad(loss, xi)
            torch.testing.assert_close(grad[i:i + 1], gi, rtol=1e-5, atol=1e-6)


def test_train_mode_batchnorm_is_refused():
    model = nn.Sequential(nn.Flatten(), nn.Linear(4, 3), nn.BatchNorm1d(3)).train()
    with pytest.raises(WorkbenchError, match="training mode"):
        S.input_gradients(model, torch.rand(5, 1, 2, 2), torch.zeros(5, dtype=torch.long))


def test_fol_linf_nonnegative_inside_ball(digits_model, digits):
    module = digits_model.module.eval()
    x0, y = _digits_batch(digits)
    gen = torch.Generator().manual_seed(3)
    for eps in (0.01, 0.1, 0.3):
        x_adv = torch.clamp(x0 + torch.empty_like(x0).uniform_(-eps, eps, generator=gen), 0, 1)
        grad, _ = S.input_gradients(module, x_adv, y)
        fol = S.fol_linf(grad, x_adv, x0, eps)
        bound = -1e-6 * (1 + eps * grad.flatten(1).abs().sum(1))
        assert bool((fol >= bound).all())
        assert float(fol.max()) > 0
    # outside the ball FOL∞ can be negative: step far along the gradient sign
    x_far = x0 + 2 * 0.1 * grad.sign()
    grad_far, _ = S.input_gradients(module, x_far, y)
    assert bool((S.fol_linf(grad_far, x_far, x0, 0.1) < 0).any())


def test_fol_analytic_on_linear_softmax_model():
    torch.manual_seed(0)
    lin = nn.Linear(6, 4)
    model = nn.Sequential(nn.Flatten(), lin).eval()
    x0 = torch.rand(5, 1, 2, 3)
    x_adv = torch.clamp(x0 + 0.05 * torch.randn_like(x0), 0, 1)
    y = torch.tensor([0, 1, 2, 3, 1])
    grad, logits = S.input_gradients(model, x_adv, y)
    p = torch.softmax(logits, 1)
    g = (p - nn.functional.one_hot(y, 4).float()) @ lin.weight  # Wᵀ(p − onehot) per row
    torch.testing.assert_close(grad.flatten(1), g, rtol=1e-5, atol=1e-6)
    d = (x_adv - x0).flatten(1)
    expected = 0.1 * g.abs().sum(1) - (d * g).sum(1)
    torch.testing.assert_close(S.fol_linf(grad, x_adv, x0, 0.1), expected, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(S.fosc_l2(grad, x_adv, x0, 0.1), 0.1 * g.norm(dim=1) - (d * g).sum(1),
                               rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(S.grad_l2(grad), g.norm(dim=1), rtol=1e-5, atol=1e-6)


def test_keras_compat_saturated_inputs_have_zero_gradient():
    model = nn.Sequential(nn.Flatten(), nn.Linear(4, 2)).eval()
    with torch.no_grad():
        model[1].weight.zero_()
        model[1].bias.copy_(torch.tensor([20.0, 0.0]))  # p_1 ≈ 2e-9 < 1e-7: saturated
        model[1].weight[1, 0] = 1.0  # logits-mode gradient p_1·W_1 ≠ 0
    x = torch.rand(3, 1, 2, 2)
    y = torch.zeros(3, dtype=torch.long)
    grad_compat, _ = S.input_gradients(model, x, y, "keras_compat")
    assert float(grad_compat.abs().max()) == 0.0
    assert float(S.fol_linf(grad_compat, x, x, 0.3).abs().max()) == 0.0
    grad_logits, _ = S.input_gradients(model, x, y, "logits")
    assert float(grad_logits.abs().max()) > 0.0


def test_uncertainty_scores_and_sort_directions():
    probs = np.array([[0.9, 0.05, 0.05],   # confident
                      [0.4, 0.35, 0.25],   # most uncertain
                      [0.6, 0.3, 0.1],
                      [1.0, 0.0, 0.0]])    # certain, with 0 ln 0
    np.testing.assert_allclose(S.deepgini(probs)[1], 1 - (0.16 + 0.1225 + 0.0625))
    np.testing.assert_allclose(S.margin(probs), [0.85, 0.05, 0.3, 1.0])
    np.testing.assert_allclose(S.least_confidence(probs), [0.1, 0.6, 0.4, 0.0])
    assert S.entropy(probs)[3] == 0.0
    for name, fn in S.UNCERTAINTY_SCORES.items():
        assert S.most_uncertain_order(fn(probs), name).tolist() == [1, 2, 0, 3], name
    # ties go to the lower index in both directions
    assert S.most_uncertain_order(np.array([0.5, 0.7, 0.5, 0.7]), "deepgini").tolist() == [1, 3, 0, 2]
    assert S.most_uncertain_order(np.array([0.5, 0.7, 0.5, 0.7]), "margin").tolist() == [0, 2, 1, 3]
    with pytest.raises(WorkbenchError):
        S.most_uncertain_order(probs[:, 0], "variance")


def test_uncertainty_summary_ranks_and_summarises_each_score():
    probs = np.array([[0.9, 0.05, 0.05], [0.4, 0.35, 0.25], [0.6, 0.3, 0.1], [1.0, 0.0, 0.0], [0.25, 0.35, 0.4]])
    labels = np.array([0, 1, 1, 0, 2])
    out = S.uncertainty_summary(probs, labels, index=np.array([10, 11, 12, 13, 14]), top=2)
    assert out["inputs"] == 5 and out["accuracy"] == pytest.approx(3 / 5)  # inputs 1 and 2 are wrong
    margin = out["scores"]["margin"]
    assert margin["most_uncertain_first"] == "ascending"
    # inputs 1 and 4 tie (the same probabilities permuted): the lower row comes first
    assert [(e["index"], e["label"], e["prediction"]) for e in margin["most_uncertain"]] == [(11, 1, 0),
                                                                                         (14, 2, 2)]
    assert margin["most_uncertain"][0]["value"] == pytest.approx(0.05) and margin["most_uncertain"][0]["id"] is None
    assert [e["index"] for e in out["scores"]["least_confidence"]["most_uncertain"]] == [11, 14]
    values = 1 - probs.max(axis=1)
    stats = out["scores"]["least_confidence"]["stats"]
    assert stats["mean"] == pytest.approx(values.mean()) and stats["median"] == pytest.approx(0.4)
    assert stats["q25"] == pytest.approx(np.quantile(values, 0.25)) and stats["n"] == 5
    only = S.uncertainty_summary(probs, labels, scores=["entropy"], top=10)
    assert list(only["scores"]) == ["entropy"] and len(only["scores"]["entropy"]["most_uncertain"]) == 5
    with pytest.raises(WorkbenchError, match="Unknown uncertainty score 'variance'"):
        S.uncertainty_summary(probs, labels, scores=["variance"])
    with pytest.raises(WorkbenchError, match="do not fit 4 labels"):
        S.uncertainty_summary(probs, labels[:4])


def test_softmax_probabilities_streams_the_chosen_inputs(digits_model, digits):
    test = digits.split("test")
    rows = np.array([5, 0, 17, 3])
    got = S.softmax_probabilities(JobContext("cpu"), digits_model, test, rows, batch_size=3)
    with torch.no_grad():
        want = torch.softmax(digits_model.module(test.tensor(rows)).double(), dim=1).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-9)  # float32 logits differ with the batch size
    bad = test.subset(rows)
    bad.images = bad.numpy().copy()
    bad.images[2, 0, 1, 1] = np.nan
    with pytest.raises(WorkbenchError, match="image 2 has NaN or infinite pixels"):
        S.softmax_probabilities(JobContext("cpu"), digits_model, bad)


def test_score_inputs_job_matches_direct_computation(digits_model, digits):
    x0, y = _digits_batch(digits, 30)
    x_adv = torch.clamp(x0 + 0.05, 0, 1)
    seen = []
    ctx = JobContext("cpu", on_progress=lambda d, t, m: seen.append((d, t)))
    out = S.score_inputs(ctx, digits_model, x_adv.numpy(), y.numpy(), x0.numpy(), 0.1, batch_size=8)
    assert seen[-1] == (30, 30) and len(seen) == 5
    grad, logits = S.input_gradients(digits_model.module.eval(), x_adv, y)
    np.testing.assert_allclose(out["fol_linf"], S.fol_linf(grad, x_adv, x0, 0.1).numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(out["grad_l2"], S.grad_l2(grad).numpy(), rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(out["deepgini"], S.deepgini(torch.softmax(logits.double(), 1).numpy()), rtol=1e-6)
    assert out["params"]["loss_mode"] == "logits" and out["params"]["eps"] == 0.1
    assert set(out) >= {"fosc_l2", "margin", "least_confidence", "entropy"}
    with pytest.raises(WorkbenchError, match="both"):
        S.score_inputs(ctx, digits_model, x_adv.numpy(), y.numpy(), x0.numpy(), None)
    with pytest.raises(WorkbenchError, match="no inputs"):
        S.score_inputs(ctx, digits_model, x_adv.numpy()[:0], y.numpy()[:0])


def test_score_inputs_cancel_and_nan(digits_model, digits):
    x0, y = _digits_batch(digits, 16)
    ctx = JobContext("cpu")
    ctx.cancel()
    with pytest.raises(Cancelled):
        S.score_inputs(ctx, digits_model, x0.numpy(), y.numpy())
    with torch.no_grad():
        digits_model.module.fc2.bias.fill_(float("nan"))
    with pytest.raises(WorkbenchError, match="NaN"):
        S.score_inputs(JobContext("cpu"), digits_model, x0.numpy(), y.numpy())

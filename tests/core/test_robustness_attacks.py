"""FGSM/PGD with random start and the successful-adversarial pool (docs/methods/fol-and-selection.md#attacks,
#attack-budgets-per-dataset and #candidate-pool): the seeded random start matches torchattacks' global draw,
and the model an attack was made against gets every pool candidate wrong."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from workbench.core.errors import Cancelled, WorkbenchError
from workbench.core.execution.jobs import JobContext
from workbench.core.robustness import attacks as A
from workbench.core.robustness.scores import fol_linf, input_gradients


def _batch(digits, n=32):
    split = digits.split("test")
    return split.tensor(slice(0, n)), torch.from_numpy(split.labels[:n].astype(np.int64))


def test_random_start_equals_seeded_global_draw(digits):
    x0, _ = _batch(digits)
    ours = A.random_start(x0, 0.1, torch.Generator().manual_seed(7))
    torch.manual_seed(7)
    theirs = torch.clamp(x0 + torch.empty_like(x0).uniform_(-0.1, 0.1), 0, 1)
    assert torch.equal(ours, theirs)


def test_fgsm_and_pgd_equal_torchattacks(digits_model, digits):
    torchattacks = pytest.importorskip("torchattacks")
    module = digits_model.module.eval()
    x0, y = _batch(digits)
    eps = 0.3
    # PGD: torchattacks draws `empty_like(x).uniform_` from the global generator — seeded the same way,
    # our own generator-seeded draw gives the same start.
    torch.manual_seed(11)
    theirs = torchattacks.PGD(module, eps=eps, alpha=eps / 6, steps=10, random_start=True)(x0, y)
    ours = A.pgd(module, x0, y, eps, seed=11)
    torch.testing.assert_close(ours, theirs, rtol=0, atol=1e-6)
    # FFGSM draws `randn_like(x).uniform_`; reproduce that start and inject it.
    torch.manual_seed(12)
    theirs = torchattacks.FFGSM(module, eps=eps, alpha=eps)(x0, y)
    torch.manual_seed(12)
    start = torch.clamp(x0 + torch.randn_like(x0).uniform_(-eps, eps), 0, 1)
    ours = A.fgsm(module, x0, y, eps, start=start)
    torch.testing.assert_close(ours, theirs, rtol=0, atol=1e-6)
    assert not module.training


def test_outputs_in_box_and_ball_with_nonnegative_fol(digits_model, digits):
    module = digits_model.module.eval()
    x0, y = _batch(digits)
    for eps in (0.05, 0.3):
        for name in A.ATTACKS:
            adv = A.run_attack(name, module, x0, y, eps, seed=1)
            assert float(adv.min()) >= 0 and float(adv.max()) <= 1
            assert float((adv - x0).abs().max()) <= eps + 1e-6
            grad, _ = input_gradients(module, adv, y)
            fol = fol_linf(grad, adv, x0, eps)
            assert bool((fol >= -1e-6 * (1 + eps * grad.flatten(1).abs().sum(1))).all())
    # seeded: the same seed gives the same output, another seed another
    assert torch.equal(A.pgd(module, x0, y, 0.1, seed=5), A.pgd(module, x0, y, 0.1, seed=5))
    assert not torch.equal(A.pgd(module, x0, y, 0.1, seed=5), A.pgd(module, x0, y, 0.1, seed=6))


def test_pgd_accepts_alpha_and_compat_loss_moves_only_by_start():
    model = nn.Sequential(nn.Flatten(), nn.Linear(4, 2)).eval()
    with torch.no_grad():
        model[1].weight.zero_()
        model[1].weight[1, 0] = 1.0
        model[1].bias.copy_(torch.tensor([20.0, 0.0]))  # saturated: compat gradient is 0
    x0 = torch.full((3, 1, 2, 2), 0.5)
    y = torch.zeros(3, dtype=torch.long)
    start = A.random_start(x0, 0.1, torch.Generator().manual_seed(0))
    adv = A.pgd(model, x0, y, 0.1, start=start, loss_mode="keras_compat")
    assert torch.equal(adv, start)
    adv_logits = A.pgd(model, x0, y, 0.1, alpha=0.05, steps=1, start=start)
    assert not torch.equal(adv_logits, start)


def test_clear_errors(digits_model, digits):
    module = digits_model.module.eval()
    x0, y = _batch(digits, 4)
    for bad in (0, -0.1, 1.5, float("nan"), "a lot"):
        with pytest.raises(WorkbenchError, match="eps|budget"):
            A.fgsm(module, x0, y, bad)
    with pytest.raises(WorkbenchError, match=r"\[0, 1\]"):
        A.pgd(module, x0 * 255, y, 0.1)
    with pytest.raises(WorkbenchError, match="Unknown attack"):
        A.run_attack("cw", module, x0, y, 0.1)
    with torch.no_grad():
        module.fc1.weight.fill_(float("nan"))
    with pytest.raises(WorkbenchError, match="NaN"):
        A.fgsm(module, x0, y, 0.1)


def test_default_eps_per_dataset():
    assert A.default_eps("mnist") == 0.3
    assert A.default_eps("fashion-mnist") == 0.1
    assert A.default_eps("svhn") == pytest.approx(8 / 255)
    assert A.default_eps("cifar10") == 0.01
    assert A.EPS_PRESETS["robot-mnist-eps"] == 0.3
    with pytest.raises(WorkbenchError, match="explicitly"):
        A.default_eps("digits")
    # a dataset without a preset: the common budget for its kind of images, said as such
    assert A.eps_and_source("digits", 1) == (0.1, "default for grey images (digits has no preset)")
    assert A.eps_and_source("my-photos", 3) == (pytest.approx(8 / 255), "default for colour images (my-photos has "
                                                                       "no preset)")
    assert A.eps_and_source("cifar10", 3) == (0.01, "default for cifar10")  # a preset wins over the kind
    for channels in (None, 2, 4):
        with pytest.raises(WorkbenchError, match="grey or colour"):
            A.default_eps("my-data", channels)


def test_attack_split_keeps_only_successes_and_model_scores_zero(digits_model, digits):
    split = digits.split("test")
    indices = np.arange(40)
    seen = []
    ctx = JobContext("cpu", on_progress=lambda d, t, m: seen.append(d))
    pool = A.attack_split(ctx, digits_model, split, 0.3, seed=0, batch_size=16, indices=indices)
    assert seen[-1] == 40
    assert len(pool) > 0 and pool.images.shape[1:] == (1, 8, 8)
    assert set(pool.attack) <= {"fgsm", "pgd"}
    np.testing.assert_array_equal(pool.labels, split.labels[pool.source_index])
    with torch.no_grad():
        predicted = digits_model.module(torch.from_numpy(pool.images)).argmax(1).numpy()
    assert (predicted != pool.labels).all()  # the original model scores 0 % on its own pool
    assert np.abs(pool.images - pool.clean_images(split)).max() <= 0.3 + 1e-6
    assert pool.params["succeeded"]["pgd"] + pool.params["succeeded"]["fgsm"] == len(pool)
    assert pool.params["eps"] == 0.3 and pool.params["loss_mode"] == "logits"
    everything = A.attack_split(JobContext("cpu"), digits_model, split, 0.3, batch_size=16, indices=indices,
                                successful_only=False)
    assert len(everything) == 80


def test_attack_split_cancel_and_train_mode(digits_model, digits):
    ctx = JobContext("cpu")
    ctx.cancel()
    with pytest.raises(Cancelled):
        A.attack_split(ctx, digits_model, digits.split("test"), 0.1, indices=np.arange(8))
    digits_model.module.train()
    with pytest.raises(WorkbenchError, match="training mode"):
        A.attack_split(JobContext("cpu"), digits_model, digits.split("test"), 0.1, indices=np.arange(8))

"""The automated validity proxies and the generated set, against independent references: the gamma fit
and its quantiles against scipy on draws of a known gamma, the F1 threshold against a brute-force loop
in exact fractions, the oracle's verdicts and the invalidity rules by hand, both reconstruction scores
recomputed with plain torch ops, a Gaussian-decoder VAE's training step recomputed by hand, a whole
validator set trained, reloaded and refitted, the stop rule of the latent search (a stop keeps what was
found, marked so), and the generated set read back as a test set, exported and measured for coverage."""

from __future__ import annotations

import csv
import itertools
import json
import math
import shutil
from fractions import Fraction

import numpy as np
import pytest
import torch

from workbench.core.data.dataset import Dataset, Split
from workbench.core.errors import WorkbenchError
from workbench.core.generation import tig
from workbench.core.generation.generated import (
    CSV_COLUMNS,
    benchmark_rows,
    export_generated,
    run_generation,
    summary_rows,
)
from workbench.core.generation.objectives import margins
from workbench.core.generation.registry import create_generator
from workbench.core.generation.storage import load_generator
from workbench.core.generation.vae import LOG_2PI, LOGVAR_HIGH, LOGVAR_LOW, VAE
from workbench.core.generation.validators import (
    CARD,
    ORACLE_FILE,
    Validators,
    load_validators,
    train_validators,
)
from workbench.core.generation.validity import (
    MAIN_QUANTILE,
    QUANTILES,
    f1_threshold,
    gamma_thresholds,
    invalid_by_loss,
    invalid_by_probability,
    oracle_verdicts,
    reconstruction_loss,
    reconstruction_probability,
)
from workbench.core.execution.jobs import JobContext
from workbench.core.project.store import text_column

PROXY_COLUMNS = {"proxy_selforacle_loss", "proxy_selforacle_invalid", "proxy_daiv_probability", "proxy_daiv_invalid",
                 "proxy_oracle_label", "proxy_oracle_confidence", "proxy_oracle_verdict"}


# --- the gamma fit ----------------------------------------------------------------------------------

def test_gamma_thresholds_recover_a_known_gamma_and_its_quantiles():
    from scipy import stats

    draws = np.random.default_rng(0).gamma(shape=3.0, scale=0.1, size=20_000)
    fit = gamma_thresholds(draws)
    assert fit["n"] == 20_000
    assert fit["shape"] == pytest.approx(3.0, rel=0.04) and fit["scale"] == pytest.approx(0.1, rel=0.04)
    assert list(fit["thresholds"]) == [f"{q:g}" for q in QUANTILES] and "0.9999" in fit["thresholds"]
    for q in QUANTILES:
        tau = fit["thresholds"][f"{q:g}"]
        assert tau == pytest.approx(stats.gamma.ppf(q, 3.0, scale=0.1), rel=0.05), q  # the truth's quantile
        assert tau == pytest.approx(stats.gamma.ppf(q, fit["shape"], scale=fit["scale"]), rel=1e-12)
    taus = [fit["thresholds"][f"{q:g}"] for q in QUANTILES]
    assert all(a < b for a, b in itertools.pairwise(taus))  # higher quantile, higher threshold
    # the share of the draws below the 0.9 and 0.99 thresholds is about 0.9 and 0.99
    assert (draws <= fit["thresholds"]["0.9"]).mean() == pytest.approx(0.9, abs=0.01)
    assert (draws <= fit["thresholds"]["0.99"]).mean() == pytest.approx(0.99, abs=0.003)


def test_gamma_thresholds_ignore_nan_and_take_chosen_quantiles():
    draws = np.random.default_rng(1).gamma(shape=2.0, scale=0.5, size=500)
    with_nan = np.concatenate([draws[:200], [np.nan, np.nan], draws[200:], [np.nan]])
    clean, noisy = gamma_thresholds(draws), gamma_thresholds(with_nan)
    assert noisy["n"] == 500 and noisy == clean
    chosen = gamma_thresholds(draws, quantiles=(0.5, 0.75))
    assert list(chosen["thresholds"]) == ["0.5", "0.75"]
    from scipy import stats

    assert chosen["thresholds"]["0.5"] == pytest.approx(stats.gamma.ppf(0.5, clean["shape"], scale=clean["scale"]))
    assert chosen["thresholds"]["0.5"] < chosen["thresholds"]["0.75"] < clean["thresholds"]["0.9"]


@pytest.mark.parametrize("scores, words", [
    ([0.3], "at least two different"),
    ([np.nan, 0.3, np.nan], "at least two different"),
    ([], "at least two different"),
    ([0.2, 0.2, 0.2], "at least two different"),
    ([0.0, 0.1, 0.2], "must be positive"),
    ([-0.1, 0.1, 0.2], "must be positive"),
])
def test_gamma_thresholds_refuse_bad_scores(scores, words):
    with pytest.raises(WorkbenchError, match=words):
        gamma_thresholds(scores)


# --- the F1 threshold --------------------------------------------------------------------------------

def brute_force_candidates(positive, negative) -> list[tuple[float, Fraction, Fraction, Fraction]]:
    """Every midpoint of consecutive distinct pooled scores with the rule score >= tau is positive, and its
    exact (tau, F1, precision, recall), in ascending tau."""
    values = sorted(set(positive) | set(negative))
    out = []
    for a, b in itertools.pairwise(values):
        tau = (a + b) / 2
        tp = sum(1 for p in positive if p >= tau)
        fp = sum(1 for n in negative if n >= tau)
        fn = len(positive) - tp
        precision = Fraction(tp, tp + fp) if tp + fp else Fraction(0)
        recall = Fraction(tp, len(positive))
        f1 = Fraction(2 * tp, 2 * tp + fp + fn) if tp else Fraction(0)
        out.append((tau, f1, precision, recall))
    return out


def brute_force_f1(positive, negative) -> tuple[float, Fraction, Fraction, Fraction]:
    """The highest exact F1 of `brute_force_candidates`, the lowest tau on a tie."""
    best = None
    for candidate in brute_force_candidates(positive, negative):
        if best is None or candidate[1] > best[1]:  # strictly higher: the first (lowest) tau wins a tie
            best = candidate
    return best


def test_f1_threshold_a_hand_worked_case():
    got = f1_threshold([3, 4, 5], [1, 2])
    assert got == {"threshold": 2.5, "f1": 1.0, "precision": 1.0, "recall": 1.0, "n_positive": 3, "n_negative": 2}


def test_f1_threshold_a_tie_takes_the_lowest_threshold():
    # tau 0.5: tp 2, fp 2 -> P 1/2, R 1, F1 2/3; tau 3.5: tp 1, fp 0 -> P 1, R 1/2, F1 2/3
    got = f1_threshold([1, 4], [0, 2, 3])
    assert got["threshold"] == 0.5 and got["f1"] == pytest.approx(2 / 3)
    assert got["precision"] == pytest.approx(0.5) and got["recall"] == 1.0


def test_f1_threshold_overlapping_and_inverted_sets():
    # the same scores on both sides: tau 1.5 keeps 3 of each (P 1/2, R 3/4, F1 3/5), higher taus less
    same = f1_threshold([1, 2, 3, 4], [1, 2, 3, 4])
    assert same["threshold"] == 1.5 and same["f1"] == pytest.approx(0.6)
    assert same["precision"] == pytest.approx(0.5) and same["recall"] == pytest.approx(0.75)
    # the negatives score higher: the best is the lowest tau (tp 1, fp 2 -> F1 2/5); no division by zero
    inverted = f1_threshold([1, 2], [3, 4])
    assert inverted["threshold"] == 1.5 and inverted["f1"] == pytest.approx(0.4)
    assert inverted["precision"] == pytest.approx(1 / 3) and inverted["recall"] == pytest.approx(0.5)


def test_f1_threshold_equals_a_brute_force_loop():
    rng = np.random.default_rng(7)
    unique = 0
    for trial in range(300):
        n_pos, n_neg = int(rng.integers(1, 15)), int(rng.integers(1, 15))
        if trial % 2:  # small integers: many ties between scores and between F1 values
            pos = rng.integers(0, 8, n_pos).astype(float)
            neg = rng.integers(0, 8, n_neg).astype(float)
        else:
            pos = rng.normal(1.0, 1.0, n_pos).round(3)
            neg = rng.normal(0.0, 1.0, n_neg).round(3)
        if len(set(pos) | set(neg)) < 2:
            continue
        candidates = brute_force_candidates(list(pos), list(neg))
        best_f1 = max(c[1] for c in candidates)
        best = [c for c in candidates if c[1] == best_f1]
        got = f1_threshold(pos, neg)
        chosen = {c[0]: c for c in candidates}.get(got["threshold"])
        assert chosen is not None and chosen[1] == best_f1, (trial, list(pos), list(neg))  # a best threshold
        assert got["f1"] == pytest.approx(float(best_f1), abs=1e-12)
        assert got["precision"] == pytest.approx(float(chosen[2]), abs=1e-12)
        assert got["recall"] == pytest.approx(float(chosen[3]), abs=1e-12)
        assert (got["n_positive"], got["n_negative"]) == (n_pos, n_neg)
        if len(best) == 1:  # no tie: exactly the brute force's threshold
            unique += 1
            assert got["threshold"] == best[0][0]
    assert unique > 100


def test_f1_threshold_an_exact_tie_hidden_by_rounding_takes_the_lowest_threshold():
    # tau 0.5: tp 3, fp 2, fn 1 -> P 3/5, R 3/4, F1 2/3; tau 1.5: tp 2, fp 0, fn 2 -> P 1, R 1/2, F1 2/3
    assert brute_force_f1([0, 1, 2, 2], [0, 0, 1, 1])[:2] == (0.5, Fraction(2, 3))
    got = f1_threshold([0, 1, 2, 2], [0, 0, 1, 1])
    assert got["threshold"] == 0.5 and got["precision"] == pytest.approx(0.6) and got["recall"] == 0.75


def test_f1_threshold_ignores_nan_and_refuses_bad_input():
    assert f1_threshold([3, np.nan, 4, 5], [1, np.nan, 2])["threshold"] == 2.5
    assert f1_threshold([3, np.nan, 4, 5], [1, np.nan, 2])["n_positive"] == 3
    for pos, neg in (([], [1.0, 2.0]), ([1.0, 2.0], []), ([np.nan], [1.0]), ([], [])):
        with pytest.raises(WorkbenchError, match="needs nominal scores"):
            f1_threshold(pos, neg)
    with pytest.raises(WorkbenchError, match="Every score is the same"):
        f1_threshold([2.0, 2.0], [2.0])


# --- the oracle's verdicts and the invalidity rules ---------------------------------------------------

def test_oracle_verdicts_by_hand():
    p = np.array([[0.5, 0.3, 0.2],  # the intended class exactly at the threshold: sure, preserved
                  [0.2, 0.5, 0.3],  # another class exactly at the threshold: changed
                  [0.4, 0.35, 0.25],  # top-1 is intended but below 0.5: uncertain
                  [0.3, 0.45, 0.25],  # top-1 is another class below 0.5: uncertain
                  [0.9, 0.05, 0.05],  # sure of class 0, class 2 intended: changed
                  [0.01, 0.01, 0.98]])  # sure and right
    expected = np.array([0, 0, 0, 0, 2, 2])
    got = oracle_verdicts(p, expected)
    assert list(got) == ["preserved", "changed", "uncertain", "uncertain", "changed", "preserved"]
    assert got.dtype.kind == "U"
    strict = oracle_verdicts(p, expected, threshold=0.95)
    assert list(strict) == ["uncertain"] * 5 + ["preserved"]
    just_below = oracle_verdicts(np.array([[np.nextafter(0.5, 0), 0.3, 0.2]]), np.array([0]))
    assert list(just_below) == ["uncertain"]


def test_invalid_by_loss_and_by_probability():
    loss = np.array([0.1, 0.5, np.nextafter(0.5, 1), 0.9, np.nan, np.inf])
    assert invalid_by_loss(loss, 0.5).tolist() == [False, False, True, True, True, True]
    prob = np.array([-10.0, -5.0, np.nextafter(-5.0, 0), -1.0, np.nan, -np.inf])
    assert invalid_by_probability(prob, -5.0).tolist() == [True, False, False, False, True, True]
    assert invalid_by_loss([], 1.0).shape == (0,) and invalid_by_probability([], 1.0).shape == (0,)


# --- the reconstruction scores, by hand -------------------------------------------------------------

@pytest.fixture(scope="module")
def images(fashion_tiny):
    return fashion_tiny.split("test").numpy(np.arange(6))


def tiny_vae(decoder: str = "bernoulli", seed: int = 0) -> VAE:
    torch.manual_seed(seed)
    return VAE(num_classes=10, h_dim=16, z_dim=4, **({"decoder": decoder} if decoder != "bernoulli" else {}))


def hand_posterior(vae, x):
    flat = torch.from_numpy(x).reshape(len(x), -1).double()
    enc = {k: v.double() for k, v in vae.net["encoder"].state_dict().items()}
    hidden = torch.relu(flat @ enc["fc1.weight"].T + enc["fc1.bias"])
    out = hidden @ enc["fc2.weight"].T + enc["fc2.bias"]
    return flat, out[:, :4], out[:, 4:]


def hand_decoder(vae, z):
    dec = {k: v.double() for k, v in vae.net["decoder"].state_dict().items()}
    return torch.relu(z @ dec["fc3.weight"].T + dec["fc3.bias"]) @ dec["fc4.weight"].T + dec["fc4.bias"]


def hand_bce(flat, logits):
    p = torch.sigmoid(logits)
    return -(flat * torch.log(p) + (1 - flat) * torch.log(1 - p)).mean(dim=1)


def test_reconstruction_loss_equals_the_bce_of_the_mean_reconstruction(images):
    vae = tiny_vae()
    flat, mu, _ = hand_posterior(vae, images)
    expected = hand_bce(flat, hand_decoder(vae, mu)).numpy()
    got = reconstruction_loss(JobContext("cpu"), vae, images)
    assert got.dtype == np.float64 and got.shape == (6,)
    np.testing.assert_allclose(got, expected, rtol=1e-5)
    assert (got > 0).all()


def test_reconstruction_loss_with_samples_is_seeded_and_equals_the_draws_by_hand(images):
    vae = tiny_vae()
    ctx = JobContext("cpu")
    first = reconstruction_loss(ctx, vae, images, samples=3, seed=5)
    np.testing.assert_array_equal(first, reconstruction_loss(ctx, vae, images, samples=3, seed=5))
    assert not np.allclose(first, reconstruction_loss(ctx, vae, images, samples=3, seed=6))
    flat, mu, logvar = hand_posterior(vae, images)
    noise = image_noise(images, 3 * mu.shape[1], 5)
    z_dim = mu.shape[1]
    draws = [mu + noise[:, k * z_dim:(k + 1) * z_dim] * torch.exp(0.5 * logvar) for k in range(3)]
    expected = torch.stack([hand_bce(flat, hand_decoder(vae, z)) for z in draws]).mean(dim=0).numpy()
    np.testing.assert_allclose(first, expected, rtol=1e-5)
    # an image's score does not depend on where it sits or what it is scored with
    order = np.arange(len(images))[::-1].copy()
    np.testing.assert_array_equal(reconstruction_loss(ctx, vae, images[order], samples=3, seed=5), first[order])
    np.testing.assert_array_equal(reconstruction_loss(ctx, vae, images[:2], samples=3, seed=5), first[:2])


def image_noise(images, width: int, seed: int):
    """Per image, `width` standard normal draws from a stream seeded by the seed and the image's bytes."""
    import zlib

    rows = []
    for image in np.asarray(images, dtype=np.float32):
        key = (seed * 1_000_003 + zlib.crc32(np.ascontiguousarray(image).reshape(-1).tobytes())) % 2 ** 63
        rows.append(torch.randn(width, generator=torch.Generator().manual_seed(key)))
    return torch.stack(rows).double()


def test_reconstruction_probability_equals_the_gaussian_log_likelihood(images):
    vae = tiny_vae("gaussian")
    flat, mu, logvar = hand_posterior(vae, images)

    def log_likelihood(z):
        out = hand_decoder(vae, z)
        mean = torch.sigmoid(out[:, :784])
        pixel_logvar = LOGVAR_LOW + (LOGVAR_HIGH - LOGVAR_LOW) * torch.sigmoid(out[:, 784:])
        return (-0.5 * (math.log(2 * math.pi) + pixel_logvar + (flat - mean) ** 2 / torch.exp(pixel_logvar))).sum(1)

    ctx = JobContext("cpu")
    got = reconstruction_probability(ctx, vae, images, use_mean=True)
    np.testing.assert_allclose(got, log_likelihood(mu).numpy(), rtol=1e-5)
    assert LOG_2PI == pytest.approx(math.log(2 * math.pi))
    drawn = reconstruction_probability(ctx, vae, images, use_mean=False, seed=3)
    np.testing.assert_array_equal(drawn, reconstruction_probability(ctx, vae, images, use_mean=False, seed=3))
    z = mu + image_noise(images, mu.shape[1], 3) * torch.exp(0.5 * logvar)
    np.testing.assert_allclose(drawn, log_likelihood(z).numpy(), rtol=1e-5)
    np.testing.assert_array_equal(reconstruction_probability(ctx, vae, images[1:], use_mean=False, seed=3), drawn[1:])
    assert not np.allclose(drawn, got)


def test_a_nan_pixel_gives_a_nan_score_and_leaves_the_others_alone(images):
    broken = images.copy()
    broken[2, 0, 10, 10] = np.nan
    ctx = JobContext("cpu")
    for vae, score in ((tiny_vae(), lambda v, x: reconstruction_loss(ctx, v, x)),
                       (tiny_vae("gaussian"), lambda v, x: reconstruction_probability(ctx, v, x, use_mean=True))):
        clean, got = score(vae, images), score(vae, broken)
        assert np.isnan(got[2]) and np.isfinite(np.delete(got, 2)).all()
        np.testing.assert_allclose(np.delete(got, 2), np.delete(clean, 2), rtol=1e-6)
        alone = score(vae, images[4:5])  # an image scores the same alone as in a batch
        assert alone[0] == pytest.approx(clean[4], rel=1e-5)
    assert reconstruction_loss(ctx, tiny_vae(), np.zeros((0, 1, 28, 28), np.float32)).shape == (0,)


def test_each_scorer_refuses_the_other_decoder_and_other_kinds(images, tiny_generators):
    ctx = JobContext("cpu")
    with pytest.raises(WorkbenchError, match="Bernoulli decoder"):
        reconstruction_loss(ctx, tiny_vae("gaussian"), images)
    with pytest.raises(WorkbenchError, match="Gaussian decoder"):
        reconstruction_probability(ctx, tiny_vae(), images)
    gan = create_generator("gan", 10, **tiny_generators["gan"])
    with pytest.raises(WorkbenchError, match="needs a VAE"):
        reconstruction_loss(ctx, gan, images)
    with pytest.raises(WorkbenchError, match="decoder must be one of"):
        VAE(num_classes=10, h_dim=16, z_dim=4, decoder="laplace")


# --- the Gaussian-decoder VAE trains ----------------------------------------------------------------

def test_a_gaussian_decoder_vae_trains_on_the_nll_and_bounds_its_log_variances(images):
    vae = tiny_vae("gaussian")
    assert vae.gaussian and not tiny_vae().gaussian
    x = torch.from_numpy(images)
    rng = torch.Generator().manual_seed(11)
    optimisers = vae.optimisers(1e-3)
    # the first step's losses, by hand from the same weights and the same noise
    flat, mu, logvar = hand_posterior(vae, images)
    eps = torch.randn(mu.shape, generator=torch.Generator().manual_seed(11)).double()
    out = hand_decoder(vae, mu + eps * torch.exp(0.5 * logvar))
    mean = torch.sigmoid(out[:, :784])
    pixel_logvar = LOGVAR_LOW + (LOGVAR_HIGH - LOGVAR_LOW) * torch.sigmoid(out[:, 784:])
    nll = 0.5 * (math.log(2 * math.pi) + pixel_logvar + (flat - mean) ** 2 / torch.exp(pixel_logvar)).sum() / len(x)
    kl = -0.5 * (1 + logvar - mu ** 2 - torch.exp(logvar)).sum() / len(x)
    vae.net.train()
    losses = vae.train_step(x, torch.zeros(len(x), dtype=torch.long), optimisers, rng)
    assert set(losses) == {"loss", "nll", "kl"}
    assert all(torch.isfinite(v) and v.ndim == 0 for v in losses.values())
    assert float(losses["nll"]) == pytest.approx(float(nll), rel=1e-4)
    assert float(losses["kl"]) == pytest.approx(float(kl), rel=1e-4, abs=1e-6)
    assert float(losses["loss"]) == pytest.approx(float(nll + kl), rel=1e-4)
    history = [float(vae.train_step(x, None, optimisers, rng)["loss"]) for _ in range(30)]
    assert np.isfinite(history).all() and history[-1] < float(losses["loss"])
    vae.net.eval()
    with torch.no_grad():
        for scale in (0.0, 1.0, 1000.0):  # latents far out saturate the bound, never pass it
            m, lv = vae.likelihood(scale * torch.randn(16, 4, generator=torch.Generator().manual_seed(1)))
            assert m.shape == lv.shape == (16, 784)
            assert float(lv.min()) >= LOGVAR_LOW and float(lv.max()) <= LOGVAR_HIGH
            assert float(m.min()) >= 0 and float(m.max()) <= 1
        decoded = vae.decode(torch.zeros(2, 4))
    assert decoded.shape == (2, 1, 28, 28)
    bernoulli = tiny_vae()
    bce = bernoulli.train_step(x, None, bernoulli.optimisers(1e-3), torch.Generator().manual_seed(0))
    assert set(bce) == {"loss", "bce", "kl"}


# --- a validator set, trained end to end ---------------------------------------------------------------

def noise_dataset(like, n: int = 60, shape=(1, 28, 28), seed: int = 0) -> Dataset:
    """Another domain of the same image size: uniform noise."""
    rng = np.random.default_rng(seed)
    return Dataset("noise", list(like.class_names),
                   {"test": Split(rng.integers(0, 256, (n, *shape), dtype=np.uint8), rng.integers(0, 10, n))},
                   like.card)


@pytest.fixture(scope="module")
def validator_set(tmp_path_factory, fashion_tiny):
    folder = tmp_path_factory.mktemp("validators") / "fashion-tiny"
    reference = noise_dataset(fashion_tiny)
    card = train_validators(JobContext("cpu"), fashion_tiny, reference, folder, epochs=1, oracle_epochs=1, seed=0)
    return folder, card, reference


def test_train_validators_writes_the_whole_folder(validator_set):
    folder, card, _ = validator_set
    assert (folder / CARD).is_file() and (folder / ORACLE_FILE).is_file()
    assert (folder / "selforacle" / "generator.json").is_file() and (folder / "daiv" / "generator.json").is_file()
    assert not (folder / "training").exists()
    stored = json.loads((folder / CARD).read_text())
    assert stored["format"] == "workbench-validators" and stored["version"] == 1
    assert stored["card"]["dataset"] == "fashion-tiny" == card.dataset and card.reference == "noise"
    so = card.selforacle
    assert so["quantile"] == MAIN_QUANTILE and so["n"] == 100 and so["samples"] == 0  # the first half of 200
    taus = [so["thresholds"][f"{q:g}"] for q in QUANTILES]
    assert np.isfinite(taus).all() and all(a < b for a, b in itertools.pairwise(taus)) and taus[0] > 0
    assert math.isfinite(card.daiv["threshold"]) and 0 <= card.daiv["f1"] <= 1
    # as many images of each domain: the 60 foreign ones and a seeded 60 of the 100 nominal ones
    assert card.daiv["n_positive"] == 60 and card.daiv["n_negative"] == 60
    assert card.oracle["arch"] == "lenet4" and card.oracle["seed"] == 1 and 0 <= card.oracle["test_accuracy"] <= 1
    assert card.checks["nominal"]["n"] == 100 and card.checks["foreign"]["n"] == 60
    lines = card.summary()
    assert [label for label, _ in lines][:3] == ["SelfOracle proxy (reconstruction loss)",
                                                 "DAIV proxy (reconstruction probability)",
                                                 "Oracle classifier (label preservation)"]
    assert len(lines) == 5 and "nan" not in " ".join(text for _, text in lines).lower()


def test_load_validators_and_the_thresholds_refitted_by_hand(validator_set, fashion_tiny):
    folder, card, reference = validator_set
    loaded = load_validators(str(folder))
    assert isinstance(loaded, Validators) and loaded.dataset == "fashion-tiny" and loaded.card == card
    assert not loaded.selforacle.gaussian and loaded.daiv.gaussian
    assert loaded.selforacle.config["h_dim"] == 400 and loaded.selforacle.config["z_dim"] == 200
    assert loaded.loss_threshold() == card.selforacle["thresholds"]["0.9999"]
    assert loaded.loss_threshold(0.9) == card.selforacle["thresholds"]["0.9"]
    # the thresholds again: the first half of the test split shuffled with the seed, the stored VAEs
    ctx = JobContext("cpu")
    test = fashion_tiny.split("test")
    order = np.random.default_rng(0).permutation(len(test))
    fit_images = test.numpy(np.sort(order[:100]))
    gamma = gamma_thresholds(reconstruction_loss(ctx, loaded.selforacle, fit_images))
    for key, tau in card.selforacle["thresholds"].items():
        assert gamma["thresholds"][key] == pytest.approx(tau, rel=1e-6)
    nominal = reconstruction_probability(ctx, loaded.daiv, fit_images, seed=0)
    foreign = reconstruction_probability(ctx, loaded.daiv, reference.split("test").numpy(), seed=0)
    n = min(len(nominal), len(foreign))
    nominal_pick = np.random.default_rng(2).permutation(len(nominal))[:n]
    foreign_pick = np.random.default_rng(1).permutation(len(foreign))[:n]
    assert f1_threshold(nominal[nominal_pick], foreign[foreign_pick])["threshold"] == pytest.approx(
        card.daiv["threshold"], rel=1e-6)
    with pytest.raises(WorkbenchError, match="judge fashion-tiny images, not mnist-5k"):
        load_validators(str(folder), "mnist-5k")


def test_judge_gives_every_proxy_column_per_image(validator_set, fashion_tiny):
    folder, _, _ = validator_set
    loaded = load_validators(str(folder))
    test = fashion_tiny.split("test")
    images = test.numpy(np.arange(150, 162))
    images[3, 0, 5, 5] = np.nan
    expected = test.labels[150:162]
    ctx = JobContext("cpu")
    judged = loaded.judge(ctx, images, expected)
    assert set(judged) == PROXY_COLUMNS and all(len(v) == 12 for v in judged.values())
    loss = reconstruction_loss(ctx, loaded.selforacle, images)
    np.testing.assert_allclose(judged["proxy_selforacle_loss"], loss, rtol=1e-6, equal_nan=True)
    assert judged["proxy_selforacle_invalid"].tolist() == (~(loss <= loaded.loss_threshold())).tolist()
    assert judged["proxy_selforacle_invalid"][3] and judged["proxy_daiv_invalid"][3]  # NaN: invalid (proxy)
    probability = reconstruction_probability(ctx, loaded.daiv, images, seed=0)
    assert judged["proxy_daiv_invalid"].tolist() == (~(probability >= loaded.card.daiv["threshold"])).tolist()
    with torch.no_grad():
        p = torch.softmax(loaded.oracle.module.eval()(torch.nan_to_num(torch.from_numpy(images))), dim=1).numpy()
    assert judged["proxy_oracle_label"].tolist() == p.argmax(1).tolist()
    np.testing.assert_allclose(judged["proxy_oracle_confidence"], p.max(1), rtol=1e-5)
    assert judged["proxy_oracle_verdict"].tolist() == oracle_verdicts(p, expected).tolist()
    strict = loaded.judge(ctx, images, expected, quantile=0.68)  # the lowest threshold rejects the most
    assert strict["proxy_selforacle_invalid"].sum() >= judged["proxy_selforacle_invalid"].sum()
    with pytest.raises(WorkbenchError, match="judge images of shape"):
        loaded.judge(ctx, np.zeros((2, 1, 8, 8), np.float32), [0, 1])
    with pytest.raises(WorkbenchError, match="intended labels"):
        loaded.judge(ctx, images, expected[:5])


def test_an_unfitted_quantile_is_refused(validator_set):
    loaded = load_validators(str(validator_set[0]))
    with pytest.raises(WorkbenchError, match="no SelfOracle threshold at the quantile 0.5"):
        loaded.loss_threshold(0.5)
    for q in (0.0, 1.0, 1.5, float("nan")):
        with pytest.raises(WorkbenchError, match="strictly between 0 and 1"):
            loaded.loss_threshold(q)


def test_a_damaged_validator_card_is_refused_in_words(validator_set, tmp_path):
    folder, _, _ = validator_set
    copy = tmp_path / "copy"
    shutil.copytree(folder, copy)
    good = json.loads((copy / CARD).read_text())
    damages = [("{not json", "not readable JSON"),
               (json.dumps({**good, "format": "something-else"}), "not a workbench validator card"),
               (json.dumps({**good, "version": 99}), "validator format 99"),
               (json.dumps({**good, "card": {**good["card"], "selforacle": {}}}), "is damaged"),
               (json.dumps({**good, "card": {**good["card"], "daiv": {"threshold": "high"}}}), "is damaged"),
               (json.dumps({**good, "card": {**good["card"], "unknown_field": 1}}), "is damaged"),
               (json.dumps({**good, "card": None}), "is damaged"),
               (json.dumps([1, 2]), "not a workbench validator card")]
    for text, words in damages:
        (copy / CARD).write_text(text)
        with pytest.raises(WorkbenchError, match=words):
            load_validators(str(copy))
    (copy / CARD).write_text(json.dumps(good))
    assert load_validators(str(copy)).dataset == "fashion-tiny"
    (copy / ORACLE_FILE).unlink()
    with pytest.raises(WorkbenchError, match="no oracle classifier"):
        load_validators(str(copy))
    with pytest.raises(WorkbenchError, match="No validator set"):
        load_validators(str(tmp_path / "absent"))


def test_train_validators_refuses_a_used_folder_and_bad_data(tmp_path, fashion_tiny):
    used = tmp_path / "used"
    used.mkdir()
    (used / "keep.txt").write_text("mine")
    with pytest.raises(WorkbenchError, match="not an empty folder"):
        train_validators(JobContext("cpu"), fashion_tiny, noise_dataset(fashion_tiny), used, epochs=1, oracle_epochs=1)
    assert [p.name for p in used.iterdir()] == ["keep.txt"] and (used / "keep.txt").read_text() == "mine"
    with pytest.raises(WorkbenchError, match="another shape"):
        train_validators(JobContext("cpu"), fashion_tiny, noise_dataset(fashion_tiny, shape=(1, 8, 8)),
                         tmp_path / "a", epochs=1, oracle_epochs=1)
    few = Dataset("few", list(fashion_tiny.class_names), {"train": fashion_tiny.split("train"),
                                                          "test": fashion_tiny.split("test").subset(range(10))},
                  fashion_tiny.card)
    with pytest.raises(WorkbenchError, match="at least 20 images"):
        train_validators(JobContext("cpu"), few, noise_dataset(fashion_tiny), tmp_path / "b", epochs=1, oracle_epochs=1)
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


# --- the stop rule ---------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def bundled_vae():
    return load_generator("vae-fashion-mnist", num_classes=10)


@pytest.fixture(scope="module")
def bundled_gan():
    return load_generator("gan-fashion-mnist", num_classes=10)


def test_a_stop_keeps_what_the_search_found_marked_unfinished(bundled_vae, lenet5_fashion, fashion_tiny):
    seeds = tig.draw_seeds(JobContext("cpu"), bundled_vae, lenet5_fashion, 8, seed=0, images=fashion_tiny.split("test"))
    assert seeds.kept.sum() >= 3

    def stop_at_three(done, total, message):
        if done >= 3:
            ctx.cancel()

    ctx = JobContext("cpu", on_progress=stop_at_three)
    step = 1e-4  # far too small to push a seed over in three generations
    stopped = tig.search(ctx, bundled_vae, lenet5_fashion, seeds, -4.0, 4.0, step, budget=40, seed=2)
    assert ctx.cancelled and ctx.stopped_early
    assert any("stopped" in n for n in ctx.notices)
    ctx.check()  # keeping what was found: no check raises after the stop
    whole = tig.search(JobContext("cpu"), bundled_vae, lenet5_fashion, seeds, -4.0, 4.0, step, budget=5, seed=2)
    assert [r.seed for r in stopped] == [r.seed for r in whole] == list(np.flatnonzero(seeds.kept))
    for s, w in zip(stopped, whole):
        if s.found:  # found in the first three generations: a finished search
            assert s.finished and s.generations <= 3
            continue
        assert not s.finished and s.generations == 3 and len(s.fitness) == 3
        assert s.fitness == w.fitness[:3]  # the same search up to the stop
        assert s.best_image.shape == (1, 28, 28) and s.best_genome.shape == (bundled_vae.latent_dim,)
    assert any(not s.finished for s in stopped)


def test_run_generation_saves_a_stopped_run_as_partial(tmp_path, bundled_vae, lenet5_fashion, fashion_tiny):
    from workbench.core.project.folder import Project
    from workbench.core.project.staging import run_staged
    from workbench.core.testsets import resolve

    project = Project.create(tmp_path / "p", "fashion-tiny")

    def stop_in_the_search(done, total, message):
        if "generation 3:" in message:
            ctx.cancel()

    ctx = JobContext("cpu", on_progress=stop_in_the_search)
    generators = [("vae-a", bundled_vae), ("vae-b", bundled_vae)]
    result = run_staged(ctx, run_generation, project, generators, lenet5_fashion, fashion_tiny, 6, "low", 50, 0,
                        None, "stopped-set")
    assert ctx.stopped_early and result.partial and result.saved and result.not_run == ["vae-b"]
    assert [run.generator for run in result.runs] == ["vae-a"]
    assert any("Not searched after the stop: vae-b" in n for n in ctx.notices)
    finished = result.arrays["finished"]
    assert len(finished) == len(result.runs[0].results) >= 1 and not finished.all()
    assert (result.arrays["generations"][~finished] <= 3).all()
    reopened = Project.open(project.folder)
    how = reopened.artifacts("testset")["stopped-set"]["provenance"]
    assert how["partial"] is True and how["not_run"] == ["vae-b"] and how["role"] == "generated"
    stored = resolve(reopened, "stopped-set", fashion_tiny)
    assert stored.columns["finished"].tolist() == finished.tolist()
    assert summary_rows(stored.columns)[0]["unfinished"] == int((~finished).sum())


# --- the generated set as a test set ----------------------------------------------------------------

@pytest.fixture(scope="module")
def generated(tmp_path_factory, bundled_vae, bundled_gan, lenet5_fashion, fashion_tiny, validator_set):
    from workbench.core.project.folder import Project
    from workbench.core.project.staging import run_staged

    project = Project.create(tmp_path_factory.mktemp("generated") / "p", "fashion-tiny")
    validators = load_validators(str(validator_set[0]))
    result = run_staged(JobContext("cpu"), run_generation, project,
                        [("vae-fashion-mnist", bundled_vae), ("gan-fashion-mnist", bundled_gan)], lenet5_fashion,
                        fashion_tiny, 6, "high", 4, 0, validators, "gen", command="test")
    return project, result


def test_the_generated_set_reads_back_as_a_test_set(generated, fashion_tiny, lenet5_fashion):
    from workbench.core.testsets import resolve

    project, result = generated
    assert result.saved and not result.partial and not result.not_run
    testset = resolve(project, "gen", fashion_tiny)
    n = sum(len(run.results) for run in result.runs)
    assert len(testset) == n == len(result.arrays["y"]) and n >= 6
    assert testset.kind == "generated" and testset.source.dataset == "fashion-tiny"
    c = testset.columns
    assert {"generator", "kind", "extent", "found", "predicted", "seed", "source_index", "margin", "distance",
            "finished", "seed_x", "genome", "fitness"} | PROXY_COLUMNS <= set(c)
    generators, kinds = text_column(c["generator"]), text_column(c["kind"])
    assert generators.dtype.kind == "U" and set(text_column(c["extent"])) == {"high"}
    expected_rows = [(run.generator, r.seed, r.label) for run in result.runs for r in run.results]
    assert list(zip(generators, c["seed"].tolist(), testset.labels.tolist())) == expected_rows  # intended labels
    assert set(zip(generators, kinds)) == {("vae-fashion-mnist", "vae"), ("gan-fashion-mnist", "gan")}
    vae = generators == "vae-fashion-mnist"
    test = fashion_tiny.split("test")
    assert testset.labels[vae].tolist() == test.labels[c["source_index"][vae]].tolist()  # a VAE seed keeps its label
    assert (c["source_index"][~vae] == -1).all()
    np.testing.assert_array_equal(testset.numpy(), result.arrays["x"])
    # the classifier's label and margin of every stored input, recomputed
    with torch.no_grad():
        logits = lenet5_fashion.module.eval()(torch.from_numpy(testset.numpy()))
    assert c["predicted"].tolist() == logits.argmax(1).tolist()
    np.testing.assert_allclose(c["margin"], margins(logits, torch.from_numpy(testset.labels)).numpy(),
                               atol=1e-4)
    found = np.asarray(c["found"], bool)
    assert found.tolist() == (c["margin"] < 0).tolist() and (c["predicted"][found] != testset.labels[found]).all()
    rows = summary_rows(c, result.runs)
    assert [r["generator"] for r in rows] == ["vae-fashion-mnist", "gan-fashion-mnist"]
    for row in rows:
        mine = generators == row["generator"]
        assert row["searched"] == mine.sum() and row["misbehaviours"] == (mine & found).sum() and row["seeds"] == 6
        both = mine & found & ~np.asarray(c["proxy_selforacle_invalid"], bool) & ~np.asarray(c["proxy_daiv_invalid"],
                                                                                              bool)
        assert row["proxy_both_valid"] == both.sum()


def test_benchmark_rows_and_the_export(generated, fashion_tiny, tmp_path):
    from PIL import Image

    from workbench.core.testsets import resolve

    project, _ = generated
    testset = resolve(project, "gen", fashion_tiny)
    rows = benchmark_rows(testset)
    assert len(rows) == len(testset)
    for i, row in enumerate(rows):
        assert list(row)[:len(CSV_COLUMNS)] == list(CSV_COLUMNS)
        assert set(row) - set(CSV_COLUMNS) == PROXY_COLUMNS | {"proxy_oracle_agrees_with_model"}
        assert row["proxy_oracle_agrees_with_model"] == (row["Classification"] == "misbehaviour"
                                                         and row["proxy_oracle_label"] == row["Predicted_label(Y)"])
        assert row["Tool"] in ("vae", "gan") and row["Mutation_extent"] == "high"
        assert row["Expected_label(X)"] == int(testset.labels[i])
        assert row["Predicted_label(Y)"] == int(testset.columns["predicted"][i])
        assert row["Classification"] == ("misbehaviour" if row["Predicted_label(Y)"] != row["Expected_label(X)"]
                                         else "correct")
        assert row["Filename"] == f"{i:05d}-{text_column(testset.columns['generator'])[i]}-high-seed{row['Seed']}.png"
        assert isinstance(row["proxy_oracle_verdict"], str) and isinstance(row["proxy_daiv_invalid"], bool)
    out = tmp_path / "export"
    written = export_generated(testset, out)
    assert written["images"] == len(testset) and written["csv"] == str(out / "records.csv")
    with open(out / "records.csv", newline="") as f:
        records = list(csv.DictReader(f))
    assert len(records) == len(testset) and list(records[0])[:len(CSV_COLUMNS)] == list(CSV_COLUMNS)
    assert [r["Filename"] for r in records] == [r["Filename"] for r in rows]
    pngs = sorted(p.name for p in out.glob("*.png"))
    assert pngs == sorted(r["Filename"] for r in rows)
    first = np.asarray(Image.open(out / rows[0]["Filename"]))
    assert first.shape == (28, 28)
    np.testing.assert_array_equal(first, np.clip(np.rint(testset.numpy()[0, 0] * 255), 0, 255).astype(np.uint8))
    before = sorted(p.name for p in out.iterdir())
    with pytest.raises(WorkbenchError, match="not an empty folder"):
        export_generated(testset, out)
    assert sorted(p.name for p in out.iterdir()) == before
    # a generator named by a path writes inside the export folder all the same
    named = resolve(project, "gen", fashion_tiny)
    named.columns["generator"] = np.array([f"/elsewhere/{g}" for g in text_column(named.columns["generator"])])
    elsewhere = tmp_path / "by-path"
    export_generated(named, elsewhere)
    assert len(list(elsewhere.glob("*.png"))) == len(named) and all(p.parent == elsewhere for p in elsewhere.iterdir())
    plain = resolve(project, "test", fashion_tiny)  # a split of the dataset: no generator columns
    with pytest.raises(WorkbenchError, match="not a generated set"):
        benchmark_rows(plain)


def test_coverage_of_the_generated_set(generated, fashion_tiny, lenet5_fashion):
    from workbench.core.coverage import measure_coverage
    from workbench.core.testsets import resolve

    project, _ = generated
    testset = resolve(project, "gen", fashion_tiny)
    measured = measure_coverage(JobContext("cpu"), lenet5_fashion, fashion_tiny, None, ("nc", "kmnc"),
                                test_split=testset)
    half = testset.subset(np.arange(len(testset) // 2))
    fewer = measure_coverage(JobContext("cpu"), lenet5_fashion, fashion_tiny, None, ("nc", "kmnc"), test_split=half)
    for key in ("nc", "kmnc"):
        value = measured[key].value
        assert 0.0 <= value.fraction <= 1.0 and value.total > 0
        assert measured[key].curve[-1, 0] == len(testset)
        assert fewer[key].curve[-1, 0] == len(half) and fewer[key].value.covered <= value.covered
    assert measured["nc"].value.covered > 0


def test_f1_brute_force_reference_is_sound():
    """The reference itself, on every split of a tiny pooled set (guards the guard)."""
    for pos in itertools.combinations([0, 1, 2, 3], 2):
        neg = [v for v in [0, 1, 2, 3] if v not in pos]
        tau, f1, _, _ = brute_force_f1(list(pos), neg)
        if set(pos) == {2, 3}:
            assert tau == 1.5 and f1 == 1

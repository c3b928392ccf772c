"""Generators for colour images from the command line: each kind trains one epoch on a 3×32×32 dataset the user
brings (an NPZ), and the latent search runs with it against a classifier of that data."""

from __future__ import annotations

import colorsys
import json

import numpy as np
import pytest
import torch
from PIL import Image
from cli_helpers import assert_clean_failure, run_cli, run_json


@pytest.fixture(scope="module")
def colour(tmp_path_factory):
    """Flat colours on noise whose class is the quarter of the hue wheel they lie in, and a small CNN trained on
    them. Neighbouring classes meet at a hue, so a generator that learned the wheel has inputs near every
    boundary for a search to cross (four fixed colours had none: a search there found nothing to flip)."""
    from workbench.cli import main

    folder = tmp_path_factory.mktemp("colour")
    rng = np.random.default_rng(0)
    hue = rng.uniform(0, 1, 1152)  # enough for one epoch to teach the VAEs and the cDCGAN the wheel
    labels = (hue * 4).astype(int)
    colours = np.array([colorsys.hsv_to_rgb(h, 0.8, 0.85) for h in hue]) * 255
    images = rng.normal(0, 25, (1152, 3, 32, 32)) + colours[:, :, None, None]
    images = np.clip(images, 0, 255).astype(np.uint8)
    np.savez(folder / "blocks.npz", x_train=images[:1024], y_train=labels[:1024], x_test=images[1024:],
             y_test=labels[1024:])
    model = folder / "cnn.pt"
    rc = main(["train", "--model", "cifar-convnet", "--data", str(folder / "blocks.npz"), "--epochs", "3",
               "--out", str(model), "--device", "cpu", "--seed", "0"])
    assert rc == 0
    return folder / "blocks.npz", model


@pytest.mark.parametrize("kind", ["vae", "conv-vae", "gan", "diffusion"])
def test_each_kind_trains_on_colour_images_and_searches(capsys, tmp_path, colour, kind):
    data, model = colour
    out = tmp_path / kind
    card = run_json(capsys, "train-generator", "--generator", kind, "--data", data, "--preset", "small",
                    "--epochs", "1", "--batch-size", 8, "--lr", "2e-3", "--out", out, "--classifier", model,
                    "--acceptance-samples", 20, "--device", "cpu")
    assert card["kind"] == kind and card["complete"] and card["image_shape"] == [3, 32, 32]
    # the benchmark's budget, from 4 seeds; the diffusion model decodes with 4 DDIM steps instead of 20 (a sampling
    # setting, not a weight: generator.json's config and its card's copy say it)
    seeds, budget = 4, 20 if kind == "diffusion" else 250
    if kind == "diffusion":
        descriptor = json.loads((out / "generator.json").read_text())
        descriptor["config"]["steps"] = descriptor["card"]["config"]["steps"] = 4
        (out / "generator.json").write_text(json.dumps(descriptor))
    result = run_json(capsys, "generate", "--generator", out, "--model", model, "--data", data, "--seeds", seeds,
                      "--budget", budget, "--extent", "high", "--device", "cpu", "--no-proxies", "--export",
                      tmp_path / "found")
    (run,) = result["runs"]
    assert run["seeds"] == seeds and 1 <= run["kept"] <= seeds, run
    assert len(run["seeds_detail"]) == run["kept"]
    assert all(1 <= s["generations"] <= budget for s in run["seeds_detail"])
    found = [s for s in run["seeds_detail"] if s["found"]]
    assert all(s["predicted"] != s["label"] and s["best_margin"] < 0 for s in found), run
    if kind != "diffusion":  # one epoch does not teach the diffusion model its classes: its samples are muddy
        assert found, run
    pictures = sorted((tmp_path / "found").rglob("*.png"))
    assert pictures and all(Image.open(p).size == (32, 32) and Image.open(p).mode == "RGB" for p in pictures)


def test_a_size_a_kind_cannot_make_is_refused_in_words(capsys, tmp_path):
    rng = np.random.default_rng(0)
    np.savez(tmp_path / "odd.npz", x_train=rng.integers(0, 256, (8, 3, 30, 30), dtype=np.uint8),
             y_train=np.arange(8) % 2, x_test=rng.integers(0, 256, (4, 3, 30, 30), dtype=np.uint8),
             y_test=np.arange(4) % 2)
    torch.manual_seed(0)
    for kind, words in (("gan", "side is divisible by 4"), ("conv-vae", "divisible by 8")):
        rc, _, err = run_cli(capsys, "train-generator", "--generator", kind, "--data", tmp_path / "odd.npz",
                             "--epochs", "1", "--out", tmp_path / kind, "--classifier", "none", "--device", "cpu")
        assert_clean_failure(rc, err, words, "3×30×30")


def test_the_validity_proxies_train_on_colour_images(capsys, tmp_path, colour):
    data, _ = colour
    rng = np.random.default_rng(1)
    noise = rng.integers(0, 256, (48, 3, 32, 32), dtype=np.uint8)
    np.savez(tmp_path / "noise.npz", x_train=noise[:32], y_train=np.arange(32) % 4, x_test=noise[32:],
             y_test=np.arange(16) % 4)
    card = run_json(capsys, "train-validators", "--data", data, "--reference", tmp_path / "noise.npz", "--out",
                    tmp_path / "validators", "--epochs", 1, "--oracle-epochs", 1, "--device", "cpu")
    assert card["oracle"]["arch"] == "resnet20"  # the zoo's network for 3×32×32: LeNet-4 takes 28×28 grey only
    assert (tmp_path / "validators" / "selforacle").is_dir() and (tmp_path / "validators" / "daiv").is_dir()


def test_a_generated_colour_sets_misbehaviours_retrain_the_model(capsys, tmp_path, colour):
    """`retrain --pool` with a generated set: its misbehaviours (found, and wrong for the model) are the candidates,
    labelled with their intended class and scored as their own clean inputs; the rest of the set is left out."""
    from workbench.core.models.model_io import load_model
    from workbench.core.project.folder import Project
    from workbench.core.testsets import save_testset

    data, model = colour
    project = Project.create(tmp_path / "project", str(data))
    with np.load(data) as f:
        seeds, labels = f["x_test"][:24].astype(np.float32) / 255, f["y_test"][:24]
    x = seeds[:, [1, 2, 0]]  # each colour's channels rotated: a hue a third of the wheel away, mostly misread
    with torch.no_grad():
        predicted = load_model(str(model)).module(torch.from_numpy(x)).argmax(1).numpy()
    found = np.arange(24) % 4 != 3  # the search's verdict, kept apart from the prediction to test both
    fingerprint = load_model(str(model)).fingerprint()

    def save(name, found=found, **how):
        save_testset(project, name, {
            "x": x, "y": labels, "seed_x": seeds, "found": found, "predicted": predicted,
            "generator": np.array(["gan-a"] * 12 + ["gan-b"] * 12), "seed": np.arange(24) % 12,
            "kind": np.array(["gan"] * 24), "extent": np.array(["high"] * 24), "generations": np.full(24, 5),
            "finished": np.ones(24, bool), "fitness": np.zeros((24, 5), np.float32)},
            **{"role": "generated", "dataset": str(data), "model": "cnn", "model_fingerprint": fingerprint, **how})

    save("generated-blocks")
    misbehaviours = int(np.sum(found & (predicted != labels)))
    assert misbehaviours >= 10, predicted
    result = run_json(capsys, "retrain", "--model", model, "--data", data, "--project", tmp_path / "project",
                      "--pool", "generated-blocks", "--strategy", "be-st", "--budget", 4, "--epochs", 1,
                      "--report-inputs", 16, "--device", "cpu")
    setup = result["setup"]
    assert setup["pool"]["candidates"] == misbehaviours and setup["pool"]["by_attack"] == {"generated": misbehaviours}
    assert setup["selectable"] + setup["heldout"] == misbehaviours and setup["heldout"] >= 1
    (row,) = result["rows"]
    assert row["selected"] == 4 and 0 <= row["clean_accuracy"] <= 1
    assert row["selected_fol_mean"] > 0  # ε‖∇‖₁: against the seeds (far outside their ε-balls) it was negative

    # sets that cannot retrain this model on this data are refused before any work, in words
    save("generated-other-weights", model_fingerprint="0" * 64)
    save("generated-other-data", dataset=str(tmp_path / "elsewhere.npz"))
    save("generated-nothing-found", found=np.zeros(24, bool))
    for name, words in (("generated-none", ("no pool or generated set named 'generated-none'", "generated-blocks")),
                        ("generated-other-weights", ("other weights", "generated for")),
                        ("generated-other-data", ("made for dataset", "elsewhere.npz")),
                        ("generated-nothing-found", ("no misbehaviour", "larger budget"))):
        rc, _, err = run_cli(capsys, "retrain", "--model", model, "--data", data, "--project", tmp_path / "project",
                             "--pool", name, "--strategy", "be-st", "--budget", 1, "--device", "cpu")
        assert_clean_failure(rc, err, *words)

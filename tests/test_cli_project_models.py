"""Every command that stores a result made with a model in `--project` lists that model in the project,
so the GUI opens the project on the model its results belong to (a generated set once left the project
without one: "no model yet", Evaluate disabled)."""

from __future__ import annotations

import numpy as np
import pytest
from cli_helpers import run_cli

from workbench.core.project.folder import Project

# Each command with the least work that still stores a result made with `{model}` on `{data}`.
COMMANDS = {
    "evaluate": ["evaluate"],
    "importance": ["importance", "--layer", "fc1", "--ablation", "off"],
    "coverage": ["coverage", "--layer", "fc1", "--criteria", "kmnc"],
    "attack": ["attack", "--eps", "0.1", "--attacks", "fgsm", "--max-inputs", "30"],
    "fuzz": ["fuzz", "--eps", "0.1", "--seeds", "5", "--time-budget", "5", "--mutations", "5"],
    "generate": ["generate", "--generator", "vae-fashion-mnist", "--seeds", "2", "--budget", "1", "--no-proxies"],
}


@pytest.fixture(scope="module")
def tiny_fashion(tmp_path_factory, fashion_slice):
    """60 training and 40 test images of the Fashion-MNIST slice, for the commands that need 28×28 data."""
    path = tmp_path_factory.mktemp("data") / "tiny-fashion.npz"
    train, test = fashion_slice.split("train"), fashion_slice.split("test")
    np.savez(path, x_train=np.asarray(train.images[:60]), y_train=train.labels[:60],
             x_test=np.asarray(test.images[:40]), y_test=test.labels[:40],
             class_names=np.array(fashion_slice.class_names))
    return path


@pytest.mark.parametrize("command", COMMANDS)
def test_a_stored_result_lists_its_model_in_the_project(command, capsys, tmp_path, digits_model_file, tiny_fashion):
    model, data, name = ((("lenet5-fashion", tiny_fashion, "lenet5-fashion")) if command == "generate"
                         else (digits_model_file, "digits", "digits-net"))
    folder = tmp_path / "project"
    rc, out, err = run_cli(capsys, *COMMANDS[command], "--model", model, "--data", data, "--device", "cpu",
                           "--project", folder)
    assert rc == 0, err
    project = Project.open(folder)
    assert project.artifacts(), "the command stored nothing"
    assert [m["name"] for m in project.models] == [name]
    if command != "generate":  # a model file is kept by its path, and loads again from it
        assert project.model_spec(project.models[0]) == str(digits_model_file.resolve())


def test_a_state_dict_is_listed_with_the_architecture_it_was_given(capsys, tmp_path, digits_model_file):
    """A plain state_dict loads again only with its architecture, so `--arch` is kept with the model."""
    import torch

    from workbench.core.models.model_io import load_model

    weights = tmp_path / "weights.pt"
    torch.save(load_model(str(digits_model_file)).module.state_dict(), weights)
    folder = tmp_path / "project"
    rc, _, err = run_cli(capsys, "evaluate", "--model", weights, "--arch", "digits-net", "--data", "digits",
                         "--project", folder)
    assert rc == 0, err
    assert Project.open(folder).models == [{"name": "weights", "spec": str(weights.resolve()), "arch": "digits-net"}]

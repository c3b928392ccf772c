"""Bad model files and models that misbehave: every one is refused with a message that says what is
wrong, never a traceback, a hang, torch's own log, or a silently wrong number."""

from __future__ import annotations

import json
import logging
import os
import warnings

import numpy as np
import pytest
import torch
from torch import nn

from workbench.core.errors import WorkbenchError
from workbench.core.execution.jobs import JobContext
from workbench.core.models.model_io import load_model, save_checkpoint
from workbench.core.models.training import evaluate


class TupleNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(64, 10)

    def forward(self, x):
        out = self.fc(x.flatten(1))
        return out, out


class DictNet(TupleNet):
    def forward(self, x):
        return {"logits": self.fc(x.flatten(1))}


class OneRowNet(TupleNet):
    def forward(self, x):
        return self.fc(x.flatten(1)).mean(0, keepdim=True)


class IntegerNet(TupleNet):
    def forward(self, x):
        return self.fc(x.flatten(1)).round().long()


class SmallBatchesOnlyNet(TupleNet):
    def forward(self, x):
        if len(x) > 3:
            raise RuntimeError("CUDA out of memory (simulated)")
        return self.fc(x.flatten(1))


def _pickled(tmp_path, module) -> str:
    path = tmp_path / f"{type(module).__name__}.pt"
    torch.save(module, path)
    (tmp_path / f"{type(module).__name__}.json").write_text(json.dumps({"input_shape": [1, 8, 8]}))
    return str(path)


@pytest.mark.parametrize("net, words", [
    (TupleNet, "returns a tuple"), (DictNet, "returns a dict"), (OneRowNet, "shape (1, 10) for 2 images"),
    (IntegerNet, "torch.int64 scores"), (SmallBatchesOnlyNet, "failed on a batch of"),
])
def test_models_that_do_not_return_one_row_of_scores_per_image_are_refused(tmp_path, digits, net, words):
    model = load_model(_pickled(tmp_path, net()), trust=True)
    with pytest.raises(WorkbenchError, match=words.replace("(", r"\(").replace(")", r"\)")):
        evaluate(JobContext("cpu"), model, digits)


def test_a_torchscript_model_returning_a_tuple_is_refused_and_its_warning_hidden(tmp_path, digits):
    path = tmp_path / "scripted.pt"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.jit.save(torch.jit.script(TupleNet()), path)
    (tmp_path / "scripted.json").write_text(json.dumps({"input_shape": [1, 8, 8]}))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model = load_model(path)
    assert not [w for w in caught if issubclass(w.category, FutureWarning)]
    with pytest.raises(WorkbenchError, match="returns a tuple"):
        evaluate(JobContext("cpu"), model, digits)


@pytest.mark.parametrize("descriptor, words", [
    ("[1, 2, 3]", "JSON list, not an object"), ('{"input_shape": 7}', "input_shape 7"),
    ('{"input_shape": [1, 28]}', "input_shape"), ('{"class_names": "abc"}', "class_names"),
    ('{"arch": 5}', "arch 5"), (b"\xff\xfe{}", "UTF-8"),
], ids=["list", "shape-7", "shape-2d", "names-text", "arch-number", "not-utf8"])
def test_bad_descriptors_are_refused(tmp_path, digits_model_file, descriptor, words):
    copy = tmp_path / "m.pt"
    copy.write_bytes(digits_model_file.read_bytes())
    target = tmp_path / "m.json"
    target.write_bytes(descriptor if isinstance(descriptor, bytes) else descriptor.encode())
    with pytest.raises(WorkbenchError, match=words.replace("[", r"\[")):
        load_model(copy)


def test_wrong_class_names_are_named_as_such_not_as_wrong_weights(tmp_path, digits_model):
    info = {"name": "d", "arch": "digits-net", "class_names": ["a", "b", "c"], "input_shape": [1, 8, 8]}
    path = save_checkpoint(tmp_path / "d.pt", digits_model.module, "digits-net", info)
    with pytest.raises(WorkbenchError, match="names 3 classes, but its weights have 10 outputs"):
        load_model(path)


def test_an_empty_model_name_and_a_pipe_are_refused(tmp_path):
    with pytest.raises(WorkbenchError, match="No model was named"):
        load_model("")
    fifo = tmp_path / "model.pt"
    os.mkfifo(fifo)
    with pytest.raises(WorkbenchError, match="a pipe"):
        load_model(fifo)


def test_a_garbage_export_archive_is_one_line_without_torch_log(tmp_path, caplog):
    path = tmp_path / "garbage.pt2"
    path.write_bytes(b"\x00" + np.random.default_rng(1).bytes(2999))  # seeded: the same garbage every run
    with caplog.at_level(logging.WARNING):
        with pytest.raises(WorkbenchError, match="not a readable torch.export archive") as caught:
            load_model(path)
    assert "warnings above" not in str(caught.value)
    assert not [r for r in caplog.records if r.name.startswith("torch")]


def test_a_bare_state_dict_that_fits_no_architecture_or_several_says_so(tmp_path, isolated_plugins):
    from workbench.core.models.architectures import Architecture, get_architecture, register_architecture

    torch.save({"w": torch.zeros(3, 3)}, tmp_path / "odd.pt")
    with pytest.raises(WorkbenchError, match="fit none of the known architectures"):
        load_model(tmp_path / "odd.pt")
    twin = get_architecture("digits-net")
    register_architecture(Architecture("digits-twin", twin.build, twin.input_shape))
    torch.save(twin.build(10).state_dict(), tmp_path / "twin.pt")
    with pytest.raises(WorkbenchError, match="fit 2 architectures: digits-net, digits-twin") as caught:
        load_model(tmp_path / "twin.pt")
    assert "--arch" in caught.value.hint


def test_nan_pixels_are_blamed_on_the_input_not_the_model(digits_model, digits):
    import numpy as np

    from workbench.core.data.dataset import Split
    from workbench.core.models.training import predict

    images = digits.split("test").numpy(np.arange(20))
    images[7, 0, 3, 3] = np.nan  # a stored test set that slipped past the loaders' checks
    with pytest.raises(WorkbenchError, match="image 7 has NaN or infinite pixels"):
        predict(JobContext("cpu"), digits_model, Split(images, np.zeros(20, np.int64)), what="the test set")


def test_a_torchscript_model_is_said_plainly_to_work_for_outputs_not_for_layers_or_training(tmp_path, digits, digits_model):
    """Every job that reads layers or trains refuses a TorchScript model with the same statement and the
    state_dict route; those that need only outputs and input gradients work with it."""
    from workbench.core.coverage import measure_coverage
    from workbench.core.importance.ablation import ablation_check
    from workbench.core.importance.neuron_importance import compute_importance
    from workbench.core.models.layers import layer_catalogue
    from workbench.core.robustness.retraining import fine_tune
    from workbench.core.robustness.scores import score_inputs

    path = tmp_path / "scripted.pt"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.jit.save(torch.jit.script(digits_model.module), path)
    (tmp_path / "scripted.json").write_text(json.dumps({"input_shape": [1, 8, 8], "class_names": digits.class_names}))
    model = load_model(path)
    layer = next(name for name, m in digits_model.module.named_modules() if isinstance(m, nn.Linear))
    ctx = JobContext("cpu")
    for run in (lambda: layer_catalogue(model.module, (1, 8, 8)),
                lambda: compute_importance(ctx, model, digits, layer),
                lambda: measure_coverage(ctx, model, digits, layer, ["nc"]),
                lambda: measure_coverage(ctx, model, digits, None, ["kmnc"]),
                lambda: ablation_check(ctx, model, digits, layer, [0]),
                lambda: fine_tune(ctx, model, digits.split("train"), epochs=1)):
        with pytest.raises(WorkbenchError) as refused:
            run()
        assert "TorchScript" in refused.value.message and "state_dict" in refused.value.hint
    assert evaluate(ctx, model, digits)["accuracy"] == evaluate(ctx, digits_model, digits)["accuracy"]
    test = digits.split("test")
    x = test.numpy(range(8))
    scores = score_inputs(ctx, model, x, test.labels[:8], x0=x, eps=0.1)
    assert scores["fol_linf"].shape == (8,)

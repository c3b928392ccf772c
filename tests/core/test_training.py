"""Training and evaluation as jobs; the job context (progress, cancel, partial results, device)."""

from __future__ import annotations

import threading

import numpy as np
import pytest
import torch

from workbench.core.errors import Cancelled, WorkbenchError
from workbench.core.execution.jobs import JobContext, device_description, resolve_device
from workbench.core.models.architectures import get_architecture
from workbench.core.models.model_io import LoadedModel, ModelInfo
from workbench.core.models.training import check_compatible, evaluate, train


# --- evaluation against a brute-force loop ------------------------------------------------------------

def brute_force(model, split, num_classes):
    """One image at a time, plain Python counting."""
    confusion = [[0] * num_classes for _ in range(num_classes)]
    predictions = []
    with torch.no_grad():
        for i in range(len(split)):
            x = split.tensor(slice(i, i + 1))
            p = int(model.module(x)[0].argmax())
            predictions.append(p)
            confusion[int(split.labels[i])][p] += 1
    correct = sum(confusion[c][c] for c in range(num_classes))
    per_class = [confusion[c][c] / sum(confusion[c]) if sum(confusion[c]) else None for c in range(num_classes)]
    return predictions, confusion, correct / len(split), per_class


def test_evaluate_matches_brute_force(digits_model, digits):
    result = evaluate(JobContext("cpu"), digits_model, digits, "test", batch_size=64)
    preds, confusion, acc, per_class = brute_force(digits_model, digits.split("test"), 10)
    assert result["predictions"].tolist() == preds
    assert result["confusion"].tolist() == confusion
    assert result["accuracy"] == pytest.approx(acc, abs=1e-12)
    assert list(result["per_class_accuracy"].values()) == pytest.approx(per_class)
    assert list(result["per_class_accuracy"]) == digits.class_names
    assert result["n"] == len(digits.split("test")) == result["confusion"].sum()
    assert 0.85 <= result["accuracy"] < 1.0  # trained, and not trivially perfect


def test_per_class_accuracy_of_an_absent_class_is_none(digits_model, digits):
    from workbench.core.data.dataset import Dataset, DatasetCard

    test = digits.split("test")
    keep = np.flatnonzero(test.labels != 3)
    ds = Dataset("no-threes", digits.class_names, {"test": test.subset(keep)}, DatasetCard("t", "s", "l"))
    result = evaluate(JobContext("cpu"), digits_model, ds)
    assert result["per_class_accuracy"]["3"] is None
    assert result["confusion"][3].sum() == 0


def test_evaluate_reports_progress_per_batch(digits_model, digits):
    reports = []
    ctx = JobContext("cpu", on_progress=lambda d, t, m: reports.append((d, t)))
    evaluate(ctx, digits_model, digits, "test", batch_size=100)
    n = len(digits.split("test"))
    assert reports == [(min(s + 100, n), n) for s in range(0, n, 100)]


# --- training -----------------------------------------------------------------------------------------

def test_training_learns_reports_and_is_reproducible(digits):
    partials, progress = [], []
    ctx = JobContext("cpu", on_progress=lambda d, t, m: progress.append((d, t, m)), on_partial=partials.append)
    result = train(ctx, "digits-net", digits, epochs=4, batch_size=64, lr=3e-3, seed=5)
    steps = -(-len(digits.split("train")) // 64)
    assert [p[:2] for p in progress] == [(i, 4 * steps) for i in range(1, 4 * steps + 1)]
    assert progress[-1][2] == "epoch 4/4"
    assert [p["epoch"] for p in partials] == [1, 2, 3, 4] and partials == result.history
    assert partials[-1]["train_loss"] < partials[0]["train_loss"]
    assert partials[-1]["test_accuracy"] > 0.6
    assert result.model.info.arch == "digits-net" and result.model.info.class_names == digits.class_names
    assert not result.model.module.training
    again = train(JobContext("cpu"), "digits-net", digits, epochs=4, batch_size=64, lr=3e-3, seed=5)
    assert again.model.fingerprint() == result.model.fingerprint()
    other = train(JobContext("cpu"), "digits-net", digits, epochs=1, batch_size=64, lr=3e-3, seed=6)
    assert other.model.fingerprint() != result.model.fingerprint()


def test_history_test_accuracy_is_the_evaluation_accuracy(digits):
    result = train(JobContext("cpu"), "digits-net", digits, epochs=2, batch_size=64, lr=3e-3)
    assert result.history[-1]["test_accuracy"] == evaluate(JobContext("cpu"), result.model, digits)["accuracy"]


def test_training_refuses_bad_settings(digits, fashion_slice):
    with pytest.raises(WorkbenchError, match="epochs"):
        train(JobContext("cpu"), "digits-net", digits, epochs=0)
    with pytest.raises(WorkbenchError) as err:
        train(JobContext("cpu"), "lenet5", digits, epochs=1)
    assert "(1, 28, 28)" in err.value.message and "(1, 8, 8)" in err.value.message
    with pytest.raises(WorkbenchError, match="Unknown architecture"):
        train(JobContext("cpu"), "nope", digits, epochs=1)
    with pytest.raises(WorkbenchError, match="no split 'valid'"):
        train(JobContext("cpu"), "digits-net", digits, epochs=1, split="valid")


def test_diverging_training_stops_with_a_hint(digits):
    with pytest.raises(WorkbenchError) as err:
        train(JobContext("cpu"), "digits-net", digits, epochs=3, lr=1e20)
    assert "diverged" in err.value.message and "--lr" in err.value.hint


# --- cancellation --------------------------------------------------------------------------------------

def test_cancel_during_training_stops_within_one_batch(digits):
    calls = []

    def on_progress(done, total, message):
        calls.append(done)
        if done == 3:
            ctx.cancel()

    ctx = JobContext("cpu", on_progress=on_progress)
    with pytest.raises(Cancelled):
        train(ctx, "digits-net", digits, epochs=5, batch_size=32)
    assert calls == [1, 2, 3]  # the next batch's report raised: no further work was done


def test_cancel_during_evaluation_gives_no_result(digits_model, digits):
    ctx = JobContext("cpu", on_progress=lambda d, t, m: ctx.cancel())
    with pytest.raises(Cancelled):
        evaluate(ctx, digits_model, digits, "test", batch_size=50)


def test_cancel_from_another_thread(digits):
    started = threading.Event()
    outcome = {}
    ctx = JobContext("cpu", on_progress=lambda d, t, m: started.set())

    def worker():
        try:
            train(ctx, "digits-net", digits, epochs=500, batch_size=16)
            outcome["result"] = "finished"
        except Cancelled:
            outcome["result"] = "cancelled"

    thread = threading.Thread(target=worker)
    thread.start()
    assert started.wait(30)
    ctx.cancel()
    thread.join(30)
    assert not thread.is_alive()
    assert outcome["result"] == "cancelled"
    assert ctx.cancelled


def test_check_raises_only_after_cancel():
    ctx = JobContext("cpu")
    ctx.check()
    ctx.progress(1, 2)
    ctx.cancel()
    with pytest.raises(Cancelled):
        ctx.check()
    with pytest.raises(Cancelled):
        ctx.progress(2, 2)


def test_partial_results_reach_the_listener():
    got = []
    JobContext("cpu", on_partial=got.append).partial({"row": 1})
    JobContext("cpu").partial({"ignored": True})  # no listener: fine
    assert got == [{"row": 1}]


# --- device ---------------------------------------------------------------------------------------------

def test_device_auto_and_explicit():
    expected = "cuda" if torch.cuda.is_available() else "cpu"
    assert JobContext().device.type == expected
    assert JobContext("auto").device.type == expected
    assert resolve_device("cpu") == torch.device("cpu")
    assert device_description(torch.device("cpu")) == "CPU"


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU")
def test_cuda_without_a_gpu_is_a_clear_error():
    with pytest.raises(WorkbenchError) as err:
        JobContext("cuda").device
    assert "no CUDA GPU" in err.value.message and "--device cpu" in err.value.hint


def test_unknown_device_name():
    with pytest.raises(WorkbenchError, match="Unknown device 'toaster'"):
        resolve_device("toaster")


# --- model/dataset compatibility --------------------------------------------------------------------------

def test_input_shape_mismatch_is_named(digits_model, fashion_slice):
    with pytest.raises(WorkbenchError) as err:
        evaluate(JobContext("cpu"), digits_model, fashion_slice)
    assert "(1, 8, 8)" in err.value.message and "(1, 28, 28)" in err.value.message


def test_unknown_input_shape_that_does_not_fit_fails_cleanly(digits_model, fashion_slice):
    digits_model.info.input_shape = None  # e.g. a TorchScript file without a descriptor
    with pytest.raises(WorkbenchError) as err:
        check_compatible(digits_model, fashion_slice)
    assert "fails on" in err.value.message


def test_class_count_mismatch_is_named(digits):
    torch.manual_seed(0)
    module = get_architecture("digits-net").build(4).eval()
    model = LoadedModel(module, ModelInfo("four", "", "state_dict", input_shape=(1, 8, 8)))
    with pytest.raises(WorkbenchError) as err:
        evaluate(JobContext("cpu"), model, digits)
    assert "(4,)" in err.value.message and "10 classes" in err.value.message


def test_nan_model_is_refused_with_the_first_bad_image(digits_model, digits):
    with torch.no_grad():
        digits_model.module.fc2.bias[3] = float("nan")
    with pytest.raises(WorkbenchError) as err:
        evaluate(JobContext("cpu"), digits_model, digits)
    assert "NaN" in err.value.message and "image 0" in err.value.message


def test_nan_for_some_images_only(digits_model, digits):
    """A model that breaks on one image: the message points at that image, across batch borders."""
    inner = digits_model.module
    target = 77

    class Poisoned(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = inner
            self.seen = 0

        def forward(self, x):
            out = self.inner(x)
            if self.seen <= target < self.seen + len(x) and len(x) > 2:
                out[target - self.seen, 0] = float("inf")
            self.seen += len(x) if len(x) > 2 else 0
            return out

    digits_model.module = Poisoned()
    with pytest.raises(WorkbenchError, match=f"test image {target}"):
        evaluate(JobContext("cpu"), digits_model, digits, batch_size=50)


def test_empty_split_is_refused(digits_model, digits):
    from workbench.core.data.dataset import Dataset, DatasetCard

    ds = Dataset("half", digits.class_names, {"train": digits.split("train"), "test": digits.split("test").subset([])},
                 DatasetCard("t", "s", "l"))
    with pytest.raises(WorkbenchError) as err:
        evaluate(JobContext("cpu"), digits_model, ds, "test")
    assert "holds no images" in err.value.message and "train" in err.value.hint

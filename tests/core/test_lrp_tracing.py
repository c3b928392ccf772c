"""LRP's plan of a residual network is traced with torch.fx, which patches torch for the whole process while
it traces: jobs on several threads (two views computing importance at once) trace one at a time and each
gets the whole plan ("CURRENT_PATCHER is None" and "not installed as a submodule" were two traces
undoing each other)."""

from __future__ import annotations

import sys
import threading

import torch
import torchvision

from workbench.core.importance.lrp.plan import fx_plan
from workbench.core.importance.lrp.rules import Composite


def test_traces_on_several_threads_at_once_each_get_the_whole_plan():
    torch.manual_seed(0)
    models = [torchvision.models.resnet18(num_classes=4) for _ in range(4)]
    alone = [node.name for node in fx_plan(models[0], Composite("lrp-0"))[0]]
    plans, errors = [], []
    start = threading.Barrier(len(models))

    def trace(model) -> None:
        start.wait()
        try:
            for _ in range(3):
                plans.append([node.name for node in fx_plan(model, Composite("lrp-0"))[0]])
        except Exception as exc:  # collected: the assertion below names it
            errors.append(f"{type(exc).__name__}: {exc}")

    threads = [threading.Thread(target=trace, args=(model,)) for model in models]
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # threads take turns as often as they can: unguarded traces meet every time
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        sys.setswitchinterval(interval)
    assert errors == []
    assert len(plans) == 12 and all(plan == alone for plan in plans)


def test_another_threads_forward_passes_run_while_a_model_is_traced():
    """torch.fx replaces `nn.Module.__call__` for the whole process while it traces; a training or evaluation job
    on another thread keeps computing as usual."""
    torch.manual_seed(0)
    traced = torchvision.models.resnet18(num_classes=4)
    other = torchvision.models.squeezenet1_0(num_classes=4).eval()
    x = torch.rand(1, 3, 32, 32)
    with torch.no_grad():
        expected = other(x)
    done, errors, passes = threading.Event(), [], []

    def forward_passes() -> None:
        while not done.is_set():
            try:
                with torch.no_grad():
                    passes.append(bool(torch.equal(other(x), expected)))
            except Exception as exc:  # collected: the assertion below names it
                errors.append(f"{type(exc).__name__}: {exc}")
                return

    thread = threading.Thread(target=forward_passes)
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    thread.start()
    try:
        for _ in range(5):
            fx_plan(traced, Composite("lrp-0"))
    finally:
        done.set()
        thread.join()
        sys.setswitchinterval(interval)
    assert errors == []
    assert passes and all(passes)

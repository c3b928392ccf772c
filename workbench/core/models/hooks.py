"""Forward hooks that act only on the forward passes of the thread that registered them, and only on the
call of a reused module they name.

Two jobs may run one model at the same time (the GUI runs long and interactive jobs side by side).
A hook on a shared module sees every thread's passes: one job's capture would record another's
batch, and an ablation's replacement would change another's outputs. Every hook the workbench
registers goes through `own_thread`, so each job sees only its own passes.

A module that a forward pass calls more than once (torchvision's ResNet blocks call their one `relu` twice)
is as many layers: its first call goes by the module's path (`layer1.0.relu`), the k-th by the path and
`#k` (`layer1.0.relu#2`). `hook_layer` hooks the call a layer name names.
"""

from __future__ import annotations

import threading
from typing import Callable

CALL_MARK = "#"  # `layer1.0.relu#2`: the second call of module layer1.0.relu in a forward pass


def layer_call(name: str) -> tuple[str, int]:
    """'layer1.0.relu#2' → ('layer1.0.relu', 2); a name without a mark is the module's first call."""
    path, mark, call = name.rpartition(CALL_MARK)
    if mark and call.isdigit() and int(call) >= 1:
        return path, int(call)
    return name, 1


def call_name(path: str, call: int) -> str:
    """The layer name of a module's `call`-th call in a forward pass."""
    return path if call == 1 else f"{path}{CALL_MARK}{call}"


def own_thread(hook: Callable) -> Callable:
    """`hook(module, inputs, output)` (or a pre-hook's `hook(module, inputs)`), run only on the registering
    thread's forward passes."""
    owner = threading.get_ident()

    def guarded(module, *arguments):  # (inputs, output) of a forward hook, (inputs,) of a pre-hook
        if threading.get_ident() == owner:
            return hook(module, *arguments)
        return None

    return guarded


def private_copy(module):
    """A deep copy of `module` for one job to train or change, without the hooks other jobs had
    registered on the original when it was copied (they would fire on the copy's passes)."""
    import copy

    clone = copy.deepcopy(module)
    for sub in clone.modules():
        sub._forward_hooks.clear()
        sub._forward_pre_hooks.clear()
    return clone


class LayerHook:
    """`hook(module, inputs, output)` on the call of a layer name (see `layer_call`), on this thread's passes;
    `remove()` takes it off. The model's own pre-hook starts each forward pass's count of calls."""

    def __init__(self, model, name: str, hook: Callable):
        path, self.call = layer_call(name)
        modules = dict(model.named_modules())
        if path not in modules:
            raise KeyError(name)
        self.count = 0

        def start(module, inputs):
            self.count = 0

        def on_call(module, inputs, output):
            self.count += 1
            return hook(module, inputs, output) if self.count == self.call else None

        self.handles = [model.register_forward_pre_hook(own_thread(start)),
                        modules[path].register_forward_hook(own_thread(on_call))]

    def remove(self) -> None:
        for handle in self.handles:
            handle.remove()


def hook_layer(model, name: str, hook: Callable) -> LayerHook:
    """`LayerHook(model, name, hook)`: a forward hook on the layer `name` names, call included."""
    return LayerHook(model, name, hook)

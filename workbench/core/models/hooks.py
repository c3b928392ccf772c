"""Forward hooks that act only on the forward passes of the thread that registered them.

Two jobs may run one model at the same time (the GUI runs long and interactive jobs side by side).
A hook on a shared module sees every thread's passes: one job's capture would record another's
batch, and an ablation's replacement would change another's outputs. Every hook the workbench
registers goes through `own_thread`, so each job sees only its own passes.
"""

from __future__ import annotations

import threading
from typing import Callable


def own_thread(hook: Callable) -> Callable:
    """`hook(module, inputs, output)`, run only on the registering thread's forward passes."""
    owner = threading.get_ident()

    def guarded(module, inputs, output):
        if threading.get_ident() == owner:
            return hook(module, inputs, output)
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

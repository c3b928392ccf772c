"""Criteria by name: the built-ins, and those plugins add with `PluginRegistry.add_criterion`.

A factory is any callable taking keyword options and returning a `Criterion` (usually the class).
A plugin's criterion is one file: a `Criterion` subclass and `registry.add_criterion(name, cls)`.
"""

from __future__ import annotations

import inspect
from typing import Callable

from workbench.core.coverage.idc import IDC
from workbench.core.coverage.neuron import KMNC, NBC, NC, SNAC, TKNC, TKNP
from workbench.core.coverage.protocol import Criterion
from workbench.core.coverage.surprise import DSA, LSA, MDSA
from workbench.core.errors import WorkbenchError

BUILTIN: dict[str, Callable[..., Criterion]] = {
    c.name: c for c in (IDC, NC, KMNC, NBC, SNAC, TKNC, TKNP, LSA, DSA, MDSA)}


def _plugin_criteria() -> dict[str, Callable[..., Criterion]]:
    from workbench.core import plugins

    return dict(plugins.REGISTRY.extensions.get("criterion", {}))


def criterion_factories() -> dict[str, Callable[..., Criterion]]:
    """Every known criterion name → factory; a plugin cannot shadow a built-in."""
    plugins = {name: f for name, f in _plugin_criteria().items() if name not in BUILTIN}
    return {**BUILTIN, **plugins}  # built-ins first, in their usual order


def criterion_names() -> list[str]:
    return list(criterion_factories())


def create_criterion(name: str, **options) -> Criterion:
    """A new criterion by name; unknown names and options are refused with the valid ones listed."""
    factories = criterion_factories()
    key = str(name).lower()
    if key not in factories:
        raise WorkbenchError(f"Unknown coverage criterion {name!r}.", f"Known criteria: {', '.join(factories)}.")
    factory = factories[key]
    try:
        accepted = inspect.signature(factory).parameters
    except (TypeError, ValueError):
        accepted = None
    if accepted is not None and not any(p.kind is p.VAR_KEYWORD for p in accepted.values()):
        unknown = sorted(set(options) - set(accepted))
        if unknown:
            raise WorkbenchError(f"Criterion {key!r} has no option(s) {', '.join(unknown)}.",
                                 f"Its options: {', '.join(p for p in accepted if p != 'self')}.")
    try:
        criterion = factory(**options)
    except WorkbenchError:
        raise
    except Exception as exc:  # a plugin's factory failing is the plugin's problem, told clearly
        raise WorkbenchError(f"Criterion {key!r} could not be created: {type(exc).__name__}: {exc}",
                             "Check its options; if it comes from a plugin, check the plugin.") from exc
    if not isinstance(criterion, Criterion):
        raise WorkbenchError(f"The factory of criterion {key!r} returned a {type(criterion).__name__}, "
                             "not a coverage criterion.",
                             "A criterion must subclass workbench.core.coverage.Criterion.")
    return criterion

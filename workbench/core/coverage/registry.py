"""Criteria by name: the built-ins, and those plugins add with `PluginRegistry.add_criterion`.

A factory is any callable taking keyword options and returning a `Criterion` (usually the class).
A plugin's criterion is one file: a `Criterion` subclass and `registry.add_criterion(name, cls)`.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Callable

from workbench.core.coverage.idc import IDC
from workbench.core.coverage.neuron import KMNC, NBC, NC, SNAC, TKNC, TKNP
from workbench.core.coverage.protocol import Criterion
from workbench.core.coverage.surprise import DSA, LSA, MDSA
from workbench.core.errors import WorkbenchError

BUILTIN: dict[str, Callable[..., Criterion]] = {
    c.name: c for c in (IDC, NC, KMNC, NBC, SNAC, TKNC, TKNP, LSA, DSA, MDSA)}


@dataclass(frozen=True)
class CriterionInfo:
    """What a menu, a table header and a tooltip say about a criterion, and how it is measured:
    criteria of one `group` run in one pass and fail together."""

    name: str
    title: str
    help: str
    default: bool = False  # measured unless the user unticks it
    group: str = ""


# The built-ins in the order reports list them. A group is measured in one pass and fails as one;
# IDC and surprise adequacy get their own so an m the layer cannot give, or a singular density,
# does not stop the neuron criteria.
BUILTIN_INFO = (
    CriterionInfo("idc", "IDC", "Importance-Driven Coverage: combinations of the important neurons' activation "
                  "clusters", True, "idc"),
    CriterionInfo("nc", "NC", "Neuron Coverage: neurons whose scaled value exceeds 0.75 for some input", True, "neuron"),
    CriterionInfo("kmnc", "KMNC", "k-Multisection Neuron Coverage: sections of each neuron's training range "
                  "(k = 1000)", True, "neuron"),
    CriterionInfo("nbc", "NBC", "Neuron Boundary Coverage: values below or above the training range", True, "neuron"),
    CriterionInfo("snac", "SNAC", "Strong Neuron Activation Coverage: values above the training range", True, "neuron"),
    CriterionInfo("tknc", "TKNC", "Top-k Neuron Coverage: neurons among the 3 most active of their layer for some "
                  "input", True, "neuron"),
    CriterionInfo("tknp", "TKNP", "Top-k Neuron Patterns: distinct patterns of top-3 neurons (a count, no "
                  "denominator)", False, "neuron"),
    CriterionInfo("lsa", "LSC", "Likelihood-based Surprise Coverage (slower: a density per class)", False, "surprise"),
    CriterionInfo("dsa", "DSC", "Distance-based Surprise Coverage (slower: nearest training traces)", False, "surprise"),
    CriterionInfo("mdsa", "MDSC", "Mahalanobis-distance Surprise Coverage (slower)", False, "surprise"),
)


def _first_line(text: str | None) -> str:
    return next((line.strip() for line in (text or "").splitlines() if line.strip()), "")


def criterion_catalogue() -> list[CriterionInfo]:
    """Every criterion a view can offer: the built-ins, then the plugins' (off by default, each
    measured on its own so a failing plugin stops only itself)."""
    infos = list(BUILTIN_INFO)
    for name, factory in criterion_factories().items():
        if name not in BUILTIN:
            title = getattr(factory, "title", "") or name
            infos.append(CriterionInfo(name, title, _first_line(getattr(factory, "__doc__", "")) or
                                       f"{title} (from a plugin)", False, f"plugin:{name}"))
    return infos


def criterion_groups(names) -> list[tuple[str, ...]]:
    """The chosen criteria as groups measured together, in catalogue order."""
    groups: dict[str, list[str]] = {}
    for info in criterion_catalogue():
        if info.name in names:
            groups.setdefault(info.group or info.name, []).append(info.name)
    return [tuple(g) for g in groups.values()]


PLUGIN_CRITERIA: dict[str, Callable[..., Criterion]] = {}  # what plugins added (`core.plugins` fills it)


def add_plugin_criterion(name: str, factory: Callable[..., Criterion]) -> None:
    PLUGIN_CRITERIA[name] = factory


def _plugin_criteria() -> dict[str, Callable[..., Criterion]]:
    return dict(PLUGIN_CRITERIA)


def criterion_factories() -> dict[str, Callable[..., Criterion]]:
    """Every known criterion name → factory, built-ins first in their usual order; a plugin replaces a
    built-in only when it registered with `override=True` (the plugin registry refuses it otherwise)."""
    return {**BUILTIN, **_plugin_criteria()}


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

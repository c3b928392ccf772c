"""Readable labels for a project's artifacts, made from what each index entry records.

An artifact's name is a key ("coverage-fit-lenet5-fashion-idc-f8cf05cd"); its index entry holds the
kind and the provenance: model, dataset, layer, test set, criterion, time. `describe_artifact` turns
an entry into a heading for its kind ("Coverage", "Coverage fits"), a one-line title that says what
it is, for which model, layer and set, and when ("IDC · lenet5-fashion · fc2 · test · 14:02"), and
the longer lines a tooltip shows. Nothing here reads an artifact's file.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime

SEPARATOR = " · "
#: Kinds in the order a project lists them, with their headings and what one of them is called.
KINDS = {
    "evaluation": ("Evaluations", "evaluation"),
    "importance": ("Importance", "importance result"),
    "ablation": ("Ablation checks", "ablation check"),
    "coverage": ("Coverage", "coverage result"),
    "coverage-fit": ("Coverage fits", "fitted coverage criterion"),
    "robustness": ("Robustness runs", "robustness run"),
    "testset": ("Test sets", "test set"),
}
MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")
MANY_LAYERS = 3  # more layers than this are counted ("7 layers"), fewer are named
#: What datasets call their splits; any other name a result records is a test set the project stores,
#: whose name is the project's own and is shown without a dataset.
SPLIT_NAMES = ("train", "test", "val", "valid", "validation")


@dataclass(frozen=True)
class ArtifactLabel:
    kind: str
    heading: str  # the heading of its kind, e.g. "Coverage fits"
    noun: str  # what one is called, e.g. "fitted coverage criterion"
    title: str  # one line: what, model, layer, set, when
    details: list[str] = field(default_factory=list)  # tooltip lines


def kind_heading(kind: str) -> str:
    return KINDS[kind][0] if kind in KINDS else kind.replace("-", " ").replace("_", " ").capitalize()


def kind_order(kind: str) -> int:
    """Where a kind's group stands: the known kinds in their order, then the others."""
    return list(KINDS).index(kind) if kind in KINDS else len(KINDS)


def created_at(how: dict) -> datetime | None:
    """When an artifact was made, in local time (None when it does not say)."""
    text = how.get("created")
    if not isinstance(text, str):
        return None
    # Not strptime: its first call builds locale tables, 18 ms on the window's thread. The offset is
    # written as +0100 (`%z`), which `fromisoformat` reads from Python 3.11 on only: given its colon here.
    try:
        return datetime.fromisoformat(re.sub(r"([+-]\d\d)(\d\d)$", r"\1:\2", text)).astimezone()
    except ValueError:
        return None


def short_time(when: datetime | None, now: datetime | None = None) -> str:
    """'14:02' today, '3 Nov 14:02' this year, '3 Nov 2024' before; '' when unknown."""
    if when is None:
        return ""
    now = now or datetime.now().astimezone()
    day = f"{when.day} {MONTHS[when.month - 1]}"
    if when.date() == now.date():
        return when.strftime("%H:%M")
    if when.year == now.year:
        return f"{day} {when.strftime('%H:%M')}"
    return f"{day} {when.year}"


def layers_text(layers) -> str:
    """'fc1', 'conv1 + fc1', or '7 layers'."""
    if isinstance(layers, str):
        return layers
    layers = [str(layer) for layer in layers or ()]
    if not layers:
        return ""
    return " + ".join(layers) if len(layers) <= MANY_LAYERS else f"{len(layers)} layers"


def rule_text(rule) -> str:
    """'LRP-0' from a composite's description (a mapping of layer types to rules), or the text given."""
    if isinstance(rule, str):
        return rule
    if isinstance(rule, dict):
        names = []
        for value in rule.values():
            name = value.get("name") if isinstance(value, dict) else None
            if isinstance(name, str) and name not in names:
                names.append(name)
        return " / ".join(n.upper() if n.lower().startswith("lrp") else n for n in names)
    return ""


def criterion_title(name: str) -> str:
    """A criterion's short title as the registry gives it ('LSC' for lsa), else its name in capitals."""
    from workbench.core.coverage.registry import criterion_catalogue

    return next((info.title for info in criterion_catalogue() if info.name == name), name.upper())


def _set_text(dataset: str, split: str, measured=None, images=None, show_dataset: bool = True) -> str:
    """'test', 'fashion-mnist:test', 'test (874)' for part of it; a stored set by its name alone."""
    split_of_dataset = split in SPLIT_NAMES
    text = f"{dataset}:{split}" if show_dataset and dataset and split_of_dataset else split or dataset
    if isinstance(measured, int) and measured != images:
        text += f" ({measured:,})"
    return text


def _joined(*parts) -> str:
    return SEPARATOR.join(str(p) for p in parts if p not in (None, ""))


def describe_artifact(name: str, entry: dict, only_model: str = "", only_dataset: str = "",
                      now: datetime | None = None) -> ArtifactLabel:
    """The heading, title and tooltip lines of the artifact `name` with index entry `entry`.

    A project with one model and one dataset need not repeat them on every line: the title leaves
    out the model if it is `only_model`, and names the split alone ("test", not "fashion-mnist:test")
    if the dataset is `only_dataset`. The tooltip lines always name both."""
    kind = str(entry.get("kind", ""))
    how = entry.get("provenance") if isinstance(entry.get("provenance"), dict) else {}
    when = created_at(how)
    time = short_time(when, now)
    model = str(how.get("model") or "")
    dataset = str(how.get("dataset") or "")
    shown_model = "" if only_model and model == only_model else model
    show_dataset = not (only_dataset and dataset == only_dataset)
    identity = how.get("identity") or (how.get("state") or {}).get("identity")  # a fit keeps it in its state
    params = identity.get("params", {}) if isinstance(identity, dict) else {}
    details: list[str] = []

    if kind == "evaluation":
        accuracy = how.get("accuracy")
        what = f"{accuracy * 100:.1f} %" if isinstance(accuracy, (int, float)) else "Accuracy"
        split = _set_text(dataset, str(how.get("split") or ""), show_dataset=show_dataset)
        title = _joined(f"{what} on {split}" if split else what, shown_model, time)
        details.append(f"Accuracy of {model} on {dataset}:{how.get('split', '?')}"
                       + (f": {accuracy * 100:.1f} % of {how['n']:,} images" if isinstance(how.get("n"), int)
                          and isinstance(accuracy, (int, float)) else ""))
    elif kind == "importance":
        rule = rule_text(how.get("rule"))
        split = _set_text(dataset, str(how.get("split") or ""), show_dataset=show_dataset)
        title = _joined(rule or "Relevance", shown_model, how.get("layer"), split, time)
        details.append(f"Neuron relevance of {how.get('layer', '?')} in {model}, {rule or 'LRP'}, over "
                       + (f"{how['correct']:,} correctly classified " if isinstance(how.get("correct"), int) else "")
                       + f"{dataset}:{how.get('split', '?')} images")
    elif kind == "ablation":
        neurons = how.get("important_neurons")
        count = len(neurons) if isinstance(neurons, list) else how.get("m")
        mode = {"zero": "zeroed", "mean": "set to mean"}.get(str(how.get("mode")), str(how.get("mode") or "ablated"))
        what = f"Top {count} {mode}" if count else mode.capitalize()
        split = _set_text(dataset, str(how.get("split") or ""), show_dataset=show_dataset)
        title = _joined(what, shown_model, how.get("layer"), split, time)
        base, important = how.get("baseline_accuracy"), how.get("important_accuracy")
        if isinstance(base, (int, float)) and isinstance(important, (int, float)):
            details.append(f"Accuracy {base * 100:.1f} % → {important * 100:.1f} % with the {count} most "
                           f"relevant neurons of {how.get('layer', '?')} {mode}")
    elif kind in ("coverage", "coverage-fit"):
        criterion = str(how.get("criterion") or params.get("criterion") or "")
        layer = layers_text(params.get("layer") or params.get("layers"))
        measured = how.get("train" if kind == "coverage-fit" else "test")
        measured = measured if isinstance(measured, dict) else {}
        split = _set_text(dataset, str(measured.get("split") or ""), measured.get("measured"),
                          measured.get("images"), show_dataset=show_dataset)
        what = criterion_title(criterion) if criterion else "Coverage"
        if isinstance(params.get("m"), int):  # IDC's m: how many important neurons combine
            what += f" m={params['m']}"
        title = _joined(what, shown_model, layer, split, time)
        images = measured.get("measured", measured.get("images"))
        inputs = f", {images:,} inputs" if isinstance(images, int) else ""
        if kind == "coverage-fit":
            details.append(f"{criterion_title(criterion)} fitted on {measured.get('dataset', dataset)}:"
                           f"{measured.get('split', '?')}{inputs}, for {model}")
        else:
            details.append(f"{criterion_title(criterion)} of {measured.get('dataset', dataset)}:"
                           f"{measured.get('split', '?')}{inputs} in {model}")
        if isinstance(params.get("layers"), list) and len(params["layers"]) > MANY_LAYERS:
            details.append("Layers: " + ", ".join(map(str, params["layers"])))
    elif kind == "robustness":
        what = how.get("what")
        rows = how.get("rows")
        count = len(rows) if isinstance(rows, list) else None
        if what == "convergence":
            title_what = "Convergence" + (f" ({count} rounds)" if count else "")
        else:
            title_what = "Retraining" + (f" ({count} runs)" if count else "")
        title = _joined(title_what, shown_model, time)  # the model says which dataset; the tooltip names it
        details.append(f"{'Convergence loop' if what == 'convergence' else 'Retraining experiment'} of {model or '?'}"
                       f" on {dataset or '?'}")
        if how.get("stop_reason"):
            details.append(f"Stopped: {how['stop_reason']}")
    elif kind == "testset":
        title = _joined(name, time)
    else:
        title = _joined(name, shown_model, time)

    details.insert(0, name)
    if when is not None:
        details.append(f"Made {when.strftime('%Y-%m-%d %H:%M')}")
    heading, noun = KINDS.get(kind, (kind_heading(kind), "result"))
    return ArtifactLabel(kind, heading, noun, title or name, details)

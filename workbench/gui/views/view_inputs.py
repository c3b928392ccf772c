"""What a view needs before it can show anything: the selected model and dataset, loaded and compatible.

Shared by the analysis views: each says in its own words what it does with them, and while they are
missing, loading, broken or incompatible the view's stack shows why, with the button that helps.
"""

from __future__ import annotations

from collections.abc import Callable

from workbench.core.models.layers import WEIGHTED_TYPES, default_layer


def fitted_on(data) -> str:
    """The images relevance and coverage are fitted on, in words: "training images", or the split a
    dataset without a training split is fitted on instead."""
    split = data.fit_split
    return "training images" if split == "train" else f"{split} images (the dataset has no training split)"


def error_text(exc: BaseException) -> str:
    return f"{getattr(exc, 'message', None) or exc}\n{getattr(exc, 'hint', '')}".strip()


def duration_text(seconds: float | None) -> str:
    """'about 40 s', 'about 3 min': how long offered work takes on this machine."""
    if seconds is None:
        return "unknown time"
    if seconds < 90:
        return f"about {max(5, round(seconds / 5) * 5):.0f} s"
    return f"about {seconds / 60:.0f} min"


def ready_inputs(session, selection, stack, open_model: Callable[[], None], purpose: str, no_dataset_title: str):
    """The loaded model bundle and dataset, or (None, None) after `stack` says what is missing.

    `purpose` ends the no-model message ("its neurons are ranked here"); `no_dataset_title` is the
    no-dataset message's title. Loading starts here when needed; the view refreshes on its signals.
    """
    model, spec = selection.model, selection.dataset
    if model is None:
        stack.show_message("No model in this project", "Open a model file or add a bundled model from the "
                           f"Project menu; {purpose}.", [("Open model file…", open_model)])
        return None, None
    if spec is None:
        stack.show_message(no_dataset_title, "Add a dataset from the Project menu.")
        return None, None
    title = session.dataset_title(spec)
    if spec not in session.datasets:
        error = session.dataset_errors.get(spec)
        if error is not None:
            stack.show_message(f"{title} could not be loaded", error_text(error),
                               [("Try again", lambda: session.load_dataset(spec))])
        else:
            stack.show_message(f"Loading {title}…", busy=True)
            session.load_dataset(spec)
        return None, None
    if model not in session.models:
        error = session.model_errors.get(model)
        if error is not None:
            stack.show_message(f"{model} could not be loaded", error_text(error),
                               [("Try again", lambda: session.load_model(model))])
        else:
            stack.show_message(f"Loading {model}…", "Reading the weights and listing the layers.", busy=True)
            session.load_model(model)
        return None, None
    problem = session.compatibility_problem(model, spec)
    if problem:
        stack.show_message("This model does not fit this dataset",
                           problem + "\nChoose a dataset the model was made for in the tool bar.")
        return None, None
    return session.models[model], session.datasets[spec]


def initial_layer(catalogue) -> str | None:
    """The layer a view shows first: IDC's default layer, else the model's first Conv/Linear or first layer."""
    weighted = [layer.name for layer in catalogue if layer.type in WEIGHTED_TYPES]
    return default_layer(catalogue) or next(iter(weighted), catalogue[0].name if catalogue else None)


def fill_layers(view, bundle, verb: str) -> bool:
    """Fill `view.layer_box` with the model's layers (once per weights) and show the selected one.

    The view keeps `_layers` (names in box order) and `_catalogue_of`; the IDC default layer is
    marked. False, after saying why on `view.stack`, when the layers could not be listed.
    """
    if not bundle.catalogue:
        view.stack.show_message("The model's layers could not be listed",
                                bundle.catalogue_error or f"The model has no layers to {verb}.")
        return False
    if view._catalogue_of != (view.selection.model, bundle.fingerprint):
        default = default_layer(bundle.catalogue)
        view._layers = [layer.name for layer in bundle.catalogue]
        view.layer_box.clear()
        for layer in bundle.catalogue:
            text = f"{layer.name} — {layer.type}, {layer.neurons:,} neurons"
            view.layer_box.addItem(text + ("  (IDC default)" if layer.name == default else ""))
        view._catalogue_of = (view.selection.model, bundle.fingerprint)
    if view.selection.layer in view._layers:
        view.layer_box.setCurrentIndex(view._layers.index(view.selection.layer))
    return True

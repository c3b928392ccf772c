"""What the analysis views (Importance, Coverage) share: the layer picker, following the linked
selection, and one refresh that checks the inputs before the view shows its own content.

A subclass builds its widgets (and `self.stack`) in `__init__`, calls `self.refresh()` at the end,
and implements `show_inputs(bundle, data)` — called when the selected model and dataset are loaded
and fit, and the selected layer is one of the model's. It may override `show_neuron` and
`show_input` for the linked neuron and input.
"""

from __future__ import annotations

from PySide6.QtCore import Signal
from PySide6.QtWidgets import QComboBox, QWidget

from workbench.gui.session.selection import Selection
from workbench.gui.session.session import Session
from workbench.gui.views.view_inputs import fill_layers, initial_layer, ready_inputs


class AnalysisView(QWidget):
    """A view of one model, dataset and layer of the shared selection."""

    open_model_requested = Signal()

    # What the view says while its inputs are missing, and how its layer picker is named.
    purpose = "it is analysed here"  # ends "…add a bundled model from the Project menu; <purpose>."
    no_dataset_title = "No dataset"
    layer_verb = "analyse"  # "The model has no layers to <verb>."
    layer_picker_name = "layerPicker"
    layer_tip = "The layer to analyse"
    layer_width = 220

    def __init__(self, session: Session, selection: Selection, parent: QWidget | None = None):
        super().__init__(parent)
        self.session, self.selection = session, selection
        self._catalogue_of: tuple | None = None  # (model, fingerprint) the layer picker was filled for
        self._layers: list[str] = []
        self.layer_box = QComboBox()
        self.layer_box.setObjectName(self.layer_picker_name)
        self.layer_box.setMinimumWidth(self.layer_width)
        self.layer_box.setToolTip(self.layer_tip)
        self.layer_box.activated.connect(lambda i: 0 <= i < len(self._layers) and
                                         self.selection.set_layer(self._layers[i]))
        selection.changed.connect(self._on_selection)
        for signal in (session.model_loaded, session.model_failed, session.dataset_loaded, session.dataset_failed):
            signal.connect(lambda _: self.refresh())
        session.ready.connect(self.refresh)
        session.project_changed.connect(self.refresh)

    def showEvent(self, event) -> None:
        super().showEvent(event)
        self.refresh()

    def _on_selection(self, what: str) -> None:
        if what == "neuron":
            self.show_neuron()
        elif what == "input":
            self.show_input()
        else:
            self.refresh()

    def refresh(self) -> None:
        """Show what the selection asks for, starting what is missing; nothing runs while hidden."""
        if not self.isVisible():
            return
        bundle, data = ready_inputs(self.session, self.selection, self.stack, self.open_model_requested.emit,
                                    self.purpose, self.no_dataset_title)
        if bundle is None or not fill_layers(self, bundle, self.layer_verb):
            return
        if self.selection.layer not in self._layers:
            self.selection.set_layer(initial_layer(bundle.catalogue))  # comes back here through `changed`
            return
        self.stack.show_content()
        self.show_inputs(bundle, data)

    # --- what a view adds ------------------------------------------------------------------------------

    def show_inputs(self, bundle, data) -> None:
        """Show the view's content for the loaded model bundle and dataset (the selected layer is
        valid). Each view overrides it; the frame alone has nothing more to show."""

    def show_neuron(self) -> None:
        """The linked neuron changed."""

    def show_input(self) -> None:
        """The linked input changed."""

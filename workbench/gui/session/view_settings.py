"""View settings that survive a reopen: each view's remembered controls, splitters and tabs.

A view names the controls it remembers in a class attribute, as attribute paths from the view:

    remembered = ("strategy_box", "budget_box", "retrain.epochs_box", "retrain.strategy_actions")
    remembered_values = {"eps_dataset": str | None}  # plain attributes, with the type they must have

A control is a combo box (remembered by its item's data, or its text when it has no data), a spin
box, a checkable button, a slider, a line edit, a checkable action, or a dict of these (each entry
by its key). Every `QSplitter` (its sizes) and `QTabWidget` (its current tab, by title) inside the
view is remembered without being named. The main window keeps one `ViewSettings` per view: it
restores what the project's `gui` settings hold for the view when the window opens, and gives
back what to save (`state()`) when it closes.

Restoring never fails on what is stored. A value of the wrong type is ignored. A value the control
cannot take yet waits for it: a combo box's item that appears when the data loads, a disabled
control that is enabled once it means something (the Data view's outcome filter, once there are
predictions), a spin box value beyond a range that grows with the data. A waiting value is applied
as soon as the control can take it (after the code that filled or enabled the control has run),
is given up when the user changes the control, and is saved again if it is still waiting, so an
item that no longer exists is simply never chosen. Splitter sizes are applied again when the
splitter is first shown, at its real size; a splitter the user never saw keeps its stored sizes.
"""

from __future__ import annotations

import math
import types
import typing
from collections.abc import Callable

from PySide6.QtCore import QEvent, QObject, QTimer
from PySide6.QtGui import QAction
from PySide6.QtWidgets import (
    QAbstractButton,
    QAbstractSlider,
    QComboBox,
    QDoubleSpinBox,
    QLineEdit,
    QSpinBox,
    QSplitter,
    QTabWidget,
    QWidget,
)

CONTROLS = "controls"
VALUES = "values"
SPLITTERS = "splitters"
TABS = "tabs"

APPLIED, WAIT, REJECT = "applied", "wait", "reject"
USER_EVENTS = (QEvent.Type.MouseButtonPress, QEvent.Type.KeyPress, QEvent.Type.Wheel)
RETRY_EVENTS = (QEvent.Type.EnabledChange, QEvent.Type.Show, QEvent.Type.Paint)
CONTROL_TYPES = (QComboBox, QSpinBox, QDoubleSpinBox, QAbstractButton, QAbstractSlider, QLineEdit, QAction)


# --- reading and applying one control -----------------------------------------------------------------

def is_scalar(value) -> bool:
    return value is None or isinstance(value, (bool, int, str)) or (isinstance(value, float) and math.isfinite(value))


def is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def is_number(value) -> bool:
    return (is_int(value) or isinstance(value, float)) and math.isfinite(value)


def read_control(control) -> object:
    """The control's value as JSON: {"text", "data"} for a combo box, a number, a bool or a string."""
    if isinstance(control, QComboBox):
        index = control.currentIndex()
        if index < 0:
            return None
        data = control.itemData(index)
        return {"text": control.itemText(index), "data": data if is_scalar(data) else None}
    if isinstance(control, QDoubleSpinBox):
        return float(control.value())
    if isinstance(control, (QSpinBox, QAbstractSlider)):
        return int(control.value())
    if isinstance(control, (QAbstractButton, QAction)):
        return bool(control.isChecked())
    if isinstance(control, QLineEdit):
        return control.text()
    raise TypeError(f"{type(control).__name__} is not a control a view can remember")


def combo_index(box: QComboBox, value: dict) -> int:
    data, text = value.get("data"), value.get("text")
    if data is not None:
        return next((i for i in range(box.count()) if box.itemData(i) == data), -1)
    return box.findText(text) if isinstance(text, str) else -1


def apply_control(control, value) -> str:
    """Set `control` to a value `read_control` gave: APPLIED, WAIT (it cannot take it yet) or REJECT."""
    if isinstance(control, QComboBox):
        if not isinstance(value, dict) or not is_scalar(value.get("data")):
            return REJECT
        index = combo_index(control, value)
        if index < 0 or not control.isEnabled():
            return WAIT
        if index != control.currentIndex():
            control.setCurrentIndex(index)
            control.activated.emit(index)  # as the user's choice: views that follow `activated` redraw
        return APPLIED
    if isinstance(control, (QSpinBox, QDoubleSpinBox, QAbstractSlider)):
        whole = not isinstance(control, QDoubleSpinBox)
        if not (is_int(value) if whole else is_number(value)):
            return REJECT
        if not control.minimum() <= value <= control.maximum() or not control.isEnabled():
            return WAIT  # a range that grows with the data, or a control not in use yet
        control.setValue(value)
        return APPLIED
    if isinstance(control, (QAbstractButton, QAction)):
        if not isinstance(value, bool) or not control.isCheckable():
            return REJECT
        if isinstance(control, QWidget) and not control.isEnabled():
            return WAIT
        control.setChecked(value)
        return APPLIED
    if isinstance(control, QLineEdit):
        if not isinstance(value, str):
            return REJECT
        control.setText(value)
        return APPLIED
    return REJECT


def fits(value, kind) -> bool:
    """Whether a stored value has the declared type (`str | None`, `list[str]`, `int`, …)."""
    origin = typing.get_origin(kind)
    if origin in (typing.Union, types.UnionType):
        return any(fits(value, arg) for arg in typing.get_args(kind))
    if origin is list:
        (item,) = typing.get_args(kind) or (object,)
        return isinstance(value, list) and all(fits(v, item) for v in value)
    if kind is None or kind is type(None):
        return value is None
    if kind is float:
        return is_number(value)
    if kind is int:
        return is_int(value)
    if kind is object:
        return is_scalar(value)
    return isinstance(value, kind) and is_scalar(value)


def resolve(view: QWidget, path: str):
    target = view
    for part in path.split("."):
        target = getattr(target, part)
    return target


def control_entries(view: QWidget) -> dict[str, object]:
    """{key: control} for every control the view names; a dict of controls gives "path[key]" entries."""
    entries = {}
    for path in getattr(view, "remembered", ()):
        target = resolve(view, path)
        items = target.items() if isinstance(target, dict) else [(None, target)]
        for key, control in items:
            if not isinstance(control, CONTROL_TYPES):
                raise TypeError(f"{type(view).__name__}.{path} is a {type(control).__name__}, "
                                "not a control a view can remember")
            entries[path if key is None else f"{path}[{key}]"] = control
    return entries


def widget_key(view: QWidget, widget: QWidget) -> str:
    """A name for a widget inside `view` that is the same each time the view is built: object names
    where set, else the class and the place among siblings of that class."""
    parts = []
    while widget is not None and widget is not view:
        parent = widget.parentWidget()
        name = widget.objectName()
        if not name or name.startswith("qt_"):
            siblings = [w for w in (parent.children() if parent is not None else []) if type(w) is type(widget)]
            name = f"{type(widget).__name__}[{siblings.index(widget) if widget in siblings else 0}]"
        parts.append(name)
        widget = parent
    return "/".join(reversed(parts))


# --- one view --------------------------------------------------------------------------------------------

class ViewSettings(QObject):
    """Restores `saved` (what `state()` gave last time) into `view` now, and tracks what still waits."""

    def __init__(self, view: QWidget, saved: object = None, parent: QObject | None = None):
        super().__init__(parent or view)
        self.view = view
        saved = saved if isinstance(saved, dict) else {}
        self.saved = {part: dict(saved[part]) if isinstance(saved.get(part), dict) else {}
                      for part in (CONTROLS, VALUES, SPLITTERS, TABS)}
        self.waiting: dict[str, object] = {}  # control key → the stored value it has not taken yet
        self.shown: set[str] = set()  # splitters shown since the view was built
        self._resize_on_show: dict[str, list[int]] = {}
        self._splitter_keys: dict[int, tuple[QSplitter, str]] = {}
        self._watched: dict[int, Callable[[], None]] = {}  # id(control) → stop watching it
        self._retry_timer = QTimer(self)
        self._retry_timer.setSingleShot(True)
        self._retry_timer.setInterval(0)  # after the code that filled or enabled a control has run
        self._retry_timer.timeout.connect(self.retry)
        self.controls = control_entries(view)  # checked now: a misnamed control fails at once
        self._restore()

    # --- restoring ---------------------------------------------------------------------------------

    def _restore(self) -> None:
        for name, kind in getattr(self.view, "remembered_values", {}).items():
            value = self.saved[VALUES].get(name, ...)
            if value is not ... and fits(value, kind):
                setattr(self.view, name, value)
        for key, value in self.saved[CONTROLS].items():
            control = self.controls.get(key)
            if control is None:
                continue
            outcome = apply_control(control, value)
            if outcome == WAIT:
                self.waiting[key] = value
                self._watch(key, control)
        for key, splitter in self.splitters().items():
            self._splitter_keys[id(splitter)] = (splitter, key)  # the reference keeps the id its own
            splitter.installEventFilter(self)
            sizes = self.saved[SPLITTERS].get(key)
            if isinstance(sizes, list) and len(sizes) == splitter.count() and all(
                    is_int(s) and s >= 0 for s in sizes) and sum(sizes) > 0:
                splitter.setSizes(sizes)
                self._resize_on_show[key] = sizes
        for key, tabs in self.tab_widgets().items():
            value = self.saved[TABS].get(key)
            title = value.get("text") if isinstance(value, dict) else None
            index = next((i for i in range(tabs.count()) if tabs.tabText(i) == title), -1)
            if index >= 0:
                tabs.setCurrentIndex(index)

    def _watch(self, key: str, control) -> None:
        """Try `key` again when its control may take it; give it up when the user changes the control."""
        if id(control) in self._watched:
            return
        stops = []
        if isinstance(control, QComboBox):
            model = control.model()
            model.rowsInserted.connect(self._schedule)
            control.activated.connect(self._on_activated)
            stops.append(lambda: model.rowsInserted.disconnect(self._schedule))
            stops.append(lambda: control.activated.disconnect(self._on_activated))
        if isinstance(control, QWidget):
            control.installEventFilter(self)
            stops.append(lambda: control.removeEventFilter(self))
        if isinstance(control, QAction):
            control.triggered.connect(self._on_user_action)
            stops.append(lambda: control.triggered.disconnect(self._on_user_action))

        def stop() -> None:
            for step in stops:
                try:
                    step()
                except (RuntimeError, TypeError):  # the control is gone, or was never connected
                    pass
        self._watched[id(control)] = stop

    def _unwatch(self, key: str) -> None:
        control = self.controls.get(key)
        self.waiting.pop(key, None)
        if control is not None and not any(self.controls.get(k) is control for k in self.waiting):
            stop = self._watched.pop(id(control), None)
            if stop is not None:
                stop()

    def _schedule(self, *_) -> None:
        if self.waiting and not self._retry_timer.isActive():
            self._retry_timer.start()

    def retry(self) -> None:
        """Apply the waiting values their controls can take now."""
        for key, value in list(self.waiting.items()):
            control = self.controls.get(key)
            if control is None or apply_control(control, value) != WAIT:
                self._unwatch(key)

    def _give_up(self, control) -> None:
        """The user changed `control`: their choice replaces what was stored."""
        for key in [k for k in self.waiting if self.controls.get(k) is control]:
            self._unwatch(key)

    def _on_activated(self, _index: int) -> None:
        sender = self.sender()
        if sender is not None:
            self._give_up(sender)

    def _on_user_action(self, *_) -> None:
        sender = self.sender()
        if sender is not None:
            self._give_up(sender)

    def eventFilter(self, watched, event) -> bool:
        kind = event.type()
        if kind == QEvent.Type.Show and isinstance(watched, QSplitter):
            splitter, key = self._splitter_keys.get(id(watched), (None, None))
            if splitter is watched:
                self.shown.add(key)
                sizes = self._resize_on_show.pop(key, None)
                if sizes is not None:
                    watched.setSizes(sizes)  # now at its real size: the proportions come back exactly
        waiting = (kind in USER_EVENTS or kind in RETRY_EVENTS) and any(
            self.controls.get(k) is watched for k in self.waiting)
        if waiting and kind in USER_EVENTS:
            self._give_up(watched)
        elif waiting and (kind != QEvent.Type.Paint or isinstance(watched, (QSpinBox, QDoubleSpinBox))):
            self._schedule()  # a spin box's range grows without a signal, and it repaints then
        return False

    # --- what is in the view ---------------------------------------------------------------------

    def splitters(self) -> dict[str, QSplitter]:
        return {widget_key(self.view, s): s for s in self.view.findChildren(QSplitter)}

    def tab_widgets(self) -> dict[str, QTabWidget]:
        return {widget_key(self.view, t): t for t in self.view.findChildren(QTabWidget)}

    # --- saving ------------------------------------------------------------------------------------

    def state(self) -> dict:
        """What to store for the view: every control's value (or the stored one it still waits for),
        the plain values, the splitters' sizes (those never shown keep theirs) and the current tabs."""
        controls = dict(self.saved[CONTROLS])
        for key, control in control_entries(self.view).items():
            if key in self.waiting:
                controls[key] = self.waiting[key]
                continue
            value = read_control(control)
            if value is not None:
                controls[key] = value
        values = dict(self.saved[VALUES])
        for name, kind in getattr(self.view, "remembered_values", {}).items():
            value = getattr(self.view, name)
            if fits(value, kind):
                values[name] = value
        splitters = dict(self.saved[SPLITTERS])
        for key, splitter in self.splitters().items():
            if key in self.shown or splitter.isVisible():
                sizes = splitter.sizes()
                if sum(sizes) > 0:
                    splitters[key] = sizes
        tabs = dict(self.saved[TABS])
        for key, widget in self.tab_widgets().items():
            if widget.currentIndex() >= 0:
                tabs[key] = {"index": widget.currentIndex(), "text": widget.tabText(widget.currentIndex())}
        return {CONTROLS: controls, VALUES: values, SPLITTERS: splitters, TABS: tabs}

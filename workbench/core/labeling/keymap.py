"""The labelling key map: which keys answer, skip, undo and move, as JSON a rater can edit.

A key map is a JSON object from action to a key or a list of keys, e.g. `{"invalid": "X", "skip":
["S", "Ctrl+Space"]}`; keys are written as Qt writes them (`Ctrl+Shift+Z`, `Left`, `F2`). A map a
user gives is laid over the default one, action by action; a key bound to two actions, an unknown
action or a key that cannot be written is refused with the reason, and the old map stays.
"""

from __future__ import annotations

import json

from workbench.core.errors import WorkbenchError

#: action → keys. `answer N` answers class N (0–9 in dataset order).
DEFAULT_KEYMAP: dict[str, list[str]] = {
    **{f"answer {i}": [str(i)] for i in range(10)},
    "invalid": ["X"],
    "different": ["D"],
    "skip": ["S", "Ctrl+Space"],
    "undo": ["Ctrl+Z"],
    "redo": ["Ctrl+Shift+Z"],
    "previous": ["Left"],
    "next": ["Right"],
    "next unlabelled": ["N"],
}
ACTIONS = tuple(DEFAULT_KEYMAP)
MODIFIERS = ("Ctrl", "Shift", "Alt", "Meta")
_NAMED_KEYS = {"Space", "Left", "Right", "Up", "Down", "Return", "Enter", "Tab", "Backspace", "Delete", "Home", "End",
               "PgUp", "PgDown", "Insert", *(f"F{i}" for i in range(1, 13))}


def normalise_key(text: str) -> str:
    """`ctrl+shift+z` → `Ctrl+Shift+Z`: modifiers in Qt's order, then one key."""
    parts = [p.strip() for p in str(text).split("+")]
    if len(parts) > 1 and parts[-1] == parts[-2] == "":  # "Shift++" names the plus key; "Ctrl+" names none
        parts = parts[:-2] + ["+"]
    if not parts or not parts[-1]:
        raise WorkbenchError(f"The key {text!r} names no key.", "Write a key such as X, Left or Ctrl+Z.")
    *mods, key = parts
    canonical = []
    for mod in mods:
        match = next((m for m in MODIFIERS if m.lower() == mod.lower()), None)
        if match is None:
            raise WorkbenchError(f"The key {text!r} has an unknown modifier {mod!r}.",
                                 f"Use {', '.join(MODIFIERS)}.")
        canonical.append(match)
    named = next((k for k in _NAMED_KEYS if k.lower() == key.lower()), None)
    if named is None and len(key) != 1:
        raise WorkbenchError(f"The key {text!r} is not one key.",
                             f"Write one character or one of {', '.join(sorted(_NAMED_KEYS))}.")
    key = named or key.upper()
    return "+".join([m for m in MODIFIERS if m in canonical] + [key])


def checked_keymap(overrides: dict | None = None) -> dict[str, list[str]]:
    """The default key map with `overrides` laid over it, checked for unknown actions and conflicts."""
    if overrides is not None and not isinstance(overrides, dict):
        raise WorkbenchError("A key map must be a JSON object from action to keys.",
                             'Write e.g. {"invalid": "X", "skip": ["S", "Ctrl+Space"]}.')
    keymap = {action: list(keys) for action, keys in DEFAULT_KEYMAP.items()}
    for action, keys in (overrides or {}).items():
        if action not in keymap:
            raise WorkbenchError(f"The key map names an unknown action {action!r}.", f"Actions: {', '.join(ACTIONS)}.")
        keys = [keys] if isinstance(keys, str) else keys
        if not isinstance(keys, list) or not all(isinstance(k, str) for k in keys):
            raise WorkbenchError(f"The keys of {action!r} must be a key or a list of keys.", 'Write e.g. ["S"].')
        keymap[action] = [normalise_key(k) for k in keys]
    bound: dict[str, str] = {}
    for action, keys in keymap.items():
        for key in keys:
            if key in bound and bound[key] != action:
                raise WorkbenchError(f"The key {key} is bound to both {bound[key]!r} and {action!r}.",
                                     "Give each key one action.")
            bound[key] = action
    return keymap


def parse_keymap(text: str) -> dict[str, list[str]]:
    """A key map from its JSON text, laid over the default one."""
    try:
        overrides = json.loads(text)
    except json.JSONDecodeError as exc:
        raise WorkbenchError(f"The key map is not valid JSON: {exc.msg} (line {exc.lineno}).",
                             'Write a JSON object, e.g. {"invalid": "X"}.') from exc
    return checked_keymap(overrides)


def key_actions(keymap: dict[str, list[str]]) -> dict[str, str]:
    """key → action, for looking a key press up."""
    return {key: action for action, keys in keymap.items() for key in keys}

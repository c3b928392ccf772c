"""Set algebra on test sets by their stable input ids, each result saved as a test set with its recipe.

- `union(A, B, …)`: A's inputs, then each later set's inputs whose ids came before in none of them;
- `intersection(A, B, …)`: A's inputs whose ids every other set holds;
- `difference(A, B, …)`: A's inputs whose ids no other set holds;
- `adding_new_items(comparison, A, criterion)`: A's inputs that reach an item (an IDC combination, a
  KMNC section, …) that no other set of the comparison covers, one input per item — the inputs worth
  keeping for what they add.

Inputs keep their ids (so labels and links follow them), their labels and per-input columns: a
union the columns all operands share, with which set each input came from (`origin`); an
intersection or a difference the first set's. The recipe (the
operation and its operands, in order) is stored with the result.
"""

from __future__ import annotations

import numpy as np

from workbench.core.errors import WorkbenchError

OPERATIONS = ("union", "intersection", "difference")
SYMBOLS = {"union": " ∪ ", "intersection": " ∩ ", "difference": " − "}
ROLE = "set algebra"


def _check(testsets) -> None:
    if len(testsets) < 2:
        raise WorkbenchError("Set algebra needs two or more test sets.", "Name them, e.g. A,B.")
    shapes = {tuple(t.images.shape[1:]) for t in testsets}
    if len(shapes) > 1:
        raise WorkbenchError(f"The sets hold images of different shapes ({', '.join(map(str, sorted(shapes)))}).",
                             "Combine sets of one dataset.")


def _take(testset, rows: np.ndarray) -> dict[str, np.ndarray]:
    return {"x": testset.numpy(rows),
            "y": np.asarray(testset.labels)[rows].astype(np.int64), "ids": np.asarray(testset.ids)[rows].astype(str),
            **{k: np.asarray(v)[rows] for k, v in testset.columns.items() if k != "parent_index"}}


def combine(operation: str, testsets) -> dict[str, np.ndarray]:
    """The arrays of `operation` applied to `testsets` in order (module docstring)."""
    if operation not in OPERATIONS:
        raise WorkbenchError(f"Unknown set operation {operation!r}.", f"Use one of: {', '.join(OPERATIONS)}.")
    _check(testsets)
    first, others = testsets[0], testsets[1:]
    if operation == "union":
        seen: set[str] = set()
        parts = []
        for testset in testsets:
            ids = np.asarray(testset.ids).astype(str)
            fresh = np.array([i not in seen for i in ids], dtype=bool)
            # a set's own repeated ids are kept once too
            _, first_of = np.unique(ids, return_index=True)
            once = np.zeros(len(ids), dtype=bool)
            once[first_of] = True
            rows = np.flatnonzero(fresh & once)
            seen.update(ids[rows].tolist())
            part = _take(testset, rows)
            part["origin"] = np.array([testset.name] * len(rows))
            parts.append(part)
        shared = set.intersection(*(set(p) for p in parts))
        return {k: np.concatenate([p[k] for p in parts]) for k in parts[0] if k in shared}
    ids = np.asarray(first.ids).astype(str)
    held = [set(np.asarray(t.ids).astype(str).tolist()) for t in others]
    if operation == "intersection":
        keep = np.array([all(i in h for h in held) for i in ids], dtype=bool)
    else:
        keep = np.array([not any(i in h for h in held) for i in ids], dtype=bool)
    return _take(first, np.flatnonzero(keep))


def recipe(operation: str, names: list[str]) -> str:
    return SYMBOLS[operation].join(names) if operation in SYMBOLS else f"{operation}({', '.join(names)})"


def _check_free(project, name: str) -> None:
    if name in {t["name"] for t in project.testsets} or name in project.artifacts():
        raise WorkbenchError(f"The project already has a test set or result named {name!r}.", "Choose another name.")


def save_combination(project, name: str, operation: str, testsets, dataset: str = "") -> dict:
    """Combine `testsets` and store the result as the project test set `name`, with its recipe."""
    from workbench.core.testsets import save_testset

    _check_free(project, name)
    arrays = combine(operation, testsets)
    if len(arrays["y"]) == 0:
        raise WorkbenchError(f"{recipe(operation, [t.name for t in testsets])} holds no inputs, so nothing was saved.",
                             "Choose sets that share (or do not share) inputs.")
    return save_testset(project, name, arrays, role=ROLE, operation=operation, of=[t.name for t in testsets],
                        recipe=recipe(operation, [t.name for t in testsets]),
                        dataset=dataset or testsets[0].source.dataset)


def adding_new_items(comparison, name: str, criterion: str = "idc") -> np.ndarray:
    """Rows of set `name` that reach an item of `criterion` no other compared set covers, the first input
    per such item, in set order."""
    from workbench.core.comparison.items import covered_items

    profiles = comparison.profiles
    if name not in profiles:
        raise WorkbenchError(f"{name!r} is not one of the compared sets.", f"Compared: {', '.join(profiles)}.")
    if criterion not in profiles[name].items:
        raise WorkbenchError(f"The comparison did not measure {criterion}.",
                             f"Measured: {', '.join(profiles[name].items)}.")
    others = [covered_items(p.items[criterion]) for n, p in profiles.items() if n != name]
    taken = set(np.concatenate(others).tolist()) if others else set()
    coo = profiles[name].items[criterion].tocoo()
    order = np.lexsort((coo.col, coo.row))
    keep = []
    for row, col in zip(coo.row[order], coo.col[order]):
        if col not in taken:
            taken.add(int(col))
            if not keep or keep[-1] != row:
                keep.append(int(row))
    return np.asarray(keep, dtype=np.int64)


def save_new_items(project, comparison, name: str, new_name: str, criterion: str = "idc") -> dict:
    """Store the inputs of `name` that add new items (`adding_new_items`) as a test set with their images
    (its parent may be a set only a model can make again, such as NAME[misclassified])."""
    from workbench.core.testsets import save_testset

    _check_free(project, new_name)
    rows = adding_new_items(comparison, name, criterion)
    if len(rows) == 0:
        raise WorkbenchError(f"No input of {name!r} reaches a {criterion} item the other sets leave uncovered.",
                             "Nothing was saved.")
    parent = comparison.testsets[name]
    others = [n for n in comparison.profiles if n != name]
    return save_testset(project, new_name, _take(parent, rows), role=ROLE, operation="adds-new-items",
                        of=[name, *others], criterion=criterion, dataset=parent.source.dataset,
                        recipe=f"{name} adding new {criterion} items beyond {', '.join(others)}")

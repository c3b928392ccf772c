"""The layers are enforced: core never imports the GUI, the CLI or Qt; the CLI imports the GUI only
to launch it; inside core and inside the GUI, a package imports only packages on a floor below its own
(`FLOORS`: a dependency points from the more specific concept to the more general one); no module
imports another's private names; and no modules form an import cycle (deferred imports inside
functions count: a cycle is a cycle). At most `MAX_LOOSE` modules sit directly in core and in gui.

The contract reads the source with `ast`, so it sees every import, also those that run only in a
branch, and needs no Qt. A second test checks that it does catch a cycle introduced on purpose.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent / "workbench"
QT_PACKAGES = ("PySide6", "pyqtgraph", "superqt", "shiboken6")
#: (importer prefix, imported prefix, allowed importers): what a layer may not import.
FORBIDDEN = (
    ("workbench.core", "workbench.gui", ()),
    ("workbench.core", "workbench.cli", ()),
    ("workbench.cli", "workbench.gui", ("workbench.cli.gui",)),  # the one launcher of `workbench gui`
    ("workbench.gui.widgets", "workbench.gui.views", ()),
    ("workbench.gui", "workbench.cli", ()),
)


#: Each layer's floors, the most general first: a module may import its own package and the packages of
#: the floors below; packages on one floor know nothing of each other. A name is a package or a module
#: directly in the layer.
FLOORS = {
    "core": [
        ("errors",),
        ("files", "sampling", "resources"),  # what every concept uses
        ("project",),  # the project folder and its artifact store
        ("execution",),  # jobs: their context, the worker process, shards, Ray
        ("data",),
        ("models",),
        ("importance", "testsets"),
        ("labeling",),  # labels test sets; resolves the human-validated subsets of a set's name
        ("coverage",),
        ("generation", "robustness"),
        ("comparison",),
        ("plugins", "artifact_labels"),  # what knows every registry, every kind of result
    ],
    "gui": [
        ("plotting",),
        ("session",),
        ("widgets",),
        ("views",),
        ("shell",),
    ],
}
MAX_LOOSE = 8  # modules directly in core and in gui, `__init__` included


def module_name(root: Path, path: Path) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def import_graph(root: Path) -> tuple[dict[str, set[str]], dict[str, set[str]], list[str]]:
    """({module: modules of the package it imports}, {module: external top-level packages},
    [private-name imports across modules, as 'importer: module._name'])."""
    files = {module_name(root, p): p for p in root.rglob("*.py")}
    package = root.name
    edges: dict[str, set[str]] = {m: set() for m in files}
    external: dict[str, set[str]] = {m: set() for m in files}
    private: list[str] = []
    for mod, path in files.items():
        is_package = path.name == "__init__.py"
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            targets: list[tuple[str, list[str]]] = []
            if isinstance(node, ast.Import):
                targets = [(alias.name, []) for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:  # relative: resolve against this module's package
                    here = mod.split(".") if is_package else mod.split(".")[:-1]
                    here = here[:len(here) - node.level + 1]
                    base = ".".join(here + ([base] if base else []))
                targets = [(base, [a.name for a in node.names])]
            for target, names in targets:
                if target.split(".")[0] != package:
                    external[mod].add(target.split(".")[0])
                    continue
                found = []
                for name in names:  # `from a.b import c` where a.b.c is a module imports that module
                    if f"{target}.{name}" in files:
                        found.append(f"{target}.{name}")
                    elif name.startswith("_") and target != mod and not name.startswith("__"):
                        private.append(f"{mod}: {target}.{name}")
                if len(found) < len(names) or not names:
                    found.append(target if target in files else target.rsplit(".", 1)[0])
                edges[mod].update(f for f in found if f != mod and f in files)
    return edges, external, private


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def _inside(module: str, prefix: str) -> bool:
    return module == prefix or module.startswith(prefix + ".")


def floor_of(module: str) -> tuple[str, int, str] | None:
    """(layer, floor, unit) of a module inside a layer with floors; None for the layer's own `__init__` and
    for a package or module that is on no floor."""
    parts = module.split(".")
    if len(parts) < 3 or parts[1] not in FLOORS:
        return None
    for floor, units in enumerate(FLOORS[parts[1]]):
        if parts[2] in units:
            return parts[1], floor, parts[2]
    return None  # on no floor: `test_the_tree_shows_the_concepts` says so


def floor_violations(edges: dict[str, set[str]]) -> list[str]:
    problems = []
    for mod, targets in sorted(edges.items()):
        here = floor_of(mod)
        if here is None:
            continue
        for target in sorted(targets):
            there = floor_of(target)
            if there is None or there[0] != here[0] or there[2] == here[2]:
                continue
            if there[1] >= here[1]:
                side = "beside" if there[1] == here[1] else "above"
                problems.append(f"{mod} imports {target} ({there[2]} is {side} {here[2]} in {here[0]})")
    return problems


def loose_modules(root: Path, layer: str) -> list[str]:
    return sorted(p.name for p in (root / layer).glob("*.py"))


def violations(root: Path) -> list[str]:
    edges, external, private = import_graph(root)
    problems = [f"private name imported across modules: {p}" for p in private]
    problems += floor_violations(edges)
    for mod, targets in edges.items():
        for importer, imported, allowed in FORBIDDEN:
            if _inside(mod, importer) and mod not in allowed:
                problems += [f"{mod} imports {t} ({importer} must not import {imported})"
                             for t in sorted(targets) if _inside(t, imported)]
        if _inside(mod, f"{root.name}.core"):
            problems += [f"{mod} imports {q} (core never imports Qt)" for q in sorted(external[mod] & set(QT_PACKAGES))]
    problems += ["import cycle: " + " ↔ ".join(c) for c in cycles(edges)]
    return problems


def test_the_layers_hold():
    assert violations(ROOT) == []


@pytest.mark.parametrize("layer", sorted(FLOORS))
def test_the_tree_shows_the_concepts(layer):
    """Modules live in the package of their concept: few sit loose in a layer, and every package is on a floor."""
    assert len(loose_modules(ROOT, layer)) <= MAX_LOOSE, loose_modules(ROOT, layer)
    for path in sorted((ROOT / layer).iterdir()):
        if path.suffix == ".py" and path.stem != "__init__" or (path / "__init__.py").is_file():
            assert floor_of(f"workbench.{layer}.{path.stem}") is not None, \
                f"{path.stem} is on no floor: add it to FLOORS[{layer!r}]"


def test_an_import_from_a_floor_above_or_beside_is_caught():
    edges = {"workbench.core.data.dataset": {"workbench.core.models.layers", "workbench.core.errors"},
             "workbench.core.testsets": {"workbench.core.importance.lrp.rules", "workbench.core.data.dataset"},
             "workbench.core.coverage.idc": {"workbench.core.coverage.protocol", "workbench.core.labeling.study"},
             "workbench.gui.widgets.heatmap": {"workbench.gui.shell.app", "workbench.gui.plotting.colors"}}
    assert floor_violations(edges) == [
        "workbench.core.data.dataset imports workbench.core.models.layers (models is above data in core)",
        "workbench.core.testsets imports workbench.core.importance.lrp.rules (importance is beside testsets in core)",
        "workbench.gui.widgets.heatmap imports workbench.gui.shell.app (shell is above widgets in gui)"]


def test_the_contract_catches_what_it_forbids(tmp_path):
    pkg = tmp_path / "workbench"
    for folder in ("core", "gui/widgets", "gui/views", "cli"):
        (pkg / folder).mkdir(parents=True)
    for init in ("", "core/", "gui/", "gui/widgets/", "gui/views/", "cli/"):
        (pkg / f"{init}__init__.py").write_text("")
    (pkg / "core/a.py").write_text("from workbench.core import b\n")
    (pkg / "core/b.py").write_text("def f():\n    from workbench.core.a import VALUE\n")
    (pkg / "core/c.py").write_text("import PySide6\nfrom workbench.gui.widgets import w\n")
    (pkg / "gui/widgets/w.py").write_text("from ..views import v\nfrom workbench.core.a import _hidden\n")
    (pkg / "gui/views/v.py").write_text("")
    (pkg / "cli/run.py").write_text("from workbench.gui.views.v import View\n")
    found = violations(pkg)
    assert "import cycle: workbench.core.a ↔ workbench.core.b" in found
    assert "workbench.core.c imports PySide6 (core never imports Qt)" in found
    assert any(p.startswith("workbench.core.c imports workbench.gui.widgets") for p in found)
    assert any(p.startswith("workbench.gui.widgets.w imports workbench.gui.views.v") for p in found)
    assert "private name imported across modules: workbench.gui.widgets.w: workbench.core.a._hidden" in found
    assert any(p.startswith("workbench.cli.run imports workbench.gui.views.v") for p in found)
    # the deliberate cycle removed, the contract holds for it again
    (pkg / "core/b.py").write_text("def f():\n    return 1\n")
    assert not any("cycle" in p for p in violations(pkg))


@pytest.mark.parametrize("cycle", [["m.a", "m.b"], ["m.a", "m.b", "m.c"]])
def test_cycles_are_found_whatever_their_length(cycle):
    edges = {m: {cycle[(i + 1) % len(cycle)]} for i, m in enumerate(cycle)}
    edges["m.d"] = {"m.a"}
    assert cycles(edges) == [sorted(cycle)]

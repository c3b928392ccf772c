"""Test sets by name, the human-validated subsets of labelled sets included.

`resolve`, `list_testsets` and `load_testset` do what `core.testsets.resolve` and `list_testsets` do — splits,
stored sets, subsets by rule — and also know `NAME[valid]`, `NAME[valid-preserving]` and
`NAME[valid-misbehaviours]`: the inputs of a labelled set that the human consensus puts there
(`validated.human_subset`), read from the label store each time, so they grow as answers arrive. These
functions live here, where test sets and labels are both known: test sets are the more general concept and
never read labels. Whatever resolves a name a user typed or picked (the CLI, the GUI, a job given set names)
resolves it here.
"""

from __future__ import annotations

from workbench.core import testsets
from workbench.core.errors import WorkbenchError
from workbench.core.labeling.label_store import LabelStore, store_path
from workbench.core.labeling.study import SUBSETS
from workbench.core.labeling.validated import human_subset
from workbench.core.testsets import Source, TestSet, TestSetInfo


def resolve(project, text: str, dataset=None, model=None, ctx=None, download: bool = False,
            _depth: int = 0) -> TestSet:
    """The test set `text` names (see `core.testsets.resolve`); a `[rule]` may also be a human-validated
    subset, read from the `project`'s label store."""
    subset = testsets.split_subset(text, _depth)
    if subset is None:
        return testsets.resolve(project, text, dataset, model, ctx, download, _depth)
    base, rule = subset
    parent = resolve(project, base, dataset, model, ctx, download, _depth + 1)
    which = rule.split()[0].partition("=")[0].lower() if rule.split() else ""
    if which not in SUBSETS:
        return testsets.apply_rule(parent, rule, model, ctx)
    if project is None:
        raise WorkbenchError(f"The subset [{which}] is read from a project's labels.", "Open the project first.")
    return parent.subset(human_subset(project, parent, which), rule=" ".join(rule.split()))


def list_testsets(project) -> list[TestSetInfo]:
    """`core.testsets.list_testsets`, then the human-validated subsets of every labelled set (their sizes
    change with the answers, so none is given)."""
    listed = testsets.list_testsets(project)
    by_name = {info.name: info for info in listed}
    path = store_path(project)
    if not path.exists():
        return listed
    try:
        with LabelStore(path, read_only=True) as store:
            labelled = [name for name in store.labelled_testsets() if name in by_name]
    except WorkbenchError:
        return listed  # a damaged store is reported where labels are read, not in every listing
    return listed + [TestSetInfo(f"{name}[{which}]", Source("subset", by_name[name].source.dataset, parent=name,
                                                             rule=which), extra={"human": which})
                     for name in labelled for which in SUBSETS]


def load_testset(ctx, project, name: str, dataset=None) -> TestSet:
    """`resolve` as a job: read a test set (a stored one's file) off the caller's thread."""
    ctx.progress(0, 1, f"reading test set {name}")
    testset = resolve(project, name, dataset)
    ctx.progress(1, 1, "read")
    return testset

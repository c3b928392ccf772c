"""Test sets: every set of inputs the workbench measures, as one type.

A `TestSet` is a `Split` (images streamed in batches, labels) with a name, a `Source` that says
where its inputs come from, optional per-input columns and stable input ids. Its source is one of:

- a dataset split (`fashion-mnist:test`);
- a subset of another set, by a rule: `first=N`, `class=C`, `sample=N seed=S`, `indices=…`,
  `correct` or `misclassified` (for a model) — and, resolved by `labeling.labelled_sets`, which knows
  both test sets and labels, the human-validated subsets `valid`, `valid-preserving` and
  `valid-misbehaviours` of a labelled set;
- a stored artifact of the project: an attack pool, `fp_test`, fuzzer tests, a selection — and
  any future kind that stores images `x` and labels `y`.

Input ids survive reopening and copying a project: a split's inputs are `DATASET:SPLIT#INDEX`, a
stored set's are the ids stored with it, or else derived from each input's pixels (so the same
file gives the same ids wherever it is). A subset keeps the ids of its parent.

`resolve(project, text)` turns a name into a test set; `NAME[rule]` takes a subset of any set, e.g.
`fashion-mnist:test[misclassified]`. What a user typed or picked goes through `labeling.labelled_sets.resolve`,
which adds the human-validated subsets.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field

import numpy as np

from workbench.core.data.dataset import Dataset, Split, as_image_array, as_labels
from workbench.core.errors import WorkbenchError
from workbench.core.project.store import text_column
SUBSET_RULES = ("first", "class", "sample", "indices", "correct", "misclassified")
MAX_SUBSET_DEPTH = 8  # subsets of subsets deeper than this are a loop or should be stored
#: The GenAI-TIG benchmark's name of the tool that made a generated input, by the input's `kind` column (the
#: benchmark files' TOOL column); a kind it does not name goes by its own name.
BENCHMARK_TOOLS = {"vae": "vae", "gan": "gan", "diffusion": "dm"}
#: Arrays of a stored test set that are not per-input columns.
RESERVED_ARRAYS = ("x", "y", "images", "labels", "ids")
_SUBSET = re.compile(r"^(?P<base>.+)\[(?P<rule>[^\[\]]*)\]$")


def split_subset(text: str, depth: int = 0) -> tuple[str, str] | None:
    """'NAME[rule]' → ('NAME', 'rule'); None for a name without a rule. `depth` counts the subsets already
    taken on the way here: past `MAX_SUBSET_DEPTH` the name is refused."""
    if depth > MAX_SUBSET_DEPTH:
        raise WorkbenchError(f"Test set {text!r} is defined through too many subsets (or a loop).",
                             "Store the subset with its images instead.")
    match = _SUBSET.match(text.strip())
    return (match["base"], match["rule"]) if match else None


@dataclass(frozen=True)
class Source:
    """Where a test set's inputs come from."""

    kind: str  # "split", "subset" or "stored"
    dataset: str = ""  # the dataset whose classes label the inputs
    split: str = ""  # a split's name
    parent: str = ""  # a subset's parent set
    rule: str = ""  # a subset's rule, e.g. "misclassified" or "sample=500 seed=0"
    artifact: str = ""  # a stored set's artifact
    role: str = ""  # what a stored set is: "attack pool", "fp_test", "selection", "fuzzer tests", …

    def describe(self) -> str:
        if self.kind == "split":
            return f"the {self.split} split of {self.dataset}"
        if self.kind == "subset":
            return f"{self.rule} of {self.parent}"
        return f"{self.role or 'stored test set'} (stored in the project)"


def stored_role(how: dict) -> str:
    """What a stored test set is, from its provenance."""
    if how.get("role") == "subset":
        return "subset"
    if how.get("selected_from"):
        return "selection"
    if how.get("role") == "fuzz-tests":
        return "fuzzer tests"
    if how.get("role") == "candidate-pool":
        return "fp_test" if how.get("kind_of_pool") == "fp_test" else "attack pool"
    return str(how.get("role") or "stored test set")


class TestSet(Split):
    """A named set of labelled inputs with its source, per-input columns and stable ids."""

    __test__ = False  # not a pytest test class, despite the name

    def __init__(self, name: str, source: Source, images, labels: np.ndarray, ids: np.ndarray,
                 columns: dict[str, np.ndarray] | None = None, class_names: list[str] | None = None):
        super().__init__(images, labels)
        if len(ids) != len(labels):
            raise WorkbenchError(f"Test set {name!r} has {len(ids)} ids for {len(labels)} inputs.",
                                 "Store one id per input, or none.")
        self.name = name
        self.source = source
        self.ids = np.asarray(ids, dtype=str)
        self.columns = {k: v for k, v in (columns or {}).items()}
        self.class_names = class_names
        #: What the user should be told about how the set was chosen (e.g. a dataset without a test split
        #: stood in by the split it has); subsets keep their parent's notes.
        self.notes: list[str] = []
        for key, column in self.columns.items():
            if len(column) != len(labels):
                raise WorkbenchError(f"Column {key!r} of test set {name!r} has {len(column)} rows for "
                                     f"{len(labels)} inputs.", "Store one value per input.")

    @property
    def kind(self) -> str:
        """'split', 'subset', or the role of a stored set ('attack pool', 'selection', …)."""
        return self.source.role if self.source.kind == "stored" else self.source.kind

    def describe(self) -> str:
        return f"{self.name}: {len(self):,} inputs, {self.source.describe()}"

    def tools(self) -> np.ndarray:
        """The tool that made each input, by the benchmark's name of the generator kind that made it ('' for
        every input of a set that was not generated)."""
        if "kind" not in self.columns:
            return np.full(len(self), "", dtype=object)
        return np.array([BENCHMARK_TOOLS.get(kind, kind) for kind in text_column(self.columns["kind"])], dtype=object)

    def subset(self, indices, rule: str = "", name: str | None = None) -> "TestSet":
        """The inputs at `indices` (in that order), with their ids and columns, as a subset."""
        indices = np.asarray(indices, dtype=np.int64)
        rule = rule or f"{len(indices):,} chosen inputs"
        images = np.asarray(self.images[indices]) if len(indices) else self.images[:0]
        columns = {k: np.asarray(v)[indices] for k, v in self.columns.items() if k != "parent_index"}
        columns["parent_index"] = indices
        source = Source("subset", self.source.dataset, parent=self.name, rule=rule)
        subset = TestSet(name or f"{self.name}[{rule}]", source, images, self.labels[indices], self.ids[indices],
                         columns, self.class_names)
        subset.notes = list(self.notes)
        return subset


# --- making test sets -------------------------------------------------------------------------------

def from_split(dataset: Dataset, split: str, key: str | None = None) -> TestSet:
    """A dataset split as a test set; its ids are DATASET:SPLIT#INDEX."""
    key = key or dataset.recipe.get("name", dataset.name)
    data = dataset.split(split)
    ids = np.char.add(f"{key}:{split}#", np.arange(len(data)).astype(str))
    return TestSet(f"{key}:{split}", Source("split", key, split=split), data.images, data.labels, ids,
                   class_names=list(dataset.class_names))


def content_ids(images: np.ndarray) -> np.ndarray:
    """An id per input from its pixels (16 hex digits of SHA-1); repeats get '~1', '~2', … appended."""
    images = np.ascontiguousarray(images)
    ids, seen = [], {}
    for row in images.reshape(len(images), int(np.prod(images.shape[1:]))):  # also for an empty set
        digest = hashlib.sha1(row.tobytes()).hexdigest()[:16]
        count = seen.get(digest, 0)
        seen[digest] = count + 1
        ids.append(digest if count == 0 else f"{digest}~{count}")
    return np.asarray(ids, dtype=str)


def from_artifact(project, name: str, class_names: list[str] | None = None, dataset: Dataset | None = None,
                  _depth: int = 0) -> TestSet:
    """A test set stored in the project: images `x`, labels `y`, optional `ids` and per-input columns;
    or a stored subset (`indices` of another set, named in its provenance as `of`)."""
    artifact = project.load_artifact(name, kind="testset")
    how = artifact.provenance
    if how.get("role") == "subset":
        parent = resolve(project, str(how.get("of", "")), dataset, _depth=_depth + 1)
        indices = np.asarray(artifact["indices"], dtype=np.int64)
        if len(indices) and (indices.min() < 0 or indices.max() >= len(parent)):
            raise WorkbenchError(f"Subset {name!r} picks inputs beyond the {len(parent):,} of {parent.name!r}.",
                                 f"{parent.name!r} was made again since; make the subset again.")
        return parent.subset(indices, rule=how.get("rule", ""), name=name)
    images = next((artifact[k] for k in ("x", "images") if k in artifact.names), None)
    labels = next((artifact[k] for k in ("y", "labels") if k in artifact.names), None)
    if images is None:
        raise WorkbenchError(f"Test set {name!r} of the project holds no images.", "Choose a test set with images.")
    if labels is None:
        raise WorkbenchError(f"Test set {name!r} of the project holds no labels.",
                             "A test set needs the ground-truth label of every input (an array y).")
    images = as_image_array(images, f"test set {name!r}")
    labels = as_labels(labels, len(class_names) if class_names else None, f"test set {name!r} labels")
    ids = artifact["ids"] if "ids" in artifact.names else content_ids(images)
    columns = {}
    for key in artifact.names:
        if key not in RESERVED_ARRAYS:
            column = artifact[key]
            if column.ndim >= 1 and len(column) == len(labels):
                columns[key] = column
    source = Source("stored", str(how.get("dataset", "")), artifact=name, role=stored_role(how))
    return TestSet(name, source, images, labels, ids, columns, class_names)


def save_testset(project, name: str, arrays: dict[str, np.ndarray], **how) -> dict:
    """Store inputs `x` with labels `y` (and per-input columns) as a project test set, with their ids
    (derived from the pixels once, here, so reading the set back need not hash every image)."""
    if "ids" not in arrays and "x" in arrays:
        arrays = {**arrays, "ids": content_ids(np.asarray(arrays["x"]))}
    return project.save_artifact("testset", name, arrays, **how)


def save_subset(project, name: str, subset: TestSet, **how) -> dict:
    """Store a subset as the indices into its parent (which must be resolvable by name later)."""
    if subset.source.kind != "subset":
        raise WorkbenchError(f"{subset.name!r} is not a subset of another test set.", "Store it with its images.")
    return project.save_artifact("testset", name, {"indices": subset.columns["parent_index"]},
                                 role="subset", of=subset.source.parent, rule=subset.source.rule,
                                 dataset=subset.source.dataset, **how)


# --- subsets by rule --------------------------------------------------------------------------------

def _rule_options(rule: str) -> tuple[str, dict[str, str]]:
    """'sample=500 seed=1' → ('sample', {'sample': '500', 'seed': '1'}); quote a value with spaces:
    'class="Ankle boot"'."""
    import shlex

    try:
        parts = shlex.split(rule)
    except ValueError as exc:
        raise WorkbenchError(f"The subset rule [{rule}] has an unbalanced quote.",
                             'Quote a value with spaces whole, e.g. [class="Ankle boot"].') from exc
    if not parts:
        raise WorkbenchError("An empty subset rule [] was given.", f"Use one of: {', '.join(SUBSET_RULES)}.")
    options = {}
    for part in parts:
        key, _, value = part.partition("=")
        options[key.strip().lower()] = value.strip()
    how = parts[0].partition("=")[0].strip().lower()
    if how not in SUBSET_RULES:
        raise WorkbenchError(f"Unknown subset rule {how!r}.",
                             "Use first=N, class=C, sample=N seed=S, indices=1,2,5-9, correct or misclassified; "
                             "a labelled set also has its human-validated subsets: valid, valid-preserving, "
                             "valid-misbehaviours.")
    return how, options


def _count(text: str, what: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise WorkbenchError(f"{what} must be a whole number; got {text!r}.", f"Write e.g. {what}=100.") from None
    if value < 0:
        raise WorkbenchError(f"{what} must not be negative; got {value}.", f"Write e.g. {what}=100.")
    return value


def _index_list(text: str, n: int) -> np.ndarray:
    out = []
    for item in filter(None, (t.strip() for t in text.split(","))):
        first, dash, last = item.partition("-")
        lo = _count(first, "indices")
        hi = _count(last, "indices") if dash else lo
        out.extend(range(lo, hi + 1))
    indices = np.asarray(out, dtype=np.int64)
    if len(indices) and indices.max() >= n:
        raise WorkbenchError(f"Index {int(indices.max())} is out of range: the set holds {n:,} inputs (0–{n - 1}).",
                             "Choose indices inside the set.")
    return indices


def _class_indices(text: str, testset: TestSet) -> np.ndarray:
    names = testset.class_names or []
    wanted = []
    for item in filter(None, (t.strip() for t in text.split(","))):
        if item.isdigit():
            wanted.append(int(item))
        elif item in names:
            wanted.append(names.index(item))
        else:
            raise WorkbenchError(f"No class {item!r} in test set {testset.name!r}.",
                                 f"Classes: {', '.join(names) or 'numbered 0, 1, …'}.")
    return np.flatnonzero(np.isin(testset.labels, wanted)).astype(np.int64)


def apply_rule(testset: TestSet, rule: str, model=None, ctx=None) -> TestSet:
    """The subset of `testset` that `rule` picks; `correct` and `misclassified` need the `model`."""
    from workbench.core.sampling import seeded_sample

    how, options = _rule_options(rule)
    n = len(testset)
    if how == "first":
        indices = np.arange(min(_count(options["first"], "first"), n))
    elif how == "class":
        indices = _class_indices(options["class"], testset)
    elif how == "sample":
        k = _count(options["sample"], "sample")
        seed = _count(options.get("seed", "0"), "seed")
        picked = seeded_sample(n, k, seed)
        indices = np.arange(n) if picked is None else picked
    elif how == "indices":
        indices = _index_list(options["indices"], n)
    else:
        if model is None:
            raise WorkbenchError(f"The subset [{how}] depends on a model's predictions.", "Choose a model first.")
        from workbench.core.execution.jobs import JobContext
        from workbench.core.models.training import predict

        wrong = predict(ctx or JobContext(), model, testset) != testset.labels
        indices = np.flatnonzero(wrong if how == "misclassified" else ~wrong)
    return testset.subset(indices, rule=" ".join(rule.split()))


# --- resolving a name ---------------------------------------------------------------------------------

def _is_dataset_name(name: str) -> bool:
    import os

    from workbench.core.data.registry import dataset_entries

    return name in {e.name for e in dataset_entries()} or name.startswith("torchvision:") or os.path.exists(name)


def _default_split(data: Dataset, label: str) -> tuple[str, str]:
    """(split, note) of a dataset named without a split: its test split, or else the split it has, with a
    note saying so (the note is empty for the test split)."""
    if "test" in data.splits:
        return "test", ""
    split = next(iter(data.splits))
    which = "the only one it has" if len(data.splits) == 1 else f"the first of {', '.join(data.splits)}"
    return split, (f"test set {label!r} has no test split, so its {split} split ({len(data.split(split)):,} "
                   f"inputs, {which}) is used; name it as {label}:{split} to choose the split yourself")


def _foreign_split(other: Dataset, dataset: Dataset, split: str | None, label: str) -> tuple[str, str]:
    """(split, note) of another dataset used as a test set; its classes must be the model's."""
    default = [str(i) for i in range(other.num_classes)]
    if other.class_names != default and other.class_names != list(dataset.class_names):
        raise WorkbenchError(f"Test set {label!r} has classes {', '.join(other.class_names[:6])}"
                             f"{', …' if other.num_classes > 6 else ''} ({other.num_classes}), but the model knows "
                             f"{', '.join(dataset.class_names[:6])}{', …' if dataset.num_classes > 6 else ''} "
                             f"({dataset.num_classes}).", "Use a test set labelled with the model's classes.")
    note = ""
    if split is None:
        split, note = _default_split(other, label)
    other.split(split)  # names the splits there are
    return split, note


def resolve(project, text: str, dataset: Dataset | None = None, model=None, ctx=None,
            download: bool = False, _depth: int = 0) -> TestSet:
    """The test set `text` names: a project test set (a split or a stored set), a split of `dataset`,
    DATASET:SPLIT, a dataset name or path (its test split), any of these followed by [rule]."""
    from workbench.core.data.registry import load_dataset

    text = text.strip()
    subset = split_subset(text, _depth)
    if subset:
        parent = resolve(project, subset[0], dataset, model, ctx, download, _depth + 1)
        return apply_rule(parent, subset[1], model, ctx)
    class_names = list(dataset.class_names) if dataset is not None else None
    entries = {t["name"]: t for t in project.testsets} if project is not None else {}
    entry = entries.get(text)
    if entry and entry.get("artifact"):
        return from_artifact(project, entry["artifact"], class_names, dataset, _depth)
    base, split = (entry["dataset"], entry.get("split", "test")) if entry else (None, None)
    if base is None:
        if dataset is not None and text in dataset.splits:
            return _named(from_split(dataset, text), f"{dataset.name}:{text}")
        if _is_dataset_name(text):
            base = text
        elif ":" in text and _is_dataset_name(text.rsplit(":", 1)[0]):
            base, split = text.rsplit(":", 1)
        else:
            known = list(entries)
            where = f"a split of {dataset.name} ({', '.join(dataset.splits)}), " if dataset is not None else ""
            raise WorkbenchError(f"No test set {text!r}.",
                                 f"Give {where}"
                                 + (f"a project test set ({', '.join(known)}), " if known else "")
                                 + "a dataset name or path, or DATASET:SPLIT; add [rule] for a subset.")
    if dataset is not None and base in (dataset.name, dataset.recipe.get("name")):  # the dataset in hand
        split, note = (split, "") if split else _default_split(dataset, text)
        return _named(from_split(dataset, split), f"{dataset.name}:{split}", note)
    other = load_dataset(base, download=download)
    if dataset is None:
        split, note = (split, "") if split else _default_split(other, text)
        testset = from_split(other, split, key=base)
        return _named(testset, testset.name, note)
    if other is dataset or (other.recipe and other.recipe == dataset.recipe):
        split, note = (split, "") if split else _default_split(dataset, text)
        return _named(from_split(dataset, split), f"{dataset.name}:{split}", note)
    split, note = _foreign_split(other, dataset, split, text)
    return _named(from_split(other, split, key=base), text, note)


def _named(testset: TestSet, name: str, note: str = "") -> TestSet:
    testset.name = name
    if note:
        testset.notes.append(note)
    return testset


@dataclass
class TestSetInfo:
    """A test set as the project lists it, without reading its inputs."""

    name: str
    source: Source
    size: int | None = None  # known for stored sets without reading them
    problem: str = ""
    extra: dict = field(default_factory=dict)


def list_testsets(project) -> list[TestSetInfo]:
    """Every test set the project lists: dataset splits first, then stored sets with their sources and
    sizes (from the index, or older files' headers; never their data)."""
    out = []
    for entry in project.testsets:
        if not entry.get("artifact"):
            source = Source("split", entry.get("dataset", ""), split=entry.get("split", "test"))
            out.append(TestSetInfo(entry["name"], source))
    for name, entry in project.artifacts("testset").items():
        how = entry.get("provenance", {})
        role = stored_role(how)
        dataset = str(how.get("dataset", ""))
        source = (Source("subset", dataset, parent=str(how.get("of", "")), rule=str(how.get("rule", "")))
                  if role == "subset" else Source("stored", dataset, artifact=name, role=role))
        out.append(TestSetInfo(name, source, _stored_size(project, name, entry), entry.get("problem", ""), how))
    return out


def _stored_size(project, name: str, entry: dict) -> int | None:
    if "problem" in entry:
        return None
    shapes = entry.get("shapes", {})
    key = next((k for k in ("y", "labels", "indices") if k in shapes), None)
    if key is not None:
        return int(shapes[key][0])
    try:
        artifact = project.load_artifact(name)
        key = next((k for k in ("y", "labels", "indices") if k in artifact.names), None)
        return artifact.shape(key)[0] if key else None
    except WorkbenchError:
        return None

"""Set algebra on test sets by their ids (`comparison.set_algebra`): union, intersection and difference
against plain-Python references, round trips, refusals, saving with the recipe, and the inputs that add
items no other set covers."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
from scipy import sparse

from workbench.core.comparison.set_algebra import adding_new_items, combine, recipe, save_combination
from workbench.core.errors import WorkbenchError
from workbench.core.project.folder import Project
from workbench.core.testsets import Source, TestSet, resolve


def _set(name: str, ids: list[str], seed: int, shape=(1, 4, 4), only: str | None = None) -> TestSet:
    """A stored-like set whose images, labels and `shared` column are a function of the id, so an
    input can be recognised by its id wherever it ends up."""
    rng = np.random.default_rng(seed)
    n = len(ids)
    digest = np.array([sum(map(ord, i)) for i in ids])
    images = ((digest[:, None] % 97) / 97.0 * np.ones((n, int(np.prod(shape))))).reshape((n, *shape))
    images = images.astype(np.float32)
    labels = (digest % 10).astype(np.int64)
    columns = {"shared": digest.astype(np.float64) / 3}
    if only:
        columns[only] = rng.random(n)
    return TestSet(name, Source("stored", "digits", artifact=name, role="selection"), images, labels,
                   np.asarray(ids), columns)


@pytest.fixture
def sets():
    a = _set("A", ["a", "b", "c", "d", "e"], 0, only="only_a")
    b = _set("B", ["d", "f", "b", "g", "f"], 1, only="only_b")  # f twice inside B
    c = _set("C", ["g", "a", "h", "d"], 2)
    return a, b, c


def _union_ref(*sets):
    out, origin, seen = [], [], set()
    for t in sets:
        for i in t.ids.tolist():
            if i not in seen:
                seen.add(i)
                out.append(i)
                origin.append(t.name)
    return out, origin


def _check_rows_follow_ids(arrays, *sets):
    """Every output row holds the image, label and shared column its id has in the operands."""
    by_id = {}
    for t in sets:
        for k, i in enumerate(t.ids.tolist()):
            by_id.setdefault(i, (t.numpy([k])[0], t.labels[k], t.columns["shared"][k]))
    for k, i in enumerate(arrays["ids"].tolist()):
        image, label, shared = by_id[i]
        np.testing.assert_array_equal(arrays["x"][k], image)
        assert arrays["y"][k] == label and arrays["shared"][k] == shared


def test_union(sets):
    a, b, c = sets
    out = combine("union", [a, b])
    ids, origin = _union_ref(a, b)
    assert out["ids"].tolist() == ids == ["a", "b", "c", "d", "e", "f", "g"]
    assert out["origin"].tolist() == origin
    assert set(out) == {"x", "y", "ids", "shared", "origin"}  # only_a and only_b are not shared
    assert out["x"].shape == (7, 1, 4, 4) and out["x"].dtype == np.float32 and out["y"].dtype == np.int64
    _check_rows_follow_ids(out, a, b)
    three = combine("union", [c, b, a])
    assert (three["ids"].tolist(), three["origin"].tolist()) == _union_ref(c, b, a)
    _check_rows_follow_ids(three, c, b, a)


def test_union_keeps_a_repeated_id_once():
    a = _set("A", ["x", "y", "x", "z", "y"], 0)
    b = _set("B", ["z", "w", "w"], 1)
    out = combine("union", [a, b])
    assert out["ids"].tolist() == ["x", "y", "z", "w"]
    assert out["origin"].tolist() == ["A", "A", "A", "B"]


def test_union_when_a_later_set_adds_nothing(sets):
    a = sets[0]
    sub = a.subset([3, 1], name="A-part")
    out = combine("union", [a, sub])
    assert out["ids"].tolist() == a.ids.tolist() and out["origin"].tolist() == ["A"] * 5
    out = combine("union", [a, a])
    assert out["ids"].tolist() == a.ids.tolist()


@pytest.mark.parametrize("order", [(0, 1), (1, 0), (0, 2), (2, 1), (0, 1, 2), (2, 0, 1)])
def test_intersection_and_difference(sets, order):
    chosen = [sets[k] for k in order]
    first, others = chosen[0], chosen[1:]
    held = [set(t.ids.tolist()) for t in others]
    inter = combine("intersection", chosen)
    diff = combine("difference", chosen)
    assert inter["ids"].tolist() == [i for i in first.ids.tolist() if all(i in h for h in held)]
    assert diff["ids"].tolist() == [i for i in first.ids.tolist() if not any(i in h for h in held)]
    for out in (inter, diff):
        assert out["x"].shape[1:] == (1, 4, 4) and len(out["x"]) == len(out["y"]) == len(out["ids"])
        _check_rows_follow_ids(out, first)
        assert "origin" not in out


def test_three_operands_by_hand(sets):
    a, b, c = sets
    assert combine("intersection", [a, b, c])["ids"].tolist() == ["d"]
    assert combine("difference", [a, b, c])["ids"].tolist() == ["c", "e"]
    assert combine("intersection", [b, a])["ids"].tolist() == ["d", "b"]  # the first set's order


def test_round_trips(sets):
    a, b, c = sets

    def stored(name, arrays):
        return TestSet(name, Source("stored", "digits"), arrays["x"], arrays["y"], arrays["ids"],
                       {k: v for k, v in arrays.items() if k not in ("x", "y", "ids")})

    union = stored("A∪B", combine("union", [a, b]))
    assert combine("intersection", [union, a])["ids"].tolist() == a.ids.tolist()
    for other in (b, c):
        minus = stored("A−X", combine("difference", [a, other]))
        both = stored("A∩X", combine("intersection", [a, other]))
        back = combine("union", [minus, both])
        assert sorted(back["ids"].tolist()) == sorted(a.ids.tolist())
        _check_rows_follow_ids(back, a)
    empty = combine("difference", [a, a])
    assert len(empty["ids"]) == len(empty["y"]) == len(empty["x"]) == 0
    assert empty["x"].shape[1:] == (1, 4, 4)


def test_bad_input(sets):
    a, b, _ = sets
    with pytest.raises(WorkbenchError, match="two or more"):
        combine("union", [a])
    with pytest.raises(WorkbenchError, match="two or more"):
        combine("intersection", [])
    wide = _set("W", ["a", "q"], 3, shape=(1, 5, 5))
    for operation in ("union", "intersection", "difference"):
        with pytest.raises(WorkbenchError, match="different shapes"):
            combine(operation, [a, wide])
    with pytest.raises(WorkbenchError, match="Unknown set operation"):
        combine("symmetric difference", [a, b])
    assert recipe("union", ["A", "B", "C"]) == "A ∪ B ∪ C" and recipe("difference", ["A", "B"]) == "A − B"


# --- saving ---------------------------------------------------------------------------------------------

@pytest.fixture
def project(tmp_path):
    return Project.create(tmp_path / "p", "digits")


@pytest.mark.parametrize("operation", ["union", "intersection", "difference"])
def test_save_combination_resolves_back(project, sets, operation):
    a, b, c = sets
    name = f"combined-{operation}"
    entry = save_combination(project, name, operation, [a, b, c])
    arrays = combine(operation, [a, b, c])
    found = resolve(project, name)
    assert found.ids.tolist() == arrays["ids"].tolist()
    np.testing.assert_array_equal(found.labels, arrays["y"])
    np.testing.assert_array_equal(found.numpy(), arrays["x"])
    np.testing.assert_array_equal(found.columns["shared"], arrays["shared"])
    if operation == "union":
        assert [str(v) for v in found.columns["origin"]] == arrays["origin"].tolist()
    how = project.artifacts("testset")[name]["provenance"]
    assert how["operation"] == operation and how["of"] == ["A", "B", "C"]
    assert how["recipe"] == recipe(operation, ["A", "B", "C"]) and how["role"] == "set algebra"
    assert how["dataset"] == "digits" and entry["provenance"]["recipe"] == how["recipe"]
    assert found.source.kind == "stored" and found.kind == "set algebra"
    # reopened, the set reads back the same
    again = resolve(Project.open(project.folder), name)
    assert again.ids.tolist() == found.ids.tolist()


def test_save_empty_combination_is_refused(project, sets):
    a, _, _ = sets
    with pytest.raises(WorkbenchError, match="holds no inputs, so nothing was saved") as caught:
        save_combination(project, "nothing", "difference", [a, a])
    assert "A − A" in str(caught.value)
    assert "nothing" not in project.artifacts("testset")


# --- the inputs that add new items -------------------------------------------------------------------------

def _fake_comparison(matrices: dict[str, dict[str, np.ndarray]]):
    profiles = {name: SimpleNamespace(items={k: sparse.csr_matrix(m) for k, m in by.items()})
                for name, by in matrices.items()}
    return SimpleNamespace(profiles=profiles)


def _greedy(matrices, name, criterion):
    taken = set()
    for other, by in matrices.items():
        if other != name:
            taken |= {j for row in by[criterion] for j, hit in enumerate(row) if hit}
    keep = []
    for r, row in enumerate(matrices[name][criterion]):
        for j, hit in enumerate(row):
            if hit and j not in taken:
                taken.add(j)
                if r not in keep:
                    keep.append(r)
    return keep


@pytest.mark.parametrize("seed", range(5))
def test_adding_new_items_against_greedy(seed):
    rng = np.random.default_rng(seed)
    total = 60
    matrices = {}
    for name, n, density in (("A", 40, 0.04), ("B", 25, 0.08), ("C", 10, 0.1)):
        matrices[name] = {"idc": rng.random((n, total)) < density, "nc": rng.random((n, 12)) < 0.3}
    comparison = _fake_comparison(matrices)
    for name in matrices:
        for criterion in ("idc", "nc"):
            got = adding_new_items(comparison, name, criterion)
            assert got.dtype == np.int64
            assert got.tolist() == _greedy(matrices, name, criterion)
    # every item of A that no other set covers is reached by a kept row
    got = adding_new_items(comparison, "A")
    a = matrices["A"]["idc"]
    others = matrices["B"]["idc"].any(axis=0) | matrices["C"]["idc"].any(axis=0)
    new = a.any(axis=0) & ~others
    assert np.array_equal(a[got].any(axis=0) & new, new)


def test_adding_new_items_by_hand_and_refusals():
    a = np.zeros((4, 6), bool)
    a[0, [0, 1]] = a[1, [1, 2]] = a[2, [2]] = a[3, [5, 4]] = True
    b = np.zeros((3, 6), bool)
    b[1, 0] = True
    comparison = _fake_comparison({"A": {"idc": a}, "B": {"idc": b}})
    # item 0 is B's; 1 comes from row 0, 2 from row 1 (row 2 adds nothing then), 4 and 5 from row 3 once
    assert adding_new_items(comparison, "A").tolist() == [0, 1, 3]
    assert adding_new_items(comparison, "B").tolist() == []
    with pytest.raises(WorkbenchError, match="not one of the compared sets"):
        adding_new_items(comparison, "Z")
    with pytest.raises(WorkbenchError, match="did not measure kmnc"):
        adding_new_items(comparison, "A", "kmnc")

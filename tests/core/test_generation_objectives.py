"""The IDC objectives of the latent search: a success is an input in a combination the reference set leaves
uncovered (checked by measuring IDC again with the found inputs added), the fitness is the distance to the
nearest uncovered cell's centroids (against a loop), "both" also needs a misclassification, a seed searches
alike alone or batched, and the generated set records the objective and each input's combination."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

from workbench.core.errors import WorkbenchError
from workbench.core.execution.jobs import JobContext
from workbench.core.generation.generated import run_generation
from workbench.core.generation.objectives import NewCombination, idc_objective, margins
from workbench.core.generation.storage import load_generator
from workbench.core.generation.tig import draw_seeds, search


@pytest.fixture(scope="module")
def gan():
    return load_generator("gan-fashion-mnist")


@pytest.fixture(scope="module")
def objective(lenet5_fashion, fashion_tiny):
    return idc_objective(JobContext("cpu"), lenet5_fashion, fashion_tiny, m=4)


def layer_values(objective, classifier, images) -> np.ndarray:
    """The IDC layer's values of `images`, taken the plain way (a hook, one forward pass)."""
    from workbench.core.models.activations import hook_point, neuron_values

    seen = []
    module = dict(classifier.module.named_modules())[hook_point(objective.catalogue, objective.definition)]
    handle = module.register_forward_hook(lambda m, i, out: seen.append(neuron_values(out, "channel-mean")))
    with torch.no_grad():
        classifier.module(torch.as_tensor(images))
    handle.remove()
    return seen[0].numpy()


def test_fitness_is_the_distance_to_the_nearest_uncovered_cell_and_success_a_new_cell(objective, lenet5_fashion,
                                                                                       fashion_tiny):
    images = fashion_tiny.split("train").tensor(range(40))
    labels = torch.from_numpy(np.asarray(fashion_tiny.split("train").labels[:40], dtype=np.int64))
    scores = objective.evaluate(JobContext("cpu"), lenet5_fashion, images, labels)
    values = layer_values(objective, lenet5_fashion, images)[:, objective.idc.neurons]
    idc = objective.idc
    covered = set(idc.covered()[0].tolist())
    for i in range(len(images)):
        # nearest centroid per neuron → the combination; the targets: every combination not covered
        index = [int(np.argmin(np.abs(np.asarray(c) - values[i, j]))) for j, c in enumerate(idc.centroids)]
        code = int(idc.radix.encode(np.array([index]))[0])
        assert int(scores.code[i]) == code
        assert bool(scores.success[i]) == (code not in covered)
        best = min(float(np.linalg.norm(values[i] - idc.centroid_values(np.array([t]))[0])) for t in objective.uncovered)
        assert float(scores.fitness[i]) == pytest.approx(best, rel=1e-4, abs=1e-5)
    with torch.no_grad():
        np.testing.assert_allclose(scores.margin, margins(lenet5_fashion.module(images), labels), atol=1e-5)
    assert objective.describe()["reference_covered"] == len(covered)
    assert len(objective.uncovered) == idc.incc_size - len(covered)


def test_both_needs_a_misclassification_in_a_new_cell(objective, lenet5_fashion, fashion_tiny):
    both = NewCombination(objective.idc, objective.definition, objective.catalogue, misbehave=True)
    images = fashion_tiny.split("test").tensor(range(60))
    labels = torch.from_numpy(np.asarray(fashion_tiny.split("test").labels[:60], dtype=np.int64))
    idc_scores = objective.evaluate(JobContext("cpu"), lenet5_fashion, images, labels)
    scores = both.evaluate(JobContext("cpu"), lenet5_fashion, images, labels)
    assert torch.equal(scores.success, idc_scores.success & (scores.margin < 0))
    torch.testing.assert_close(scores.fitness, idc_scores.fitness + scores.margin.clamp(min=0))
    assert both.name == "both" and objective.name == "idc"


def test_found_inputs_add_exactly_their_new_combinations_to_the_reference_coverage(objective, gan, lenet5_fashion,
                                                                                   fashion_tiny):
    ctx = JobContext("cpu")
    seeds = draw_seeds(ctx, gan, lenet5_fashion, 8, seed=2)
    results = search(ctx, gan, lenet5_fashion, seeds, -3.0, 3.0, 0.05, budget=25, seed=1, which=range(8),
                     objective=objective)
    found = [r for r in results if r.found]
    assert found, "a few seeds reach a combination the 200 reference images leave uncovered"
    for r in results:
        assert all(a >= b for a, b in zip(r.fitness, r.fitness[1:]))  # the elite survive
        assert r.found == (r.code in set(objective.uncovered.tolist()))
    images = np.stack([r.best_image for r in found])
    codes = objective.idc.profile({objective.definition.layer: layer_values(objective, lenet5_fashion, images)})
    assert codes.tolist() == [r.code for r in found]
    before = objective.idc.coverage().covered
    grown = copy.deepcopy(objective.idc)
    grown.update({objective.definition.layer: layer_values(objective, lenet5_fashion, images)})
    assert grown.coverage().covered == before + len(set(codes.tolist()))
    # a seed searches alike alone, with the IDC objective too
    alone = search(ctx, gan, lenet5_fashion, seeds, -3.0, 3.0, 0.05, budget=25, seed=1, which=[found[0].seed],
                   objective=objective)[0]
    assert (alone.generations, alone.code) == (found[0].generations, found[0].code)
    np.testing.assert_array_equal(alone.best_genome, found[0].best_genome)


def test_the_generated_set_records_the_objective_and_the_combinations(gan, lenet5_fashion, fashion_tiny):
    result = run_generation(JobContext("cpu"), [("gan", gan)], lenet5_fashion, fashion_tiny, 6, budget=25,
                            seed=0, objective="idc", m=4)
    a = result.arrays
    assert set(a["objective"].tolist()) == {"idc"} and result.runs[0].params["objective"] == "idc"
    assert result.runs[0].params["m"] == 4 and result.runs[0].params["layer"]
    assert (a["idc_code"][a["found"]] >= 0).all()
    (row,) = result.summary()
    assert row["new_combinations"] == len(set(a["idc_code"][a["found"]].tolist()))


def test_bad_objectives_are_refused(objective, gan, lenet5_fashion, fashion_tiny):
    with pytest.raises(WorkbenchError, match="Unknown objective"):
        run_generation(JobContext("cpu"), [("gan", gan)], lenet5_fashion, fashion_tiny, 2, objective="coverage")
    with pytest.raises(WorkbenchError, match="no layer"):
        idc_objective(JobContext("cpu"), lenet5_fashion, fashion_tiny, layer="nope", m=4)

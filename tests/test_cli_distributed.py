"""`--executor`, `--address` and `--shards` on the commands whose jobs run as shards: the same figures as a
local run, on a local Ray instance or in shards here, and bad input ending in a clear message and exit 2."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from cli_helpers import assert_clean_failure, run_cli, run_json

from workbench.core import sharding

REPO = Path(__file__).resolve().parent.parent
SLICE = REPO / "tests" / "data" / "fashion-mnist-slice"
COVERAGE = ["coverage", "--model", "lenet5-fashion", "--data", SLICE, "--device", "cpu", "--criteria", "idc,nc,tknc"]
IMPORTANCE = ["importance", "--model", "lenet5-fashion", "--data", SLICE, "--device", "cpu", "--layer", "fc2"]
ATTACK = ["attack", "--model", "lenet5-fashion", "--data", SLICE, "--device", "cpu", "--split", "test",
          "--max-inputs", "200", "--eps", "0.1", "--batch-size", "32"]


@pytest.fixture(scope="module")
def ray_session():
    """A local Ray instance started by the first `--executor ray` command, stopped after this module."""
    ray = pytest.importorskip("ray", reason="Ray is the distributed extra: pip install '.[distributed]'")
    yield
    sharding.forget_clusters()
    ray.shutdown()


def figures(result: dict) -> dict:
    return {name: (c["covered"], c["total"]) for name, c in result["criteria"].items()}


def test_coverage_on_ray_and_in_local_shards_gives_the_local_figures(ray_session, capsys):
    local = run_json(capsys, *COVERAGE)
    assert figures(run_json(capsys, *COVERAGE, "--executor", "ray", "--shards", "3")) == figures(local)
    assert figures(run_json(capsys, *COVERAGE, "--shards", "4")) == figures(local)


def test_importance_and_a_pool_on_ray(ray_session, capsys):
    local, on_ray = run_json(capsys, *IMPORTANCE), run_json(capsys, *IMPORTANCE, "--executor", "ray")
    assert on_ray["ranking"] == local["ranking"] and on_ray["correct"] == local["correct"]
    assert on_ray["relevance"] == pytest.approx(local["relevance"], rel=1e-9, abs=1e-9)
    pool, pool_on_ray = run_json(capsys, *ATTACK), run_json(capsys, *ATTACK, "--executor", "ray", "--shards", "2")
    assert pool_on_ray["candidates"] == pool["candidates"]


@pytest.mark.parametrize("args, words", [
    (["--address", "ray://10.0.0.5:10001"], ["--address names a Ray cluster", "--executor ray"]),
    (["--shards", "0"], ["--shards"]),
    (["--shards", "two"], ["--shards"]),
    (["--executor", "spark"], ["--executor"]),
    (["--executor", "ray", "--address", "127.0.0.1:1"], ["Nothing answers", "127.0.0.1:1"]),
    (["--executor", "ray", "--address", "no-port"], ["not HOST:PORT"]),
])
def test_bad_distribution_options_fail_clearly(capsys, args, words):
    rc, out, err = run_cli(capsys, *COVERAGE, *args)
    assert_clean_failure(rc, err, *words)


def test_without_ray_the_option_says_how_to_install_it(capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # as if Ray were not installed
    monkeypatch.setattr(sharding, "_clusters", {})
    rc, out, err = run_cli(capsys, *COVERAGE, "--executor", "ray")
    assert_clean_failure(rc, err, "Ray is not installed", "pip install 'dl-testing-workbench[distributed]'")

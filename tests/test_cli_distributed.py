"""`--executor`, `--address` and `--shards` on the commands whose jobs run as shards: the same figures as a
local run, on a local Ray instance or in shards here, and bad input ending in a clear message and exit 2; a Ray that
does not start said in words, and --json output that stays JSON when a worker dies."""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import socket
import sys
import time
from pathlib import Path

import pytest
from cli_helpers import assert_clean_failure, run_cli, run_json

from workbench.core.execution import sharding

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


def dying_first(folder: str, run, ctx, shared, piece):
    """A shard whose worker dies on the job's first try of any shard (Ray runs it again), then runs as planned."""
    mark = Path(folder) / "died"
    if not mark.exists():
        mark.write_text("once")
        os._exit(1)
    return run(ctx, shared, piece)


def test_json_output_stays_json_when_a_ray_worker_dies(ray_session, capsys, monkeypatch, tmp_path):
    """Ray's driver printed "(raylet) A worker died…" to stdout, before the document: now it is on stderr."""
    import ray

    from workbench.core.execution.ray_cluster import RayShards

    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # `dying_first` goes to the workers by value
    planned = RayShards.run
    monkeypatch.setattr(RayShards, "run", lambda self, ctx, plan: planned(
        self, ctx, dataclasses.replace(plan, run=functools.partial(dying_first, str(tmp_path), plan.run))))
    rc, out, err = run_cli(capsys, *IMPORTANCE, "--executor", "ray", "--shards", "2", "--json")
    deadline = time.monotonic() + 60  # the driver prints what the cluster says as it arrives, maybe after the end
    while "(raylet)" not in err and time.monotonic() < deadline:
        time.sleep(0.2)
        more_out, more_err = capsys.readouterr()
        out, err = out + more_out, err + more_err
    assert rc == 0, err
    assert (tmp_path / "died").exists()  # a worker did die, and its shard ran again
    assert "(raylet)" in err  # what Ray said stays visible
    assert "ranking" in json.loads(out)  # stdout is the document alone


def test_with_json_whatever_else_prints_goes_to_stderr(capsys, monkeypatch):
    import workbench.core.plugins as plugins

    monkeypatch.setattr(plugins, "load_plugins", lambda: print("a chatty plugin says hello"))
    rc, out, err = run_cli(capsys, "evaluate", "--model", "lenet5-fashion", "--data", SLICE, "--device", "cpu",
                           "--json")
    assert rc == 0, err
    assert json.loads(out)["n"] and "a chatty plugin says hello" in err


@pytest.mark.parametrize("remote", [False, True])
def test_a_ray_that_does_not_start_says_what_to_do_instead(capsys, monkeypatch, remote):
    ray = pytest.importorskip("ray", reason="Ray is the distributed extra: pip install '.[distributed]'")

    def refuse(**options):  # what Ray raises: a bare Exception for a local node, ConnectionError for a cluster
        if "address" in options:
            raise ConnectionError("ray client connection timeout")
        raise Exception("The current node timed out during startup. This could happen because some of the raylet "
                        "failed to startup or the GCS has become overloaded.")

    monkeypatch.setattr(sharding, "_clusters", {})
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", refuse)
    with socket.create_server(("127.0.0.1", 0)) as head:  # something answers at the address, then Ray refuses
        address = f"ray://127.0.0.1:{head.getsockname()[1]}"
        rc, out, err = run_cli(capsys, *COVERAGE, "--executor", "ray", *(["--address", address] if remote else []))
    if remote:
        assert_clean_failure(rc, err, f"Could not connect to the Ray cluster at '{address}'",
                             "connection timeout", "ray status", "--executor local", "This machine")
    else:
        assert_clean_failure(rc, err, "The local Ray instance did not start", "timed out during startup",
                             "ray stop", "--address", "--executor local", "This machine")

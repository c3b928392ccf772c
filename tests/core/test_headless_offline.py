"""Two promises of the core: it never imports Qt, and every loader works with the network off."""

from __future__ import annotations

import json
import pkgutil
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import workbench.core

REPO = Path(__file__).resolve().parents[2]
BLOCKED = ("PySide6", "shiboken6", "pyqtgraph", "superqt", "workbench.gui", "PyQt5", "PyQt6")


def core_modules() -> list[str]:
    return sorted(m.name for m in pkgutil.walk_packages(workbench.core.__path__, "workbench.core."))


def test_core_has_the_expected_modules():
    names = set(core_modules())
    for required in ("execution.jobs", "data.dataset", "models.architectures", "models.model_io", "models.activations",
                     "models.training", "project.folder", "project.store", "plugins"):
        assert f"workbench.core.{required}" in names


def test_core_and_cli_import_and_run_with_qt_blocked(tmp_path):
    """Every core module (and the CLI's info command) works in a process where Qt cannot be imported."""
    script = textwrap.dedent(f"""
        import importlib, importlib.abc, json, sys
        BLOCKED = {BLOCKED!r}

        class Block(importlib.abc.MetaPathFinder):
            def find_spec(self, name, path=None, target=None):
                if any(name == b or name.startswith(b + ".") for b in BLOCKED):
                    raise ImportError(f"{{name}} is blocked: the core must not import it")
                return None

        sys.meta_path.insert(0, Block())
        for b in BLOCKED:  # the blocker works
            try:
                importlib.import_module(b)
            except ImportError:
                pass
            else:
                raise SystemExit(f"blocker failed for {{b}}")
        modules = {core_modules()!r} + ["workbench.cli", "workbench.core"]
        for m in modules:
            importlib.import_module(m)
        from workbench.cli import main
        rc = main(["info", "--json"])
        leaked = sorted(m for m in sys.modules if any(m == b or m.startswith(b + ".") for b in BLOCKED))
        print(json.dumps({{"rc": rc, "leaked": leaked, "imported": modules}}))
    """)
    env = {"PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1", "HOME": str(tmp_path), "WORKBENCH_PLUGIN_PATH": ""}
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=REPO, env=env,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    last = json.loads(proc.stdout.strip().splitlines()[-1])
    assert last["leaked"] == []
    assert last["rc"] == 0
    assert len(last["imported"]) >= 10
    assert "Traceback" not in proc.stderr


def test_core_sources_do_not_mention_qt_imports():
    """A cheap second line of defence, also covering imports inside functions never run by the test above."""
    offenders = []
    for path in Path(workbench.core.__path__[0]).rglob("*.py"):
        for n, line in enumerate(path.read_text().splitlines(), 1):
            stripped = line.strip()
            if stripped.startswith(("import ", "from ")) and any(b in stripped for b in BLOCKED):
                offenders.append(f"{path.name}:{n}: {stripped}")
    assert offenders == []


# --- offline -------------------------------------------------------------------------------------------

@pytest.fixture
def no_network(monkeypatch):
    attempts = []

    def refuse(*args, **kwargs):
        attempts.append(args[1:] if len(args) > 1 else args)
        raise OSError("network access attempted during a test")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket.socket, "connect_ex", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.setattr(socket, "getaddrinfo", refuse)
    return attempts


def test_datasets_and_models_load_with_the_network_off(no_network, fresh_dataset_cache, tmp_path,
                                                       digits_model_file, slice_dir):
    from workbench.core.data.registry import dataset_status, load_dataset
    from workbench.core.execution.jobs import JobContext
    from workbench.core.models.model_io import bundled_models, load_model
    from workbench.core.models.training import evaluate

    loaded = []
    for row in dataset_status():
        if row["available"]:
            loaded.append(load_dataset(row["name"]).name)
    assert "digits" in loaded
    load_dataset(str(slice_dir))
    np.savez(tmp_path / "d.npz", x=np.zeros((3, 4, 4), np.uint8), y=np.array([0, 1, 0]))
    load_dataset(str(tmp_path / "d.npz"))
    for card in bundled_models():
        if card["available"]:
            load_model(card["name"])
    model = load_model(digits_model_file)
    evaluate(JobContext("auto"), model, load_dataset("digits"))
    assert no_network == []


def test_the_network_guard_itself_works(no_network):
    with pytest.raises(OSError, match="network access"):
        socket.create_connection(("example.org", 80), timeout=1)
    assert no_network

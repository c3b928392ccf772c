"""The wheel carries the bundled resources where `resources_dir()` looks for them when installed."""

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    run = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", str(ROOT), "-w", str(out)],
                         capture_output=True, text=True, timeout=300)
    if run.returncode != 0:
        pytest.skip(f"building the wheel needs hatchling from PyPI: {run.stderr[-300:]}")
    return next(out.glob("*.whl"))


def test_wheel_holds_resources_and_entry_points(wheel):
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
        entry_points = next(z.read(n).decode() for n in names if n.endswith("entry_points.txt"))
    bundled = {Path(n).name for n in names if n.startswith("workbench/resources/models/")}
    for model in ("lenet1-fashion", "lenet4-fashion", "lenet5-fashion", "lenet5-mnist5k"):
        assert f"{model}.pt" in bundled and f"{model}.json" in bundled
    assert "[gui_scripts]" in entry_points and "workbench = workbench.cli:main" in entry_points
    assert not any(n.startswith("tests/") for n in names)


def test_installed_layout_is_found_first(tmp_path, monkeypatch):
    from workbench.core import resources

    (tmp_path / "workbench" / "resources" / "models").mkdir(parents=True)
    monkeypatch.setattr(resources, "_PACKAGE", tmp_path / "workbench")
    assert resources.resources_dir() == tmp_path / "workbench" / "resources"


def test_source_checkout_layout_is_found():
    from workbench.core.resources import resources_dir

    assert resources_dir() == ROOT / "resources"
    assert (resources_dir() / "models" / "lenet5-fashion.pt").exists()

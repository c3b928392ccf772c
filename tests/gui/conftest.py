"""Fixtures for the GUI tests: offscreen Qt, the Fashion-MNIST slice, windows that clean up after
themselves, error dialogs that record instead of showing, and a check that no thread is left.

Fashion-MNIST here is the vendored 2,000/1,000-image slice (same file names as the Debian package),
so a window opens, loads, evaluates and trains in a second or two.
"""

from __future__ import annotations

import os
from pathlib import Path

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
SLICE_DIR = Path(__file__).resolve().parents[1] / "data" / "fashion-mnist-slice"

import pytest  # noqa: E402

SETTLE_TIMEOUT_MS = 60_000


@pytest.fixture(scope="module", autouse=True)
def fashion_slice_as_fashion_mnist():
    """`fashion-mnist` means the slice in every GUI test module, and only there (the registry caches
    datasets by name, so the cached entry is swapped in and out too)."""
    from workbench.core.data import registry as dataset_registry

    previous = os.environ.get("WORKBENCH_FASHION_MNIST_DIR")
    os.environ["WORKBENCH_FASHION_MNIST_DIR"] = str(SLICE_DIR)
    cached = dataset_registry._CACHE.pop("fashion-mnist", None)
    yield SLICE_DIR
    dataset_registry._CACHE.pop("fashion-mnist", None)
    if cached is not None:
        dataset_registry._CACHE["fashion-mnist"] = cached
    if previous is None:
        os.environ.pop("WORKBENCH_FASHION_MNIST_DIR", None)
    else:
        os.environ["WORKBENCH_FASHION_MNIST_DIR"] = previous


@pytest.fixture(autouse=True)
def app_settings_dir(tmp_path_factory, monkeypatch) -> Path:
    """The application's own settings (the recent projects) go to a fresh folder in every test, never
    to the user's; subprocesses the test starts inherit it."""
    from workbench.gui.session.app_settings import SETTINGS_DIR_ENV

    folder = tmp_path_factory.mktemp("app-settings")
    monkeypatch.setenv(SETTINGS_DIR_ENV, str(folder))
    return folder


@pytest.fixture(autouse=True)
def no_thread_left_behind(qapp):
    """Fail a test that leaves a thread of the global pool running."""
    from PySide6.QtCore import QThreadPool

    yield
    assert QThreadPool.globalInstance().waitForDone(30_000)  # a bound for a loaded machine, not a speed
    assert QThreadPool.globalInstance().activeThreadCount() == 0


@pytest.fixture
def demo_dir(tmp_path, monkeypatch) -> Path:
    folder = tmp_path / "demo"
    monkeypatch.setenv("WORKBENCH_DEMO_DIR", str(folder))
    return folder


@pytest.fixture
def error_dialogs(monkeypatch) -> list:
    """Error dialogs are recorded here instead of being shown."""
    from workbench.gui.widgets.error_dialog import ErrorDialog

    shown = []
    monkeypatch.setattr(ErrorDialog, "open", lambda self: shown.append(self))
    return shown


@pytest.fixture
def open_window(qtbot, demo_dir, error_dialogs):
    """`open_window(project=None, notices=(), long_jobs=THREAD)` → a shown MainWindow (the demo project by
    default; long jobs on a thread, or in a worker process as in the application).

    Every window is closed at the end, and its job pool must then be empty: closing the window
    is what has to stop every job.
    """
    from workbench.gui.shell.demo import open_demo_project
    from workbench.gui.shell.main_window import MainWindow, is_alive

    windows = []

    def open_(project=None, notices=(), long_jobs="thread"):
        if project is None:
            project, notices = open_demo_project()
        window = MainWindow(project, list(notices), long_jobs=long_jobs)
        qtbot.addWidget(window)
        window.show()
        # Window shortcuts (Ctrl+1, F1, …) only fire in the active window.
        window.activateWindow()
        qtbot.waitUntil(window.isActiveWindow, timeout=30_000)
        windows.append(window)
        return window

    yield open_
    for window in windows:
        if is_alive(window):
            window.close()
            assert window.runner.active_thread_count() == 0
            assert window.runner.is_idle()


@pytest.fixture
def settle(qtbot):
    """`settle(window)` waits until start-up is over and no job is queued or running."""
    def wait(window, timeout: int = SETTLE_TIMEOUT_MS) -> None:
        qtbot.waitUntil(lambda: window.session.is_ready and window.runner.is_idle(), timeout=timeout)
    return wait


@pytest.fixture
def settled_window(open_window, settle):
    window = open_window()
    settle(window)
    return window



@pytest.fixture(autouse=True)
def coverage_starts_by_itself(monkeypatch):
    """The Coverage view starts what it measures without timing it first, so a test that waits for a
    measurement neither depends on how busy the machine is nor pays for the trial (the offer of long
    work has tests of its own, which put the real estimate back)."""
    from workbench.core.coverage.estimate import CoverageWork
    from workbench.gui.session import coverage_runs

    def everything_quick(ctx, model, dataset, sets, layer, groups, m, *args, **kwargs):
        return CoverageWork([tuple(name for group in groups for name in group) for _ in sets], 0.0)

    monkeypatch.setattr(coverage_runs, "coverage_work", everything_quick)

"""Starting the GUI: `run_gui(project, view, screenshot)`, called by `workbench gui` and bare `workbench`.

PyTorch is imported behind a splash screen before the window shows (`load_before_showing`): its
libraries load holding the interpreter lock for half a second and more, which would freeze a window
already on screen. The device and plugins then load in the first job. With `screenshot`, the window
renders with real data:
it waits until every start-up job (dataset, model, evaluation) has finished, saves the PNG, closes
and returns 0.
"""

from __future__ import annotations

import importlib
import signal
import sys
from pathlib import Path

from PySide6.QtCore import QEventLoop, Qt, QTimer
from PySide6.QtWidgets import QApplication

import workbench
from workbench.core.errors import WorkbenchError
from workbench.core.execution.worker_process import leave_if_starting_worker
from workbench.core.project.folder import SETTINGS, Project
from workbench.gui.session import ui_gc
from workbench.gui.session.app_settings import APPLICATION, ORGANISATION
from workbench.gui.session.jobs import PROCESS
from workbench.gui.shell.demo import open_demo_project
from workbench.gui.shell.main_window import DEFAULT_SIZE, VIEW_TITLES, MainWindow
from workbench.gui.widgets.error_dialog import install_excepthook, report_error

SCREENSHOT_TIMEOUT_S = 180
IDLE_POLLS = 3  # consecutive idle polls, 100 ms apart, before the window counts as settled


def application() -> QApplication:
    """The running QApplication, or a new one set up for the workbench."""
    app = QApplication.instance()
    if app is None:
        app = QApplication(sys.argv[:1])
        app.setStyle("Fusion")
    app.setOrganizationName(ORGANISATION)
    app.setApplicationName(APPLICATION)
    app.setApplicationVersion(workbench.__version__)
    return app


# What jobs would import on their lane threads, behind the splash instead. An import on a lane thread
# holds the interpreter lock from the window for most of its time (h5py's 30-odd extension modules:
# 30–90 ms; SymPy, which `torch.autograd.grad` imports on its first call, in a gallery's or an
# explanation's job: 0.35 s), and what it leaves behind stays in every later full collection's scan.
# NumPy loads `random` and `char` on first use (a seeded sample, a split's input ids); a worker
# process's result is unpickled on the thread that follows the worker, so the comparison's module
# (SciPy's sparse matrices with it, 80 ms) would be imported there.
START_UP_IMPORTS = ("h5py", "platformdirs", "torch.utils.serialization", "torch.fx.experimental.symbolic_shapes",
                    "numpy.random", "numpy.char", "workbench.core.plugins", "workbench.core.comparison.compare")


def load_before_showing(app: QApplication) -> None:
    """Import PyTorch and set the start-up objects aside from the collector while a splash screen says
    so: both hold the interpreter lock (the import for half a second and more, the first full
    collection, which scans all of PyTorch, for about 150 ms), which would freeze a shown window."""
    import gc

    from PySide6.QtGui import QPixmap
    from PySide6.QtWidgets import QSplashScreen

    pixmap = QPixmap(420, 120)
    pixmap.fill(app.palette().color(app.palette().ColorRole.Window))
    splash = QSplashScreen(pixmap)
    splash.showMessage(f"DL Testing Workbench {workbench.__version__}\n\nLoading PyTorch…",
                       Qt.AlignmentFlag.AlignCenter, app.palette().color(app.palette().ColorRole.WindowText))
    splash.show()
    app.processEvents()
    import torch  # noqa: F401  (imported for its side effect: loaded before the window shows)

    for name in START_UP_IMPORTS:
        try:
            importlib.import_module(name)
        except ImportError:  # moved in another PyTorch release: a job then imports it, as it would anyway
            pass

    gc.collect()
    gc.freeze()  # what PyTorch made stays out of every later collection's scan
    splash.close()


def draw_before_showing(window) -> None:
    """Lay the window out and draw it once off screen before it shows, so that its first paint on screen
    finds styles polished, layouts settled and glyphs rasterised: that first paint froze the window
    it drew for 110–170 ms. The requests that building it posted (a polish for each of its 3,000
    widgets, 700 layouts) are handled here too, behind the splash, not in the shown window's first
    turn (85 ms). The objects the window was built of are set aside from the collector here too, so
    the collection after start-up scans only what was made since it showed (it took 15–17 ms)."""
    QApplication.sendPostedEvents()
    window.grab()
    QApplication.sendPostedEvents()
    ui_gc.freeze()


def open_start_project(spec: str | None) -> tuple[Project, list[tuple[str, str]], WorkbenchError | None]:
    """The project to open: the demo, or `spec` (opened, or created when the folder is new or empty).

    A folder that cannot be opened falls back to the demo project; the error comes back to be shown.
    """
    if spec is None:
        project, notices = open_demo_project()
        return project, notices, None
    folder = Path(spec).expanduser()
    try:
        if (folder / SETTINGS).exists():
            return Project.open(folder), [], None
        if folder.exists() and any(folder.iterdir()):
            raise WorkbenchError(f"{folder} is not a project folder (no {SETTINGS}) and is not empty.",
                                 "Choose a project folder, or an empty or new folder to create a project in.")
        demo, notices = open_demo_project()
        dataset = demo.datasets[0] if demo.datasets else "digits"
        return Project.create(folder, dataset, [m["spec"] for m in demo.models]), notices, None
    except WorkbenchError as exc:
        project, notices = open_demo_project()
        notices.append((f"Could not open {folder}: {exc.message} The demo project opened instead.", "error"))
        return project, notices, exc
    except OSError as exc:
        error = WorkbenchError(f"Cannot use {folder}: {exc.strerror or exc}.", "Choose a folder you can write to.")
        project, notices = open_demo_project()
        notices.append((f"{error.message} The demo project opened instead.", "error"))
        return project, notices, error


def wait_until_settled(window: MainWindow, timeout_s: float = SCREENSHOT_TIMEOUT_S) -> bool:
    """Run the event loop until start-up is over and no job is queued or running; False on timeout."""
    loop = QEventLoop()
    state = {"idle": 0, "settled": False}
    poll = QTimer()
    poll.setInterval(100)

    def check() -> None:
        idle = window.session.is_ready and window.runner.is_idle()
        state["idle"] = state["idle"] + 1 if idle else 0
        if state["idle"] >= IDLE_POLLS:
            state["settled"] = True
            loop.quit()

    poll.timeout.connect(check)
    QTimer.singleShot(int(timeout_s * 1000), loop.quit)
    poll.start()
    loop.exec()
    poll.stop()
    return state["settled"]


def take_screenshot(window: MainWindow, path: str | Path, timeout_s: float = SCREENSHOT_TIMEOUT_S) -> int:
    """Show the window, wait for its data, save it as PNG, close it; 0 when the file was written."""
    window.resize(*DEFAULT_SIZE)
    window.show()
    failures: list[str] = []
    window.runner.job_failed.connect(lambda job: failures.append(f"{job.name}: {job.record.message}"))
    if not wait_until_settled(window, timeout_s):
        print(f"warning: jobs still running after {timeout_s:.0f} s; saving the screenshot anyway", file=sys.stderr)
    for failure in failures:
        print(f"warning: {failure}", file=sys.stderr)
    QApplication.processEvents()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    saved = window.grab().save(str(path), "PNG")
    window.close()
    if not saved:
        print(f"error: could not write {path}", file=sys.stderr)
        return 1
    return 0


def run_gui(project: str | None = None, view: str | None = None, screenshot: str | None = None,
            long_jobs: str = PROCESS) -> int:
    """Open the main window on `project` (default: the demo) showing `view`; see the module docstring.
    Long jobs run in a worker process unless `long_jobs` is THREAD."""
    leave_if_starting_worker()  # a script without a __main__ guard, run again in a worker process: not a second GUI
    if view is not None and view not in VIEW_TITLES:
        print(f"error: unknown view {view!r}; choose one of {', '.join(VIEW_TITLES)}.", file=sys.stderr)
        return 2
    app = application()
    load_before_showing(app)
    opened, notices, error = open_start_project(project)
    window = MainWindow(opened, notices, long_jobs=long_jobs)
    if view is not None:
        window.show_view(view)
    if screenshot is not None:
        return take_screenshot(window, screenshot)
    restore_hook = install_excepthook(QApplication.activeWindow)
    # Ctrl+C in the terminal closes the window(s) properly; the timer lets Python see the signal.
    previous_sigint = signal.signal(signal.SIGINT, lambda *_: QApplication.closeAllWindows())
    wake = QTimer()
    wake.timeout.connect(lambda: None)
    wake.start(250)
    draw_before_showing(window)
    window.show()
    if error is not None:
        window._dialog(report_error(window, error, title="Cannot open project"))
    try:
        return app.exec()
    finally:
        wake.stop()
        signal.signal(signal.SIGINT, previous_sigint)
        restore_hook()

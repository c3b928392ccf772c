"""GUI benchmark: time to a usable window, and frame times of the thumbnail grid over 60k images.

Start-up runs in a fresh process (as a user starts the app). The grid shows Fashion-MNIST's full
training split (60,000 images) and jumps to 60 places spread over the whole range, repainting each
time; the floor is a repaint of a page already on screen (every thumbnail cached).
Run: `QT_QPA_PLATFORM=offscreen python benchmarks/bench_gui.py`.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time

import numpy as np

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

STARTUP = """
import time
t0 = time.perf_counter()
from workbench.gui.shell.app import application, open_start_project
from workbench.gui.shell.main_window import MainWindow
app = application()
project, notices, _ = open_start_project(None)
window = MainWindow(project, notices)
window.show()
app.processEvents()
print(time.perf_counter() - t0)
window.close()
"""


def bench_startup(rounds: int = 3) -> None:
    times = []
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "WORKBENCH_DEMO_DIR": os.path.join(tmp, "demo"),
               "WORKBENCH_SETTINGS_DIR": tmp}  # its temporary demo stays out of the user's recent projects
        for _ in range(rounds):
            out = subprocess.run([sys.executable, "-c", STARTUP], env=env, capture_output=True, text=True, check=True)
            times.append(float(out.stdout.split()[-1]))
    print(f"window shown after start: best {min(times):.2f} s, worst {max(times):.2f} s ({rounds} fresh processes; "
          "PyTorch loads afterwards in a job)")


def bench_grid() -> None:
    from PySide6.QtWidgets import QApplication

    from workbench.core.data.registry import load_dataset
    from workbench.gui.widgets.thumbnail_grid import ThumbnailGrid

    app = QApplication.instance() or QApplication([])
    data = load_dataset("fashion-mnist")
    split = data.split("train")
    grid = ThumbnailGrid(image_size=84)
    grid.resize(1100, 700)
    grid.show()
    grid.thumbnails.set_split(split, data.class_names, np.zeros(len(split), np.int64))
    deadline = time.monotonic() + 30
    while grid.verticalScrollBar().maximum() == 0 and time.monotonic() < deadline:
        app.processEvents()
    bar = grid.verticalScrollBar()

    def frame() -> float:
        t = time.perf_counter()
        grid.viewport().repaint()
        app.processEvents()
        return time.perf_counter() - t

    frame()
    floor = np.median([frame() for _ in range(20)])
    jumps = []
    for fraction in np.random.default_rng(0).permutation(np.linspace(0, 1, 60)):
        bar.setValue(int(bar.maximum() * fraction))
        jumps.append(frame())
    jumps = np.array(jumps) * 1000
    print(f"thumbnail grid, 60,000 images: jump + repaint median {np.median(jumps):.1f} ms, 95th percentile "
          f"{np.percentile(jumps, 95):.1f} ms, worst {jumps.max():.1f} ms; floor (repaint of a cached page) "
          f"{floor * 1000:.1f} ms")
    grid.close()


if __name__ == "__main__":
    bench_startup()
    bench_grid()

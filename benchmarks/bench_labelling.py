"""Is labelling limited by the person, never by the tool? Key press → next image on screen, measured.

Opens the Labelling view on a project with a generated set of Fashion-MNIST images (made here from
test images: the timing does not depend on where the pixels came from), starts a session and
answers every entry by key presses. For each key press it measures the time until the next image
has been painted (the key's handler, the committed answer, the next pixmap and a synchronous
repaint of the canvas, made before the answer's commit), the whole key handler, and beside them:

- the **floor**: painting an already made pixmap on the same canvas, with no session or store work;
- the **commit**: one answer row written and committed by the label store alone (WAL, full sync).

A frame at 60 Hz is 16.7 ms; the goal is every key press within one frame (p99 < 16.7 ms).

    .venv/bin/python benchmarks/bench_labelling.py [--items 300] [--mode blind|review]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402

FRAME_MS = 1000 / 60


def quantiles(values) -> str:
    v = np.asarray(values)
    return (f"median {np.median(v):.2f} ms, p90 {np.quantile(v, 0.9):.2f} ms, p99 {np.quantile(v, 0.99):.2f} ms, "
            f"max {v.max():.2f} ms")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--items", type=int, default=300)
    parser.add_argument("--mode", choices=("blind", "review"), default="blind")
    args = parser.parse_args()

    from PySide6.QtCore import QCoreApplication
    from PySide6.QtTest import QTest
    from PySide6.QtWidgets import QApplication

    from workbench.core.data.registry import load_dataset
    from workbench.core.labeling.label_store import LabelStore
    from workbench.core.project.folder import Project
    from workbench.core.testsets import save_testset
    from workbench.gui.shell.main_window import MainWindow

    app = QApplication.instance() or QApplication([])
    folder = Path(tempfile.mkdtemp(prefix="bench-labelling-")) / "project"
    project = Project.create(folder, "fashion-mnist", ["lenet5-fashion"])
    test = load_dataset("fashion-mnist").split("test")
    n = args.items
    labels = test.labels[:n].astype(np.int64)
    arrays = {"x": test.numpy(np.arange(n)), "y": labels, "generator": np.array(["vae-a", "gan-b", "dm-c"] * n)[:n],
              "kind": np.array(["vae", "gan", "diffusion"] * n)[:n], "extent": np.array(["high"] * n),
              "generations": np.arange(n, dtype=np.int64), "predicted": (labels + 1) % 10,
              "proxy_selforacle_invalid": np.arange(n) % 7 == 0, "proxy_daiv_invalid": np.arange(n) % 5 == 0,
              "proxy_oracle_verdict": np.array(["preserved", "changed", "uncertain"] * n)[:n]}
    save_testset(project, "generated-bench", arrays, role="generated", dataset="fashion-mnist")

    window = MainWindow(Project.open(folder), long_jobs="thread")
    window.resize(1440, 900)
    window.show()
    deadline = time.time() + 120
    while not (window.session.is_ready and window.runner.is_idle()) and time.time() < deadline:
        app.processEvents()
        time.sleep(0.01)
    view = window.views["labelling"]
    window.show_view("labelling")
    view.mode_box.setCurrentIndex(view.mode_box.findData(args.mode))
    view.choose("generated-bench")
    view.rater_edit.setText("bench")
    view.start()
    while view.labelling is None and time.time() < deadline:
        app.processEvents()
        time.sleep(0.01)
    s = view.labelling
    canvas = view.canvas

    # The floor: painting a made pixmap, nothing else.
    floor = []
    pixmap_key = (s.entry.kind, s.entry.index)
    for _ in range(200):
        started = time.perf_counter()
        canvas.show_image(pixmap_key, s.image(s.entry))
        canvas.repaint()
        floor.append(1000 * (time.perf_counter() - started))

    # Key presses: answer → commit → next image painted.
    keys, handled = [], []
    while not s.done:
        entry = s.entry
        key = str(s.check_class(entry)) if entry.kind == "check" else s.items[entry.index].expected
        started = time.perf_counter()
        QTest.keyClick(canvas, key)
        keys.append(1000 * (canvas.painted_at - started))  # the next image's first paint
        handled.append(1000 * (time.perf_counter() - started))
        QCoreApplication.processEvents()  # the prefetch of the next entries runs between key presses

    # The store alone.
    commits = []
    with LabelStore(folder / "bench-only.sqlite") as store:
        for i in range(300):
            started = time.perf_counter()
            store.answer("t", f"id{i}", "bench", "3", session="s")
            commits.append(1000 * (time.perf_counter() - started))
    window.close()

    floor_median = float(np.median(floor))
    print(f"Labelling view, {args.mode} mode, {len(keys)} key presses over {n} generated images "
          f"(+ {len(s.checks)} attention checks)")
    print(f"  floor (paint a made pixmap):        {quantiles(floor)}")
    print(f"  key press → next image painted:     {quantiles(keys)}  "
          f"({np.median(keys) / floor_median:.1f}× the floor at the median)")
    print(f"  whole key handler (paint + commit + panel): {quantiles(handled)}")
    print(f"  one committed answer (store alone): {quantiles(commits)}")
    within = float(np.mean(np.asarray(keys) < FRAME_MS))
    print(f"  within one frame (16.7 ms): {100 * within:.1f} % of key presses")
    return 0


if __name__ == "__main__":
    sys.exit(main())

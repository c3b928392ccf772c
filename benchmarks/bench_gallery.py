"""A click in the Importance view: a neuron's gallery, the ablation check and an input's explanation.

Fashion-MNIST (60,000 training, 10,000 test images) with the bundled LeNet-5 at `fc2`, as the
Importance view shows it. Timed, each the best (and median) of several interleaved rounds:

  floor     a plain forward + backward pass of one batch of 512 training images (the predicted
            logit's gradient), as the other benchmarks' floors; and of one image, for the explanation
  (1) importance over the training split, per class, as the session computes it, keeping no inputs
      per neuron and keeping 16 (the overhead ratio of keeping them)
  (2) a neuron's gallery as the view's job computes it: read from the kept inputs (now), and by a
      pass over a seeded 10,000-image sample (what every click did before; still what a result
      stored before inputs were kept gets)
  (3) the ablation check the view runs (top 6 and 5 random sets of 6 zeroed, all 10,000 test images),
      with a plain forward pass over the test split beside it
  (4) an input's explanation (one test image, its heatmap for one neuron and its values per neuron)

`--worker` runs (2)–(4) again the way the application does: in the interactive lane's worker
process (`core.execution.worker_process`, which runs at a lowered priority). `--busy N` keeps N processes
spinning at normal priority meanwhile — a machine whose cores others' work takes — which is where
a click's jobs took 23–26 s. `--gui` opens the window (worker processes, as the application) and
times a click on a heatmap cell until the gallery's images are shown and until their relevance is
drawn.

    .venv/bin/python benchmarks/bench_gallery.py [--rounds 5] [--worker] [--busy 2] [--gui]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

LAYER = "fc2"
GALLERY_SIZE = 9  # the view's
SAMPLE = 10_000  # what the view's gallery ranked when no inputs were kept
BATCH = 512  # the session's importance batch


def best_of(fns: dict, rounds: int) -> dict[str, tuple[float, float]]:
    """(best, median) seconds of each function, run interleaved round by round after one warm-up."""
    times: dict[str, list[float]] = {name: [] for name in fns}
    for fn in fns.values():
        fn()
    for _ in range(rounds):
        for name, fn in fns.items():
            start = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - start)
    return {name: (min(ts), statistics.median(ts)) for name, ts in times.items()}


def show(title: str, results: dict[str, tuple[float, float]], against: dict[str, tuple[str, float]] | None = None
         ) -> None:
    """Each result's best and median; `against` names a result's floor and that floor's best time."""
    print(f"\n{title}")
    for name, (best, median) in results.items():
        ratio = ""
        if against and name in against:
            floor, seconds = against[name]
            ratio = f"   ×{best / seconds:.2f} of {floor}"
        print(f"  {name:52s} {best * 1000:9.1f} ms (median {median * 1000:7.1f}){ratio}")


def plain_pass(module, x) -> None:
    x = x.clone().requires_grad_(True)
    logits = module(x)
    logits.gather(1, logits.argmax(1, keepdim=True)).sum().backward()
    module.zero_grad(set_to_none=True)


def plain_forward(module, split) -> None:
    import torch

    with torch.no_grad():
        for _, x, _ in split.batches(1000):
            module(x)


@contextmanager
def busy(processes: int):
    """`processes` interpreters spinning at normal priority while the block runs."""
    spinners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(processes)]
    try:
        yield
    finally:
        for spinner in spinners:
            spinner.kill()
            spinner.wait()


def core_calls(model, dataset, result, rounds: int) -> None:
    from workbench.core.execution.jobs import JobContext
    from workbench.core.importance.ablation import ablation_check
    from workbench.core.importance.gallery import explain_input, neuron_gallery
    from workbench.core.importance.neuron_importance import compute_importance

    ctx = JobContext("cpu")
    train, test = dataset.split("train"), dataset.split("test")
    module = model.module
    batch = train.tensor(slice(0, BATCH))
    one = test.tensor(slice(3, 4))
    neuron = int(result.ranking[1])
    top = [int(n) for n in result.top(6)]
    kept = result.top_inputs.neuron(neuron)

    floors = {"floor: forward + backward, one batch of 512": lambda: plain_pass(module, batch),
              "floor: forward + backward, one image": lambda: plain_pass(module, one),
              "floor: forward over the 10,000 test images": lambda: plain_forward(module, test)}
    measured = best_of(floors, rounds)
    show(f"Floors (torch {torch_version()}, {torch_threads()} threads)", measured)
    batch_floor = ("the batch floor", measured["floor: forward + backward, one batch of 512"][0])
    image_floor = ("the one-image floor", measured["floor: forward + backward, one image"][0])
    test_floor = ("the test-split forward", measured["floor: forward over the 10,000 test images"][0])

    importance = {
        "(1) importance, keeping no inputs": lambda: compute_importance(
            ctx, model, dataset, LAYER, per_class=True, batch_size=BATCH, top_inputs=0),
        "(1) importance, keeping 16 per neuron": lambda: compute_importance(
            ctx, model, dataset, LAYER, per_class=True, batch_size=BATCH)}
    results = best_of(importance, rounds)
    per_batch = (len(train) / BATCH) * batch_floor[1]
    show(f"Importance over the {len(train):,} training images, {LAYER}, per class, batch {BATCH}", results,
         {"(1) importance, keeping no inputs": ("the batch floor × batches", per_batch),
          "(1) importance, keeping 16 per neuron": ("keeping none", results["(1) importance, keeping no inputs"][0])})
    print(f"  of which keeping the inputs (TopInputs.offer, summed over one run): "
          f"{keeping_time(importance) * 1000:.0f} ms")

    fns = {"(2) gallery from the kept inputs": lambda: neuron_gallery(
               ctx, model, dataset, LAYER, neuron, k=GALLERY_SIZE, kept=kept),
           f"(2) gallery by a pass over {SAMPLE:,} (before)": lambda: neuron_gallery(
               ctx, model, dataset, LAYER, neuron, k=GALLERY_SIZE, max_inputs=SAMPLE),
           "(3) ablation check, top 6 vs 5 random sets": lambda: ablation_check(
               ctx, model, dataset, LAYER, top, draws=5, split="test"),
           "(4) explanation of one test image": lambda: explain_input(
               model, dataset, "test", 3, LAYER, neuron=neuron)}
    show("A click's jobs, called directly (in this process, normal priority)", best_of(fns, rounds),
         {name: batch_floor for name in fns if name.startswith("(2)")} |
         {"(3) ablation check, top 6 vs 5 random sets": test_floor,
          "(4) explanation of one test image": image_floor})


def keeping_time(importance: dict) -> float:
    """Seconds one importance run spends keeping each neuron's inputs: a direct measure of the overhead,
    which the whole run's time on a busy machine hides in its noise."""
    from workbench.core.importance.top_inputs import TopInputs

    original, spent = TopInputs.offer, []

    def timed(self, *args):
        start = time.perf_counter()
        original(self, *args)
        spent.append(time.perf_counter() - start)

    TopInputs.offer = timed
    try:
        importance["(1) importance, keeping 16 per neuron"]()
    finally:
        TopInputs.offer = original
    return sum(spent)


def worker_calls(model, dataset, result, rounds: int) -> None:
    """The same jobs through the interactive lane's worker process, as the application runs them."""
    from workbench.core.execution.jobs import JobContext
    from workbench.core.execution.worker_process import ProcessExecutor
    from workbench.core.importance.ablation import ablation_check
    from workbench.core.importance.gallery import explain, neuron_gallery

    executor = ProcessExecutor()
    executor.start()
    neuron = int(result.ranking[1])
    kept = result.top_inputs.neuron(neuron)
    top = [int(n) for n in result.top(6)]

    def run(fn, *args, **kwargs):
        return executor.run(JobContext("cpu"), fn, args, kwargs)

    try:
        run(explain, model, dataset, "test", 0, LAYER, None)  # the child has the model and the data from now on
        fns = {"(2) gallery from the kept inputs": lambda: run(neuron_gallery, model, dataset, LAYER, neuron,
                                                                k=GALLERY_SIZE, kept=kept),
               f"(2) gallery by a pass over {SAMPLE:,} (before)": lambda: run(
                   neuron_gallery, model, dataset, LAYER, neuron, k=GALLERY_SIZE, max_inputs=SAMPLE),
               "(3) ablation check, top 6 vs 5 random sets": lambda: run(
                   ablation_check, model, dataset, LAYER, top, draws=5, split="test"),
               "(4) explanation of one test image": lambda: run(explain, model, dataset, "test", 3, LAYER, neuron)}
        show("A click's jobs in the interactive lane's worker process (lowered priority, as in the application)",
             best_of(fns, rounds))
    finally:
        executor.close()


def gui_clicks(clicks: int) -> None:
    """Click heatmap cells in the window and time each until the gallery's images show and until their
    relevance is drawn."""
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from PySide6.QtCore import Qt
    from PySide6.QtTest import QTest
    from PySide6.QtWidgets import QApplication

    app = QApplication.instance() or QApplication(["bench"])
    folder = Path(tempfile.mkdtemp(prefix="bench-gallery-"))
    os.environ["WORKBENCH_DEMO_DIR"] = str(folder / "demo")
    os.environ["WORKBENCH_SETTINGS_DIR"] = str(folder)
    from workbench.gui.shell.app import draw_before_showing, load_before_showing
    from workbench.gui.shell.demo import open_demo_project
    from workbench.gui.shell.main_window import MainWindow

    load_before_showing(app)
    project, notices = open_demo_project()
    window = MainWindow(project, list(notices), long_jobs="process")
    window.resize(1440, 900)
    draw_before_showing(window)
    window.show()
    idle = lambda: window.session.is_ready and window.runner.is_idle()  # noqa: E731

    def pump_until(done, seconds: float = 300.0) -> bool:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            app.processEvents()
            if done():
                return True
            time.sleep(0.001)
        return False

    pump_until(idle)
    window.show_view("importance")
    view = window.views["importance"]
    started = time.monotonic()
    pump_until(lambda: time.monotonic() - started > 0.5 and view.result is not None and idle())
    shown, drawn = [], []
    for i in range(clicks):
        neuron = int(view.result.ranking[-1 - i])
        heatmap = view.heatmap
        point = heatmap.mapFromScene(heatmap.cell_center(0, neuron))
        start = time.perf_counter()
        QTest.mouseClick(heatmap.viewport(), Qt.MouseButton.LeftButton, pos=point)
        grids = (view.gallery.by_relevance, view.gallery.by_activation)
        pump_until(lambda: view.gallery.has_tiles() and view.gallery.title.text().startswith(f"Neuron {neuron} "))
        shown.append(time.perf_counter() - start)
        pump_until(lambda: view.gallery.title.text().startswith(f"Neuron {neuron} ") and view.gallery.has_tiles()
                   and all(t.heatmap is not None for g in grids for t in g.tiles))
        drawn.append(time.perf_counter() - start)
        pump_until(idle)
    jobs = [j for j in window.runner.jobs if j.name.startswith("Gallery of neuron")][-clicks:]
    window.runner.shutdown()
    window.close()
    shutil.rmtree(folder, ignore_errors=True)
    print(f"\nThe window (worker processes, as the application), {clicks} clicks on heatmap cells:")
    print(f"  images shown        best {min(shown) * 1000:7.1f} ms, median {statistics.median(shown) * 1000:7.1f} ms, "
          f"worst {max(shown) * 1000:7.1f} ms")
    print(f"  relevance drawn     best {min(drawn) * 1000:7.1f} ms, median {statistics.median(drawn) * 1000:7.1f} ms, "
          f"worst {max(drawn) * 1000:7.1f} ms")
    print(f"  gallery jobs ran in: {sorted({j.record.where for j in jobs})}, "
          f"{', '.join(f'{j.record.elapsed:.2f} s' for j in jobs)}")


def torch_version() -> str:
    import torch

    return torch.__version__


def torch_threads() -> int:
    import torch

    return torch.get_num_threads()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--worker", action="store_true", help="also through the interactive lane's worker process")
    parser.add_argument("--busy", type=int, default=0, metavar="N",
                        help="keep N processes spinning at normal priority while measuring")
    parser.add_argument("--gui", type=int, nargs="?", const=5, default=0, metavar="CLICKS",
                        help="also time clicks in the window (default 5 clicks)")
    args = parser.parse_args()

    from workbench.core.data.registry import load_dataset
    from workbench.core.execution.jobs import JobContext, share_cores
    from workbench.core.importance.neuron_importance import compute_importance
    from workbench.core.models.model_io import load_model

    share_cores()  # one torch thread per lane on 2 cores, as the application
    model, dataset = load_model("lenet5-fashion"), load_dataset("fashion-mnist")
    result = compute_importance(JobContext("cpu"), model, dataset, LAYER, per_class=True, batch_size=BATCH)
    print(f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f} before starting"
          + (f"; {args.busy} spinning processes while measuring" if args.busy else ""))
    with busy(args.busy):
        core_calls(model, dataset, result, args.rounds)
        if args.worker:
            worker_calls(model, dataset, result, args.rounds)
        if args.gui:
            gui_clicks(args.gui)


if __name__ == "__main__":
    main()

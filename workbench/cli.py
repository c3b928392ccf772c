"""The command line: `workbench [gui|info|train|evaluate] ...`; no sub-command opens the GUI.

Every sub-command calls the same core job functions the GUI runs, with a terminal progress bar
in place of the jobs panel. A `WorkbenchError` is printed as a message and a hint, never a traceback,
and the exit status is non-zero.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
from pathlib import Path

EXIT_ERROR = 2
EXIT_CANCELLED = 130


def _add_common(p: argparse.ArgumentParser, seed: bool = True) -> None:
    p.add_argument("--device", default="auto", help="auto (CUDA when present), cpu, cuda or cuda:N")
    p.add_argument("--project", metavar="DIR", help="project folder where results are stored")
    p.add_argument("--json", action="store_true", help="print machine-readable results")
    if seed:
        p.add_argument("--seed", type=int, default=0, help="random seed (default 0)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="workbench", description="DL Testing Workbench")
    sub = parser.add_subparsers(dest="command")

    gui = sub.add_parser("gui", help="open the GUI (the default)")
    gui.add_argument("--project", metavar="DIR", help="project folder (default: the demo project)")
    gui.add_argument("--view", default=None, help="view to show first: data, model, training")
    gui.add_argument("--screenshot", metavar="PNG", help="render the window with real data, save it, exit")

    info = sub.add_parser("info", help="datasets found, bundled models, device, versions, plugins")
    info.add_argument("--json", action="store_true")

    train = sub.add_parser("train", help="train a zoo architecture on a dataset")
    train.add_argument("--model", required=True, metavar="ARCH", help="architecture name, e.g. lenet5")
    train.add_argument("--data", required=True, metavar="NAME", help="dataset name or path")
    train.add_argument("--epochs", type=int, default=8)
    train.add_argument("--batch-size", type=int, default=128)
    train.add_argument("--lr", type=float, default=1e-3)
    train.add_argument("--out", metavar="PATH", help="checkpoint to write (default: <arch>-<data>.pt, "
                                                     "inside --project/models when given)")
    train.add_argument("--name", help="model name recorded in the card (default: the file name)")
    train.add_argument("--download", action="store_true", help="let torchvision:<Name> datasets download")
    _add_common(train)

    ev = sub.add_parser("evaluate", help="accuracy, per-class accuracy and confusion matrix")
    ev.add_argument("--model", required=True, metavar="MODEL", help="bundled model name or a path")
    ev.add_argument("--data", required=True, metavar="NAME", help="dataset name or path")
    ev.add_argument("--split", default="test")
    ev.add_argument("--arch", help="architecture of a plain state_dict file")
    ev.add_argument("--download", action="store_true", help="let torchvision:<Name> datasets download")
    ev.add_argument("--trust-file", action="store_true",
                    help="allow loading a full pickle (runs code from the file: only for files you trust)")
    _add_common(ev, seed=False)
    return parser


class TerminalProgress:
    """A tqdm bar on stderr fed by a job's progress reports."""

    def __init__(self, enabled: bool):
        self.enabled = enabled
        self.bar = None

    def __call__(self, done: int, total: int, message: str) -> None:
        if not self.enabled:
            return
        from tqdm import tqdm

        if self.bar is None or self.bar.total != total:
            self.close()
            self.bar = tqdm(total=total, file=sys.stderr, leave=False, dynamic_ncols=True)
        self.bar.set_description(message, refresh=False)
        self.bar.update(done - self.bar.n)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None


def _context(args, on_partial=None):
    from workbench.core.jobs import JobContext

    progress = TerminalProgress(enabled=sys.stderr.isatty() or not getattr(args, "json", False))
    return JobContext(args.device, on_progress=progress, on_partial=on_partial), progress


def _emit(args, result: dict, text: str) -> None:
    if args.json:
        print(json.dumps(result, indent=2, default=_plain))
    else:
        print(text)


def _plain(o):
    import numpy as np

    if isinstance(o, np.ndarray):
        return o.tolist()
    if isinstance(o, np.generic):
        return o.item()
    return str(o)


# --- sub-commands ----------------------------------------------------------------------------------

def cmd_info(args) -> int:
    import platform

    import torch

    from workbench.core.dataset_registry import dataset_status
    from workbench.core.jobs import device_description, resolve_device
    from workbench.core.model_io import bundled_models
    from workbench.core.plugins import load_plugins, plugin_folders, user_plugin_dir
    from workbench.core.store import library_versions

    reports = load_plugins()
    result = {
        "datasets": dataset_status(),
        "models": [{k: c.get(k) for k in ("name", "title", "arch", "dataset", "test_accuracy", "available",
                                          "install", "path", "licence")} for c in bundled_models()],
        "device": device_description(resolve_device("auto")), "cuda_available": torch.cuda.is_available(),
        "platform": platform.platform(), "versions": library_versions(),
        "plugins": [r.__dict__ for r in reports],
        "plugin_folders": [str(f) for f in plugin_folders()], "user_plugin_folder": str(user_plugin_dir()),
    }
    lines = ["Datasets:"]
    for d in result["datasets"]:
        lines.append(f"  {'✓' if d['available'] else '✗'} {d['name']:<22} {d['title']}"
                     + ("" if d["available"] else f"  — {d['reason']}; install: {d['install']}"))
    lines.append("Bundled models:")
    for m in result["models"]:
        acc = f"{m['test_accuracy'] * 100:.1f} % test accuracy" if m.get("test_accuracy") else ""
        lines.append(f"  {'✓' if m['available'] else '✗'} {m['name']:<24} {m.get('title') or ''} {acc}"
                     + ("" if m["available"] else f"  — install: {m['install']}"))
    lines.append(f"Device: {result['device']}")
    lines.append("Versions: " + ", ".join(f"{k} {v}" for k, v in result["versions"].items()))
    lines.append(f"Plugins (user folder {result['user_plugin_folder']}):")
    for r in reports:
        lines.append(f"  {'✓' if r.ok else '✗'} {r.name}: " + (", ".join(r.added) if r.ok else r.error))
    _emit(args, result, "\n".join(lines))
    return 0


def cmd_train(args) -> int:
    from workbench.core.dataset_registry import load_dataset
    from workbench.core.project import Project
    from workbench.core.training import train_and_save

    dataset = load_dataset(args.data, download=args.download)
    project = Project.open_or_create(args.project, dataset.recipe.get("name", args.data)) if args.project else None
    if project:
        project.ensure_writable()
    out = Path(args.out) if args.out else (
        (project.folder / "models" if project else Path.cwd()) / f"{args.model}-{dataset.name}.pt")

    def show_epoch(row):
        if not args.json:
            acc = f", test accuracy {row['test_accuracy'] * 100:.2f} %" if "test_accuracy" in row else ""
            print(f"epoch {row['epoch']}: loss {row['train_loss']:.4f}, train accuracy "
                  f"{row['train_accuracy'] * 100:.2f} %{acc}", file=sys.stderr)

    ctx, bar = _context(args, show_epoch)
    try:
        model, card = train_and_save(
            ctx, args.model, dataset, out, args.name or out.stem, epochs=args.epochs, batch_size=args.batch_size,
            lr=args.lr, seed=args.seed, source="trained by this project's own `workbench train`",
            command="workbench " + " ".join(shlex.quote(a) for a in args.argv))
    finally:
        bar.close()
    if project:
        project.add_model(str(out), card["name"])
    accuracy = f"Test accuracy: {card['test_accuracy'] * 100:.2f} %\n" if card["test_accuracy"] is not None else ""
    text = (f"Trained {args.model} on {dataset.name} for {args.epochs} epochs "
            f"({card['seconds_per_epoch']:.1f} s per epoch).\n{accuracy}Saved to {out}")
    _emit(args, {**card, "path": str(out)}, text)
    return 0


def cmd_evaluate(args) -> int:
    from workbench.core.dataset_registry import load_dataset
    from workbench.core.model_io import load_model
    from workbench.core.project import Project
    from workbench.core.training import evaluate

    model = load_model(args.model, arch=args.arch, trust=args.trust_file)
    dataset = load_dataset(args.data, download=args.download)
    # opened before the work, so a damaged project.json stops us before minutes of evaluation
    project = Project.open_or_create(args.project, dataset.recipe.get("name", args.data)) if args.project else None
    if project:
        project.ensure_writable()
    ctx, bar = _context(args)
    try:
        result = evaluate(ctx, model, dataset, args.split)
    finally:
        bar.close()
    if project:
        project.add_model(args.model)
        project.save_artifact("evaluation", f"evaluation {model.name} on {dataset.name}:{args.split}",
                              {"confusion": result["confusion"], "predictions": result["predictions"]},
                              model=model.name, model_fingerprint=model.fingerprint(), dataset=dataset.name,
                              split=args.split, accuracy=result["accuracy"], device=str(ctx.device))
    confusion = result["confusion"]
    lines = [f"{model.name} on {dataset.name} ({args.split}, {result['n']} images): "
             f"accuracy {result['accuracy'] * 100:.2f} %", "Per class:"]
    lines += [f"  {name:<14} {'—' if a is None else f'{a * 100:.1f} %'}"
              for name, a in result["per_class_accuracy"].items()]
    lines.append("Confusion matrix (rows: true class, columns: predicted):")
    lines += ["  " + " ".join(f"{v:5d}" for v in row) for row in confusion]
    payload = {k: v for k, v in result.items() if k != "predictions"}
    payload["model_info"] = model.info.to_dict()
    _emit(args, payload, "\n".join(lines))
    return 0


def cmd_gui(args) -> int:
    from workbench.gui.app import run_gui

    return run_gui(project=getattr(args, "project", None), view=getattr(args, "view", None),
                   screenshot=getattr(args, "screenshot", None))


COMMANDS = {"info": cmd_info, "train": cmd_train, "evaluate": cmd_evaluate, "gui": cmd_gui}


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)  # recorded in model cards as the command
    command = COMMANDS[args.command or "gui"]
    from workbench.core.errors import Cancelled, WorkbenchError

    try:
        if args.command in ("train", "evaluate"):
            from workbench.core.plugins import load_plugins
            load_plugins()
        return command(args)
    except WorkbenchError as exc:
        print(f"error: {exc.message}", file=sys.stderr)
        if exc.hint:
            print(f"  {exc.hint}", file=sys.stderr)
        if exc.details:
            print("  " + exc.details.replace("\n", "\n  "), file=sys.stderr)
        return EXIT_ERROR
    except BrokenPipeError:  # output piped into `head` and the like: not an error
        sys.stdout = open(os.devnull, "w")
        return 0
    except (KeyboardInterrupt, Cancelled):
        print("cancelled; nothing was written.", file=sys.stderr)
        return EXIT_CANCELLED

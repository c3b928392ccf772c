"""The command line: `workbench [gui|info|train|evaluate|importance] ...`; no sub-command opens the GUI.

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

    imp = sub.add_parser("importance", help="LRP neuron importance of a layer: relevance per neuron, top-m, "
                                            "conservation, an ablation check and a neuron gallery")
    imp.add_argument("--model", required=True, metavar="MODEL", help="bundled model name or a path")
    imp.add_argument("--data", required=True, metavar="NAME", help="dataset name or path")
    imp.add_argument("--layer", required=True, metavar="LAYER", help="layer whose neurons to rank, e.g. fc2")
    imp.add_argument("--rule", default="lrp-0", help="lrp-0 (default), epsilon, z+ or alpha-beta")
    imp.add_argument("--epsilon", type=float, default=0.01, help="ε of the epsilon rule (default 0.01)")
    imp.add_argument("--alpha", type=float, default=2.0, help="α of the alpha-beta rule (default 2; β = α − 1)")
    imp.add_argument("--maxpool", default="winner", choices=["winner", "equal-split"], help="max-pool variant")
    imp.add_argument("--point", default="post", choices=["post", "pre"], help="activation point of a neuron's value")
    imp.add_argument("--m", type=int, default=6, help="how many top neurons (default 6)")
    imp.add_argument("--per-class", action="store_true", help="also rank neurons per class")
    imp.add_argument("--split", default="train", help="split relevance is summed over (default train)")
    imp.add_argument("--max-inputs", type=int, metavar="N", help="use a seeded sample of N images of the split")
    imp.add_argument("--batch-size", type=int, default=500)
    imp.add_argument("--ablation", default="zero", choices=["zero", "mean", "off"],
                     help="ablate the top-m and random neurons by zeroing or mean-replacing them, or skip (off)")
    imp.add_argument("--ablation-split", default="test", help="split accuracy is measured on (default test)")
    imp.add_argument("--draws", type=int, default=5, help="random draws of m neurons to compare with (default 5)")
    imp.add_argument("--gallery", type=int, metavar="NEURON", help="write the gallery of this neuron (needs --out)")
    imp.add_argument("--out", metavar="DIR", help="folder for the gallery PNGs")
    imp.add_argument("--k", type=int, default=9, help="inputs per gallery list (default 9)")
    imp.add_argument("--arch", help="architecture of a plain state_dict file")
    imp.add_argument("--download", action="store_true", help="let torchvision:<Name> datasets download")
    imp.add_argument("--trust-file", action="store_true",
                     help="allow loading a full pickle (runs code from the file: only for files you trust)")
    _add_common(imp)
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


class SaveAtTheEnd:
    """A project whose new artifacts are held back until `commit()`, so a run that is cancelled or
    fails half-way stores nothing; finding and reading existing artifacts goes straight through."""

    def __init__(self, project):
        self.project = project
        self.pending: list[tuple] = []

    def find_artifact(self, kind: str, **match):
        return self.project.find_artifact(kind, **match)

    def load_artifact(self, name: str):
        return self.project.load_artifact(name)

    def save_artifact(self, kind: str, name: str, arrays: dict, **how) -> dict:
        self.pending.append((kind, name, arrays, how))
        return {"kind": kind}

    def commit(self) -> None:
        for kind, name, arrays, how in self.pending:
            self.project.save_artifact(kind, name, arrays, **how)
        self.pending.clear()


def _importance_rule(args):
    from workbench.core.errors import WorkbenchError
    from workbench.core.lrp import Composite, make_rule

    name = args.rule.lower()
    params = {"epsilon": {"epsilon": args.epsilon}, "lrp-epsilon": {"epsilon": args.epsilon},
              "alpha-beta": {"alpha": args.alpha, "beta": args.alpha - 1.0},
              "alphabeta": {"alpha": args.alpha, "beta": args.alpha - 1.0}}.get(name, {})
    if name not in ("epsilon", "lrp-epsilon") and args.epsilon != 0.01:
        raise WorkbenchError(f"--epsilon applies to the epsilon rule, not to {args.rule!r}.", "Add --rule epsilon.")
    return Composite(make_rule(name, **params), maxpool=args.maxpool)


def _check_importance_request(args, model, dataset, composite) -> int:
    """Refuse what would fail only after minutes of work: the layer, m, the gallery neuron. Returns the
    layer's neuron count."""
    from workbench.core.ablation import layer_neuron_count
    from workbench.core.activations import NeuronDefinition
    from workbench.core.errors import WorkbenchError
    from workbench.core.layers import layer_catalogue
    from workbench.core.lrp import LRP

    if (args.gallery is None) != (args.out is None):
        raise WorkbenchError("--gallery NEURON and --out DIR go together.",
                             "Give both to write a neuron gallery, or neither.")
    for option, value in (("--m", args.m), ("--k", args.k), ("--draws", args.draws), ("--batch-size", args.batch_size)):
        if value < 1:
            raise WorkbenchError(f"{option} must be at least 1; got {value}.", f"Pass {option} 1 or more.")
    explainer = LRP(model.module, composite)  # names a layer LRP cannot handle, with the model's layers
    layers = [name for name in explainer.layer_names if name != "input"]
    if args.layer not in layers:
        raise WorkbenchError(f"The model has no layer {args.layer!r}.", f"Valid layers: {', '.join(layers)}.")
    catalogue = layer_catalogue(model.module, dataset.image_shape)
    count = layer_neuron_count(catalogue, NeuronDefinition(args.layer, args.point))
    if args.m > count:
        raise WorkbenchError(f"m = {args.m} is larger than the {count} neurons of layer {args.layer!r}.",
                             f"Choose --m between 1 and {count}, or a layer with more neurons.")
    if args.gallery is not None and not 0 <= args.gallery < count:
        raise WorkbenchError(f"Layer {args.layer!r} has neurons 0–{count - 1}; there is no neuron {args.gallery}.",
                             "Choose a --gallery neuron within the layer.")
    return count


def cmd_importance(args) -> int:
    import time

    from workbench.core.ablation import ablation_check
    from workbench.core.activations import NeuronDefinition
    from workbench.core.conservation import conservation_check
    from workbench.core.dataset_registry import load_dataset
    from workbench.core.gallery import neuron_gallery, save_gallery_png
    from workbench.core.importance import compute_importance
    from workbench.core.model_io import load_model
    from workbench.core.project import Project
    from workbench.core.training import check_compatible

    started = time.monotonic()
    model = load_model(args.model, arch=args.arch, trust=args.trust_file)
    dataset = load_dataset(args.data, download=args.download)
    check_compatible(model, dataset)
    composite = _importance_rule(args)
    _check_importance_request(args, model, dataset, composite)
    project = Project.open_or_create(args.project, dataset.recipe.get("name", args.data)) if args.project else None
    if project:
        project.ensure_writable()
    store = SaveAtTheEnd(project) if project else None
    definition = NeuronDefinition(args.layer, args.point)
    ctx, bar = _context(args)
    try:
        importance = compute_importance(ctx, model, dataset, definition, rule=composite, per_class=args.per_class,
                                        batch_size=args.batch_size, project=store, split=args.split,
                                        max_inputs=args.max_inputs, seed=args.seed)
        top = importance.top(args.m)
        conservation = conservation_check(ctx, model, dataset, definition, composite, split=args.split,
                                          max_inputs=min(2000, args.max_inputs or 2000),
                                          batch_size=args.batch_size, seed=args.seed)
        ablation = None if args.ablation == "off" else ablation_check(
            ctx, model, dataset, args.layer, top, mode=args.ablation, draws=args.draws, seed=args.seed,
            split=args.ablation_split, batch_size=max(args.batch_size, 1000), definition=definition, project=store)
        gallery = None if args.gallery is None else neuron_gallery(
            ctx, model, dataset, definition, args.gallery, k=args.k, split=args.split, rule=composite,
            batch_size=args.batch_size, max_inputs=args.max_inputs, seed=args.seed)
        ctx.check()  # the last moment to cancel before anything is written
    finally:
        bar.close()
    if store:
        store.commit()
        project.add_model(args.model)
    files = save_gallery_png(gallery, dataset, args.out) if gallery else []
    seconds = time.monotonic() - started
    payload = _importance_payload(args, model, dataset, importance, top, conservation, ablation, gallery, files,
                                  str(ctx.device), seconds)
    _emit(args, payload, _importance_text(payload, importance))
    return 0


def _importance_payload(args, model, dataset, importance, top, conservation, ablation, gallery, files, device,
                        seconds) -> dict:
    per_class = None
    if importance.per_class is not None:
        names = list(dataset.class_names)
        per_class = {"counts": {names[c]: int(n) for c, n in enumerate(importance.counts)},
                     "empty_classes": [names[c] for c in importance.empty_classes],
                     "top_m": {names[c]: importance.top(args.m, c).tolist() for c in range(len(names))},
                     "relevance": {names[c]: importance.per_class[c].tolist() for c in range(len(names))}}
    return {
        "model": model.name, "model_fingerprint": model.fingerprint(), "dataset": dataset.name,
        "split": args.split, "layer": args.layer, "neuron_definition": importance.definition.to_dict(),
        "rule": importance.rule, "inputs": importance.inputs, "correct": importance.correct,
        "neurons": importance.neurons, "relevance": importance.totals.tolist(),
        "ranking": importance.ranking.tolist(), "m": args.m, "top_m": top.tolist(),
        "top_m_relevance": importance.totals[top].tolist(), "per_class": per_class,
        "conservation": conservation.to_dict(),
        "ablation": ablation.to_dict() if ablation else None,
        "gallery": None if gallery is None else {**gallery.to_dict(), "files": [str(f) for f in files]},
        "reused": {"importance": importance.reused, "ablation": bool(ablation and ablation.reused)},
        "artifacts": {"importance": importance.artifact, "ablation": ablation.artifact if ablation else None},
        "seed": args.seed, "device": device, "seconds": round(seconds, 3),
    }


def _importance_text(r: dict, importance) -> str:
    lines = [f"{r['model']} — layer {r['layer']} ({r['neurons']} neurons), rule {importance.rule['dense']['name']}, "
             f"{r['correct']} of {r['inputs']} {r['split']} inputs correctly classified"]
    if r["reused"]["importance"]:
        lines.append(f"importance: reused from the project ({r['artifacts']['importance']})")
    lines.append("Relevance per neuron (summed over correctly classified inputs), most relevant first:")
    ranked = [f"{n:>5d} {r['relevance'][n]:>12.4g}" for n in r["ranking"]]
    for row in range(0, len(ranked), 4):
        lines.append("  " + "   ".join(ranked[row:row + 4]))
    lines.append(f"Top-{r['m']} neurons: {', '.join(str(n) for n in r['top_m'])}")
    if r["per_class"]:
        for name, neurons in r["per_class"]["top_m"].items():
            lines.append(f"  class {name}: " + (", ".join(str(n) for n in neurons) if neurons else
                                                 "empty — no correctly classified inputs"))
    c = r["conservation"]
    lines.append(f"Conservation ({c['correct']} correctly classified of {c['inputs']} sampled {r['split']} inputs):")
    budget = [("relevance started at the predicted logits", f"{c['start_total']:.6g}"),
              (f"reached {r['layer']}", f"{c['layer_total']:.6g} ({c['layer_share'] * 100:.2f} %)"),
              ("kept back by biases of the layers above", f"{c['absorbed_total']:.6g}")]
    lines += [f"  {label:<44}{value}" for label, value in budget]
    lines.append(f"  conservation error {c['error']:.2e} (worst single input {c['max_input_error']:.2e})")
    a = r["ablation"]
    if a:
        if a["reused"]:
            lines.append(f"ablation: reused from the project ({a['artifact']})")
        lines.append(f"Ablation ({a['mode']}, {a['inputs']} {a['split']} inputs; baseline accuracy "
                     f"{a['baseline_accuracy'] * 100:.2f} %):")
        lines.append(f"  top-{a['m']} neurons {a['important_neurons']}: accuracy {a['important_accuracy'] * 100:.2f} % "
                     f"(drop {a['important_drop'] * 100:.2f} points), {a['downstream_layer']} activations change "
                     f"{a['important_activation_change'] * 100:.1f} %")
        lines.append(f"  {a['draws']} random sets of {a['m']}: drop {a['random_drop_mean'] * 100:.2f} ± "
                     f"{a['random_drop_std'] * 100:.2f} points, {a['downstream_layer']} activations change "
                     f"{a['random_activation_change_mean'] * 100:.1f} %")
        lines.append("  → the important neurons hurt more than random ones" if a["important_hurts_more"] else
                     "  → the important neurons do NOT hurt more than random ones here")
    g = r["gallery"]
    if g:
        lines.append(f"Gallery of neuron {g['neuron']}: {len(g['files'])} PNGs written to "
                     f"{Path(g['files'][0]).parent if g['files'] else '(none)'}")
    lines.append(f"Took {r['seconds']:.1f} s on {r['device']}.")
    return "\n".join(lines)


def cmd_gui(args) -> int:
    from workbench.gui.app import run_gui

    return run_gui(project=getattr(args, "project", None), view=getattr(args, "view", None),
                   screenshot=getattr(args, "screenshot", None))


COMMANDS = {"info": cmd_info, "train": cmd_train, "evaluate": cmd_evaluate, "importance": cmd_importance,
            "gui": cmd_gui}


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)  # recorded in model cards as the command
    command = COMMANDS[args.command or "gui"]
    from workbench.core.errors import Cancelled, WorkbenchError

    try:
        if args.command in ("train", "evaluate", "importance"):
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

"""The command line: `workbench [gui|info|train|evaluate|importance|coverage|attack|fol|select|fuzz|retrain|converge|
experiment] ...`; no sub-command opens the GUI. The robustness commands live in `cli_robustness`.

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
    gui.add_argument("--view", default=None, help="view to show first: data, model, training, importance, coverage, robustness")
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
    _add_rule_options(imp)
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

    cov = sub.add_parser("coverage", help="coverage of a test set: IDC (cluster counts, |INCC|, covered combinations) "
                                          "and the classic criteria NC, KMNC, NBC, SNAC, TKNC, TKNP, LSA, DSA, MDSA")
    cov.add_argument("--model", required=True, metavar="MODEL", help="bundled model name or a path")
    cov.add_argument("--data", required=True, metavar="NAME", help="dataset the criteria are fitted on (its train split)")
    cov.add_argument("--layer", metavar="LAYER", help="layer of IDC and surprise adequacy (default: the last "
                                                      "Conv/Linear before the output layer)")
    cov.add_argument("--criteria", default="idc", metavar="LIST",
                     help="comma-separated criteria, e.g. idc,nc,kmnc,nbc,snac,tknc,tknp,lsa,dsa,mdsa, or all "
                          "(default idc)")
    cov.add_argument("--m", type=int, default=6, help="important neurons of IDC (default 6)")
    cov.add_argument("--testset", metavar="NAME", help="test set: a split of --data (test, train), a project test set "
                                                      "(e.g. fashion-mnist:test), or a dataset name or path whose images "
                                                      "fit the model (default: the test split of --data)")
    cov.add_argument("--max-inputs", type=int, metavar="N", help="measure a seeded sample of N test inputs")
    cov.add_argument("--per-class", action="store_true", help="one criterion per class (test inputs routed by "
                                                              "--route); reports each class and the mean")
    cov.add_argument("--route", default="label", choices=["label", "prediction"],
                     help="per-class routing of test inputs (default label)")
    cov.add_argument("--preset", default="deepimportance", choices=["deepimportance", "nlc", "dnn-tip"],
                     help="layers and semantics of the classic criteria (default deepimportance)")
    cov.add_argument("--layers", metavar="LIST", help="comma-separated layers of the classic criteria "
                                                      "(default: the preset's; required with --preset dnn-tip)")
    cov.add_argument("--point", default="post", choices=["post", "pre"], help="activation point of --layer's neurons")
    cov.add_argument("--option", action="append", default=[], metavar="CRITERION.NAME=VALUE",
                     help="a criterion option, e.g. kmnc.k=100 or lsa.max_features=50 (repeatable)")
    cov.add_argument("--state", action="append", default=[], metavar="FILE",
                     help="a criterion state saved with --save-state: its fit is used instead of fitting; refused "
                          "when it was made for another model, layer, data or options (repeatable)")
    cov.add_argument("--save-state", metavar="DIR", help="write each fitted criterion's state to DIR/<criterion>.h5")
    cov.add_argument("--batch-size", type=int, default=500)
    cov.add_argument("--split", default="train", help="split the criteria are fitted on (default train)")
    _add_rule_options(cov)
    cov.add_argument("--arch", help="architecture of a plain state_dict file")
    cov.add_argument("--download", action="store_true", help="let torchvision:<Name> datasets download")
    cov.add_argument("--trust-file", action="store_true",
                     help="allow loading a full pickle (runs code from the file: only for files you trust)")
    _add_common(cov)
    from workbench.cli_robustness import add_robustness_commands

    add_robustness_commands(sub)
    return parser


def _add_rule_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--rule", default="lrp-0", help="lrp-0 (default), epsilon, z+ or alpha-beta")
    p.add_argument("--epsilon", type=float, default=0.01, help="ε of the epsilon rule (default 0.01)")
    p.add_argument("--alpha", type=float, default=2.0, help="α of the alpha-beta rule (default 2; β = α − 1)")
    p.add_argument("--maxpool", default="winner", choices=["winner", "equal-split"], help="max-pool variant")


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

    def load_artifact(self, name: str, kind: str | None = None):
        return self.project.load_artifact(name, kind)

    def artifacts(self, kind: str | None = None) -> dict[str, dict]:
        return self.project.artifacts(kind)

    def ensure_writable(self) -> None:
        self.project.ensure_writable()

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


# --- coverage --------------------------------------------------------------------------------------

COMBINATIONS_SHOWN = 64  # per IDC model in the text report; --json lists them all


def _criteria_list(text: str) -> list[str]:
    """The --criteria names, in order, without repeats; 'all' is every known criterion."""
    from workbench.core.coverage.registry import criterion_names
    from workbench.core.errors import WorkbenchError

    known = criterion_names()
    names = [n.strip().lower() for n in text.split(",") if n.strip()]
    if names == ["all"]:
        return known
    unknown = [n for n in names if n not in known]
    if unknown or not names:
        what = f"Unknown coverage criterion {unknown[0]!r}." if unknown else "--criteria names no criterion."
        raise WorkbenchError(what, f"Valid criteria: {', '.join(known)} (or all).")
    return list(dict.fromkeys(names))


def _criterion_options(items: list[str], criteria: list[str]) -> dict[str, dict]:
    """--option kmnc.k=100 → {"kmnc": {"k": 100}}; values are read as JSON where they parse (numbers,
    true/false, null, lists), else kept as text. Unknown option names are refused when the criterion
    is created, with its options listed."""
    from workbench.core.errors import WorkbenchError

    options: dict[str, dict] = {}
    for item in items:
        target, sep, raw = item.partition("=")
        name, dot, option = target.strip().partition(".")
        if not sep or not dot or not option:
            raise WorkbenchError(f"--option {item!r} is not CRITERION.NAME=VALUE.", "For example: --option kmnc.k=100.")
        if name.lower() not in criteria:
            raise WorkbenchError(f"--option {item!r} is for {name!r}, which --criteria does not ask for.",
                                 f"Measured: {', '.join(criteria)}.")
        try:
            value = json.loads(raw)
        except json.JSONDecodeError:
            value = raw
        options.setdefault(name.lower(), {})[option] = value
    return options


def _check_coverage_request(args, model, dataset, criteria: list[str]) -> tuple[str, list[str] | None]:
    """Refuse what would fail only after minutes of work. Returns (IDC/SA layer, classic layers or None)."""
    from workbench.core.ablation import layer_neuron_count
    from workbench.core.activations import NeuronDefinition
    from workbench.core.coverage.measure import default_layer
    from workbench.core.errors import WorkbenchError
    from workbench.core.layers import layer_catalogue

    for option, value in (("--m", args.m), ("--batch-size", args.batch_size), ("--max-inputs", args.max_inputs)):
        if value is not None and value < 1:
            raise WorkbenchError(f"{option} must be at least 1; got {value}.", f"Pass {option} 1 or more.")
    catalogue = layer_catalogue(model.module, dataset.image_shape)
    names = [info.name for info in catalogue]
    layer = args.layer or default_layer(catalogue)
    layers = [n.strip() for n in args.layers.split(",") if n.strip()] if args.layers else None
    for name in [layer] + (layers or []):
        if name not in names:
            raise WorkbenchError(f"The model has no layer {name!r}.", f"Valid layers: {', '.join(names)}.")
    if args.preset == "dnn-tip" and not layers:
        raise WorkbenchError("The dnn-tip preset measures the layers you name.", "Add --layers, e.g. --layers fc1,fc2.")
    if "idc" in criteria:
        count = layer_neuron_count(catalogue, NeuronDefinition(layer, args.point))
        if args.m > count:
            raise WorkbenchError(f"m = {args.m} is larger than the {count} neurons of layer {layer!r}.",
                                 f"Choose --m between 1 and {count}, or a layer with more neurons.")
    return layer, layers


def _is_dataset_name(name: str) -> bool:
    from workbench.core.dataset_registry import dataset_entries

    return name in {e.name for e in dataset_entries()} or name.startswith("torchvision:") or os.path.exists(name)


def _testset_from_artifact(project, name: str):
    """A test set a project holds as an artifact: images `x` (or `images`) and labels `y` (or `labels`)."""
    from workbench.core.data import Split, as_image_array, as_labels
    from workbench.core.errors import WorkbenchError

    artifact = project.load_artifact(name)
    images = next((artifact[k] for k in ("x", "images") if k in artifact.names), None)
    labels = next((artifact[k] for k in ("y", "labels") if k in artifact.names), None)
    if images is None or labels is None:
        raise WorkbenchError(f"Test set {name!r} of the project holds no images and labels.",
                             "Coverage needs labelled images (arrays x and y).")
    return Split(as_image_array(images, f"test set {name!r}"), as_labels(labels, what=f"test set {name!r} labels"))


def _foreign_split(other, dataset, split_name: str | None, label: str):
    """The split of another dataset used as test set; its classes must be the model's."""
    from workbench.core.errors import WorkbenchError

    default = [str(i) for i in range(other.num_classes)]
    if other.class_names != default and other.class_names != list(dataset.class_names):
        raise WorkbenchError(f"Test set {label!r} has classes {', '.join(other.class_names[:6])}"
                             f"{', …' if other.num_classes > 6 else ''} ({other.num_classes}), but the model knows "
                             f"{', '.join(dataset.class_names[:6])}{', …' if dataset.num_classes > 6 else ''} "
                             f"({dataset.num_classes}).", "Use a test set labelled with the model's classes.")
    if split_name is None:
        split_name = "test" if "test" in other.splits else next(iter(other.splits))
    return other.split(split_name)


def _resolve_testset(args, dataset, project) -> tuple[object, str]:
    """(a split name of --data or a `Split`, the test set's name) from --testset: a project test set,
    a split of --data, a dataset name or path (its test split), or DATASET:SPLIT."""
    from workbench.core.dataset_registry import load_dataset
    from workbench.core.errors import WorkbenchError

    name = args.testset
    if name is None:
        return "test", f"{dataset.name}:test"
    entry = next((t for t in project.testsets if t["name"] == name), None) if project else None
    if entry and entry.get("artifact"):
        return _testset_from_artifact(project, entry["artifact"]), name
    base, split = (entry["dataset"], entry.get("split", "test")) if entry else (None, None)
    if base is None:
        if name in dataset.splits:
            return name, f"{dataset.name}:{name}"
        if _is_dataset_name(name):
            base = name
        elif ":" in name and _is_dataset_name(name.rsplit(":", 1)[0]):
            base, split = name.rsplit(":", 1)
        else:
            known = [t["name"] for t in project.testsets] if project else []
            raise WorkbenchError(f"No test set {name!r}.",
                                 f"Give a split of {dataset.name} ({', '.join(dataset.splits)}), "
                                 + (f"a project test set ({', '.join(known)}), " if known else "")
                                 + "a dataset name or path, or DATASET:SPLIT.")
    other = load_dataset(base, download=args.download)
    if other is dataset or (other.recipe and other.recipe == dataset.recipe):
        split = split or "test"
        dataset.split(split)  # names the splits there are
        return split, f"{dataset.name}:{split}"
    return _foreign_split(other, dataset, split, name), name


def _test_indices(args, test, dataset):
    """A seeded sample of --max-inputs indices of the test set, ascending; None measures all of it."""
    import numpy as np

    n = len(dataset.split(test)) if isinstance(test, str) else len(test)
    if args.max_inputs is None or args.max_inputs >= n:
        return None
    return np.sort(np.random.default_rng(args.seed).choice(n, args.max_inputs, replace=False))


def _load_states(paths: list[str], criteria: list[str]) -> dict[str, dict]:
    from workbench.core.coverage.artifacts import load_state_file
    from workbench.core.errors import WorkbenchError

    states = {}
    for path in paths:
        state = load_state_file(path)
        name = state.get("criterion")
        if name not in criteria:
            raise WorkbenchError(f"{path} holds a saved {name} state, which --criteria does not ask for.",
                                 f"Add {name} to --criteria, or leave the file out.")
        if name in states:
            raise WorkbenchError(f"Two saved {name} states were given.", "Give one --state file per criterion.")
        states[name] = state
    return states


def cmd_coverage(args) -> int:
    import time

    from workbench.core.activations import NeuronDefinition
    from workbench.core.coverage import measure_coverage
    from workbench.core.dataset_registry import load_dataset
    from workbench.core.model_io import load_model
    from workbench.core.project import SETTINGS, Project
    from workbench.core.training import check_compatible

    started = time.monotonic()
    criteria = _criteria_list(args.criteria)
    options = _criterion_options(args.option, criteria)
    model = load_model(args.model, arch=args.arch, trust=args.trust_file)
    dataset = load_dataset(args.data, download=args.download)
    check_compatible(model, dataset)
    dataset.split(args.split)
    layer, layers = _check_coverage_request(args, model, dataset, criteria)
    composite = _importance_rule(args)
    states = _load_states(args.state, criteria)
    existing = Project.open(args.project) if args.project and (Path(args.project) / SETTINGS).exists() else None
    test, test_name = _resolve_testset(args, dataset, existing)
    indices = _test_indices(args, test, dataset)
    project = existing or (Project.create(args.project, dataset.recipe.get("name", args.data)) if args.project
                           else None)
    if project:
        project.ensure_writable()
    store = SaveAtTheEnd(project) if project else None
    ctx, bar = _context(args)
    try:
        results = measure_coverage(ctx, model, dataset, NeuronDefinition(layer, args.point), criteria,
                                   train_split=args.split, test_split=test, m=args.m, seed=args.seed, project=store,
                                   per_class=args.per_class, route=args.route, preset=args.preset, layers=layers,
                                   options=options, rule=composite, batch_size=args.batch_size, test_indices=indices,
                                   states=states)
        ctx.check()  # the last moment to cancel before anything is written
    finally:
        bar.close()
    if store:
        store.commit()
        project.add_model(args.model)
    files = _save_states(args.save_state, results, model, dataset) if args.save_state else []
    payload = _coverage_payload(args, model, dataset, test_name, layer, results, files, str(ctx.device),
                                time.monotonic() - started)
    _emit(args, payload, _coverage_text(payload))
    return 0


def _save_states(folder: str, results: dict, model, dataset) -> list[str]:
    from workbench.core.coverage.artifacts import save_state_file

    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    files = []
    for key, result in results.items():
        path = out / f"{key}.h5"
        save_state_file(path, result.criterion.state_dict(), model=model.name, model_fingerprint=model.fingerprint(),
                        dataset=dataset.name, criterion=result.criterion.name)
        files.append(str(path))
    return files


def _value(v) -> dict:
    """A CoverageValue as JSON: fraction in [0, 1] (None for a count without a denominator)."""
    return {"value": v.fraction, "percent": v.percent, "covered": v.covered, "total": v.total}


def _finite_or_none(x):
    import math

    return None if x is None or not math.isfinite(x) else float(x)


def _idc_payload(idc) -> dict:
    """What IDC found: the important neurons, their clusters, |INCC| and every covered combination."""
    codes, counts = idc.covered()
    clusters, centroids = idc.combinations(codes), idc.centroid_values(codes)
    return {
        "layer": idc.layer, "neurons": idc.neurons.tolist(),
        "relevance": None if idc.relevance is None else idc.relevance.tolist(),
        "cluster_counts": idc.cluster_counts.tolist() if not idc.empty else [],
        "centroids": [c.tolist() for c in idc.centroids], "k_histogram": {str(k): n for k, n in idc.k_histogram().items()},
        "clusters": [c.to_dict() for c in idc.clusters], "train_inputs": idc.train_inputs, "incc": idc.incc_size,
        "covered_combinations": [{"code": int(code), "clusters": clusters[i].tolist(),
                                  "centroids": centroids[i].tolist(), "inputs": int(counts[i])}
                                 for i, code in enumerate(codes.tolist())],
        **_value(idc.coverage()),
    }


def _criterion_payload(result, class_names: list[str]) -> dict:
    import numpy as np

    from workbench.core.coverage import IDC, PerClass
    from workbench.core.coverage.neuron import NeuronCriterion
    from workbench.core.coverage.surprise import LSA, SurpriseCriterion

    c = result.criterion
    inner = c.members[0] if isinstance(c, PerClass) else c
    out = {"name": result.name, "title": inner.title, **_value(result.value), "warnings": result.warnings,
           "inputs": c.inputs_seen, "reused": result.reused, "artifact": result.artifact,
           "fit_artifact": result.fit_artifact, "identity": result.provenance.get("identity"),
           "curve": [[int(n), int(k), _finite_or_none(f)] for n, k, f in np.asarray(result.curve).tolist()]}
    if result.per_class is not None:
        out["per_class"] = {class_names[k]: _value(v) for k, v in result.per_class.items()}
    if isinstance(inner, IDC):
        if isinstance(c, PerClass):
            out["classes"] = {class_names[k]: _idc_payload(member) for k, member in enumerate(c.members)}
        else:
            out.update({k: v for k, v in _idc_payload(c).items() if k not in _value(c.coverage())})
    elif isinstance(inner, NeuronCriterion):
        out["layers"] = dict(inner.layer_sizes)
        out["neurons"] = inner.neurons
        if getattr(inner, "never_coverable", None) is not None and not isinstance(c, PerClass):
            labels = inner.neuron_labels()
            out["never_coverable"] = [labels[i] for i in inner.never_coverable.tolist()]
    elif isinstance(c, SurpriseCriterion):
        sa = c.values
        scored = sa[np.isfinite(sa)]
        out["layers"] = list(c.layers)
        out["sc"] = {"buckets": c.buckets if c.sc_upper is not None else None, "upper": c.sc_upper,
                     "width": c.sc_width}
        out["sa"] = {"inputs": len(sa), "scored": len(scored),
                     **{k: (float(f(scored)) if len(scored) else None)
                        for k, f in (("min", np.min), ("median", np.median), ("mean", np.mean), ("max", np.max))}}
        if isinstance(c, LSA):
            out["singular_classes"] = {class_names[k] if k < len(class_names) else str(k): why
                                       for k, why in c.singular_classes.items()}
    return out


def _coverage_payload(args, model, dataset, test_name, layer, results, files, device, seconds) -> dict:
    first = next(iter(results.values()))
    return {
        "model": model.name, "model_fingerprint": model.fingerprint(), "dataset": dataset.name,
        "train_split": args.split, "train_inputs": first.provenance["train"]["images"], "testset": test_name,
        "test_inputs": first.provenance["test"].get("measured", first.provenance["test"]["images"]),
        "layer": layer, "point": args.point, "m": args.m, "per_class": args.per_class,
        "route": args.route if args.per_class else None, "preset": args.preset, "seed": args.seed,
        "criteria": {key: _criterion_payload(r, list(dataset.class_names)) for key, r in results.items()},
        "state_files": files, "device": device, "seconds": round(seconds, 3),
    }


def _amount(r: dict) -> str:
    """'28.9 % — 74 / 256', or a count where there is no denominator. Per class, the percentage is the
    mean over the classes (the paper's protocol) and the counts are summed over them."""
    if r.get("per_class") and r["value"] is not None:
        return (f"{r['percent']:.1f} % mean of {len(r['per_class'])} classes — {r['covered']:,} / {r['total']:,} "
                "summed")
    if r["total"] is None:
        unit = {"tknp": "patterns"}.get(r["name"], "")
        if "sc" in r and r["sc"]["width"]:
            unit = f"distinct SA buckets of width {r['sc']['width']:g}"
        return f"{r['covered']:,} {unit}".rstrip()
    if r["value"] is None:
        return f"undefined — {r['covered']:,} / {r['total']:,}"
    return f"{r['percent']:.1f} % — {r['covered']:,} / {r['total']:,}"


def _combination_lines(idc: dict, indent: str) -> list[str]:
    if not idc["neurons"]:
        return [f"{indent}no important neurons (no correctly classified training inputs): IDC is undefined"]
    lines = [f"{indent}important neurons   {', '.join(str(n) for n in idc['neurons'])}",
             (f"{indent}clusters per neuron {', '.join(str(k) for k in idc['cluster_counts'])}   "
              f"|INCC| = {idc['incc']:,}"),
             f"{indent}covered combinations (cluster of each neuron, in that order: inputs):"]
    sep = "" if max(idc["cluster_counts"]) <= 10 else "."
    cells = [f"{sep.join(str(i) for i in c['clusters'])}: {c['inputs']}"
             for c in idc["covered_combinations"][:COMBINATIONS_SHOWN]]
    width = max((len(cell) for cell in cells), default=0) + 3
    for row in range(0, len(cells), 6):
        lines.append(indent + "  " + "".join(cell.ljust(width) for cell in cells[row:row + 6]).rstrip())
    hidden = len(idc["covered_combinations"]) - COMBINATIONS_SHOWN
    if hidden > 0:
        lines.append(f"{indent}  … and {hidden:,} more (--json lists them all)")
    return lines


def _coverage_text(p: dict) -> str:
    lines = [f"{p['model']} on {p['testset']} ({p['test_inputs']:,} test inputs); criteria fitted on "
             f"{p['dataset']}:{p['train_split']} ({p['train_inputs']:,} inputs); seed {p['seed']}"
             + (f"; per class (routed by {p['route']})" if p["per_class"] else "")]
    reused = [k for k, r in p["criteria"].items() if r["reused"]]
    if reused:
        lines.append(f"reused from the project: {', '.join(reused)}")
    width = max(len(k) for k in p["criteria"]) + 2
    for key, r in p["criteria"].items():
        where = f"layer {r['layer'] if 'layer' in r else p['layer']}, m = {p['m']}" if r["name"] == "idc" else (
            f"layer {', '.join(r['layers'])}" if isinstance(r.get("layers"), list) else
            f"{p['preset']} preset, {r['neurons']:,} neurons" if "neurons" in r else "")
        lines.append(f"{key.upper():<{width}}{_amount(r)}" + (f"   ({where})" if where else ""))
        if r["name"] == "idc" and "classes" not in r:
            lines += _combination_lines(r, "  ")
        if r.get("per_class"):
            lines.append("  per class:")
            for name, v in r["per_class"].items():
                lines.append(f"    {name:<14} {_amount({**v, 'name': r['name'], **({'sc': r['sc']} if 'sc' in r else {})})}")
                if "classes" in r:
                    lines += _combination_lines(r["classes"][name], "      ")
        if "sa" in r and r["sa"]["scored"]:
            sa = r["sa"]
            lines.append(f"  SA of {sa['scored']:,} scored inputs: min {sa['min']:.4g}, median {sa['median']:.4g}, "
                         f"max {sa['max']:.4g}")
        lines += [f"  warning: {w}" for w in r["warnings"]]
    if p["state_files"]:
        lines.append(f"Criterion states written to {Path(p['state_files'][0]).parent}: "
                     + ", ".join(Path(f).name for f in p["state_files"]))
    lines.append(f"Took {p['seconds']:.1f} s on {p['device']}.")
    return "\n".join(lines)


def cmd_gui(args) -> int:
    from workbench.gui.app import run_gui

    return run_gui(project=getattr(args, "project", None), view=getattr(args, "view", None),
                   screenshot=getattr(args, "screenshot", None))


COMMANDS = {"info": cmd_info, "train": cmd_train, "evaluate": cmd_evaluate, "importance": cmd_importance,
            "coverage": cmd_coverage, "gui": cmd_gui}
ROBUSTNESS_COMMANDS = ("attack", "fol", "select", "fuzz", "retrain", "converge", "experiment")


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)  # recorded in model cards as the command
    if args.command in ROBUSTNESS_COMMANDS:
        from workbench.cli_robustness import COMMANDS as ROBUSTNESS

        command = ROBUSTNESS[args.command]
    else:
        command = COMMANDS[args.command or "gui"]
    from workbench.core.errors import Cancelled, WorkbenchError

    try:
        if args.command in ("train", "evaluate", "importance", "coverage", *ROBUSTNESS_COMMANDS):
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

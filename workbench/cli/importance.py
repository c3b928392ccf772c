"""`workbench importance`: LRP relevance of a layer's neurons, the top-m, a conservation check,
an ablation check and a neuron's gallery.
"""

from __future__ import annotations

from pathlib import Path

from workbench.cli.arguments import integer, output_folder
from workbench.cli.common import (
    add_common,
    add_distribution,
    add_rule_options,
    emit,
    importance_rule,
    record_model,
    run_job,
)


def add_parsers(sub) -> None:
    imp = sub.add_parser("importance", help="LRP neuron importance of a layer: relevance per neuron, top-m, "
                                            "conservation, an ablation check and a neuron gallery")
    imp.add_argument("--model", required=True, metavar="MODEL", help="bundled model name or a path")
    imp.add_argument("--data", required=True, metavar="NAME", help="dataset name or path")
    imp.add_argument("--layer", metavar="LAYER", help="layer whose neurons to rank, e.g. fc2 (default: the last "
                                                      "Conv/Linear before the output layer, as for coverage)")
    add_rule_options(imp)
    imp.add_argument("--point", default="post", choices=["post", "pre"], help="activation point of a neuron's value")
    imp.add_argument("--m", type=int, default=6, help="how many top neurons (default 6)")
    imp.add_argument("--per-class", action="store_true", help="also rank neurons per class")
    imp.add_argument("--split", default="train", help="split relevance is summed over (default train)")
    imp.add_argument("--max-inputs", type=integer(1, 10**9), metavar="N",
                     help="use a seeded sample of N images of the split")
    imp.add_argument("--batch-size", type=integer(1, 65536), default=500)
    imp.add_argument("--ablation", default="zero", choices=["zero", "mean", "off"],
                     help="ablate the top-m and random neurons by zeroing or mean-replacing them, or skip (off)")
    imp.add_argument("--ablation-split", default="test", help="split accuracy is measured on (default test)")
    imp.add_argument("--draws", type=integer(1, 10_000), default=5,
                     help="random draws of m neurons to compare with (default 5)")
    imp.add_argument("--gallery", type=integer(0, 10**8), metavar="NEURON",
                     help="write the gallery of this neuron (needs --out)")
    imp.add_argument("--out", metavar="DIR", type=output_folder, help="folder for the gallery PNGs")
    imp.add_argument("--k", type=integer(1, 10_000), default=9, help="inputs per gallery list (default 9)")
    imp.add_argument("--arch", help="architecture of a plain state_dict file")
    imp.add_argument("--download", action="store_true", help="let torchvision:<Name> datasets download")
    imp.add_argument("--trust-file", action="store_true",
                     help="allow loading a full pickle (runs code from the file: only for files you trust)")
    add_common(imp)
    add_distribution(imp)
    imp.set_defaults(handler=cmd_importance)


def _check_importance_request(args, model, dataset, composite) -> int:
    """Refuse what would fail only after minutes of work: the layer, m, the gallery neuron. Returns the
    layer's neuron count."""
    from workbench.core.errors import WorkbenchError
    from workbench.core.importance.ablation import layer_neuron_count
    from workbench.core.importance.lrp import LRP
    from workbench.core.models.activations import NeuronDefinition
    from workbench.core.models.layers import default_layer, layer_catalogue

    if (args.gallery is None) != (args.out is None):
        raise WorkbenchError("--gallery NEURON and --out DIR go together.",
                             "Give both to write a neuron gallery, or neither.")
    for option, value in (("--m", args.m), ("--k", args.k), ("--draws", args.draws), ("--batch-size", args.batch_size)):
        if value < 1:
            raise WorkbenchError(f"{option} must be at least 1; got {value}.", f"Pass {option} 1 or more.")
    explainer = LRP(model.module, composite)  # names a layer LRP cannot handle, with the model's layers
    layers = [name for name in explainer.layer_names if name != "input"]
    if args.layer is None:  # the same default as `workbench coverage` and the views
        args.layer = default_layer(layer_catalogue(model.module, dataset.image_shape))
        if args.layer is None:
            raise WorkbenchError("The model has no Conv/Linear layer before its output layer.",
                                 f"Name the layer with --layer: {', '.join(layers)}.")
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

    from workbench.core.data.registry import load_dataset
    from workbench.core.importance.ablation import ablation_check
    from workbench.core.importance.conservation import conservation_check
    from workbench.core.importance.gallery import neuron_gallery, save_gallery_png
    from workbench.core.importance.neuron_importance import compute_importance
    from workbench.core.models.activations import NeuronDefinition
    from workbench.core.models.model_io import load_model
    from workbench.core.models.training import check_compatible
    from workbench.core.project.folder import Project
    from workbench.core.project.staging import run_staged

    started = time.monotonic()
    model = load_model(args.model, arch=args.arch, trust=args.trust_file)
    dataset = load_dataset(args.data, download=args.download)
    check_compatible(model, dataset)
    composite = importance_rule(args)
    _check_importance_request(args, model, dataset, composite)
    project = Project.open_or_create(args.project, dataset.recipe.get("name", args.data)) if args.project else None
    if project:
        project.ensure_writable()
    definition = NeuronDefinition(args.layer, args.point)

    def job(ctx, project=None):
        importance = compute_importance(ctx, model, dataset, definition, rule=composite, per_class=args.per_class,
                                        batch_size=args.batch_size, project=project, split=args.split,
                                        max_inputs=args.max_inputs, seed=args.seed)
        top = importance.top(args.m)
        conservation = conservation_check(ctx, model, dataset, definition, composite, split=args.split,
                                          max_inputs=min(2000, args.max_inputs or 2000),
                                          batch_size=args.batch_size, seed=args.seed)
        ablation = None if args.ablation == "off" else ablation_check(
            ctx, model, dataset, args.layer, top, mode=args.ablation, draws=args.draws, seed=args.seed,
            split=args.ablation_split, batch_size=max(args.batch_size, 1000), definition=definition, project=project)
        kept = importance.top_inputs  # the same inputs, rule and neurons: the gallery needs no pass of its own
        gallery = None if args.gallery is None else neuron_gallery(
            ctx, model, dataset, definition, args.gallery, k=args.k, split=args.split, rule=composite,
            batch_size=args.batch_size, max_inputs=args.max_inputs, seed=args.seed,
            kept=kept.neuron(args.gallery) if kept is not None and 0 <= args.gallery < kept.neurons else None)
        return importance, top, conservation, ablation, gallery

    (importance, top, conservation, ablation, gallery), device = run_job(
        args, lambda ctx: run_staged(ctx, job, project))
    if project:
        record_model(project, args)
    files = save_gallery_png(gallery, dataset, args.out) if gallery else []
    seconds = time.monotonic() - started
    payload = _importance_payload(args, model, dataset, importance, top, conservation, ablation, gallery, files,
                                  device, seconds)
    emit(args, payload, _importance_text(payload, importance))
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
    from workbench.core.importance.ablation import CLEAR_DRAWS

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
        worse, draws = a["draws_at_least_as_bad"], a["draws"]
        if a["clearly_important"]:
            lines.append(f"  → the important neurons clearly hurt more than random ones (chance {a['chance']:.2f})")
        elif worse == 0:
            lines.append(f"  → the important neurons hurt more than all {draws} random sets, but {draws} draws cannot "
                         f"make that clear (chance 1 in {draws + 1}); run --draws {CLEAR_DRAWS} or more")
        else:
            lines.append(f"  → not clear that the important neurons matter more: {worse} of {draws} random sets hurt "
                         f"at least as much (chance {a['chance']:.2f})")
    g = r["gallery"]
    if g:
        lines.append(f"Gallery of neuron {g['neuron']}: {len(g['files'])} PNGs written to "
                     f"{Path(g['files'][0]).parent if g['files'] else '(none)'}")
    lines.append(f"Took {r['seconds']:.1f} s on {r['device']}.")
    return "\n".join(lines)

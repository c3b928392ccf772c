"""`workbench train` and `workbench evaluate`: train a zoo architecture; accuracy and confusion.
"""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

from workbench.cli.arguments import integer, output_file, real, text
from workbench.cli.common import add_common, add_subset_options, emit, make_context, record_model, run_job, with_subset


def add_parsers(sub) -> None:
    train = sub.add_parser("train", help="train a zoo architecture on a dataset")
    train.add_argument("--model", required=True, metavar="ARCH", type=text("architecture"),
                       help="architecture name, e.g. lenet5")
    train.add_argument("--data", required=True, metavar="NAME", help="dataset name or path")
    train.add_argument("--epochs", type=integer(1, 10_000), default=8)
    train.add_argument("--batch-size", type=integer(1, 65536), default=128)
    train.add_argument("--lr", type=real(0, 10, low_open=True), default=1e-3)
    train.add_argument("--out", metavar="PATH", type=output_file,
                       help="checkpoint to write (default: <arch>-<data>.pt, "
                                                     "inside --project/models when given)")
    train.add_argument("--name", help="model name recorded in the card (default: the file name)")
    train.add_argument("--download", action="store_true", help="let torchvision:<Name> datasets download")
    add_common(train)

    ev = sub.add_parser("evaluate", help="accuracy, per-class accuracy and confusion matrix")
    ev.add_argument("--model", required=True, metavar="MODEL", type=text("model"), help="bundled model name or a path")
    ev.add_argument("--data", required=True, metavar="NAME", help="dataset name or path")
    ev.add_argument("--split", default="test")
    add_subset_options(ev)
    ev.add_argument("--arch", help="architecture of a plain state_dict file")
    ev.add_argument("--download", action="store_true", help="let torchvision:<Name> datasets download")
    ev.add_argument("--trust-file", action="store_true",
                    help="allow loading a full pickle (runs code from the file: only for files you trust)")
    add_common(ev, seed=False)
    train.set_defaults(handler=cmd_train)
    ev.set_defaults(handler=cmd_evaluate)


def cmd_train(args) -> int:
    from workbench.core.data.registry import load_dataset
    from workbench.core.models.training import train_and_save
    from workbench.core.project.folder import Project

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

    ctx, bar = make_context(args, show_epoch)
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
            f"({card['seconds_per_epoch']:.1f} s per epoch).\n{classes_line(dataset)}\n{accuracy}Saved to {out}")
    emit(args, {**card, "path": str(out)}, text)
    return 0


def cmd_evaluate(args) -> int:
    from workbench.core.data.registry import load_dataset
    from workbench.core.models.evaluation import save_evaluation
    from workbench.core.models.model_io import load_model
    from workbench.core.models.training import evaluate
    from workbench.core.project.folder import Project

    model = load_model(args.model, arch=args.arch, trust=args.trust_file)
    dataset = load_dataset(args.data, download=args.download)
    # opened before the work, so a damaged project.json stops us before minutes of evaluation
    project = Project.open_or_create(args.project, dataset.recipe.get("name", args.data)) if args.project else None
    if project:
        project.ensure_writable()
    split = args.split
    if with_subset(args, split) != split:  # a subset of the split, by --first, --indices or --class
        from workbench.core.labeling.labelled_sets import resolve

        split = resolve(project, with_subset(args, split), dataset, model=model, download=args.download)
    result, device = run_job(args, lambda ctx: evaluate(ctx, model, dataset, split))
    if project and isinstance(split, str):  # a whole split's evaluation is stored (a subset's is not)
        record_model(project, args)
        save_evaluation(project, model, dataset, args.split, result, device)
    confusion = result["confusion"]
    where = split if isinstance(split, str) else split.name
    lines = [f"{model.name} on {dataset.name} ({where}, {result['n']} images): "
             f"accuracy {result['accuracy'] * 100:.2f} %", classes_line(dataset), "Per class:"]
    lines += [f"  {name:<14} {'—' if a is None else f'{a * 100:.1f} %'}"
              for name, a in result["per_class_accuracy"].items()]
    lines.append("Confusion matrix (rows: true class, columns: predicted):")
    lines += ["  " + " ".join(f"{v:5d}" for v in row) for row in confusion]
    warning = result.get("class_order_warning")
    if warning:
        said = f"warning: {warning['message']}\n  {warning['hint']}"
        if args.json:  # the payload carries it; a person watching the terminal reads it here
            print(said, file=sys.stderr)
        lines.insert(1, said)
    payload = {k: v for k, v in result.items() if k != "predictions"}
    payload.update(class_names=list(dataset.class_names), class_source=dataset.class_source)
    payload["model_info"] = model.info.to_dict()
    emit(args, payload, "\n".join(lines))
    return 0


def classes_line(dataset) -> str:
    """Which index means which class, and where that numbering comes from when the data chose it."""
    from workbench.core.data.class_names import class_index_text

    source = f", numbered by {dataset.class_source}" if dataset.class_source else ""
    return f"Classes{source}: {class_index_text(dataset.class_names, limit=100)}"

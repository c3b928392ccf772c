"""`workbench train-generator`, `add-generator` and `generators`: train a generative model as a test-input
search space (a VAE, a class-conditional GAN, a class-conditional diffusion model or a plugin's kind), make
one from a pretrained Stable Diffusion pipeline, and read generator folders' cards.
"""

from __future__ import annotations

import sys
from pathlib import Path

from workbench.cli.arguments import integer, real, text
from workbench.cli.common import (EXIT_CANCELLED, add_common, add_distribution, add_loading, add_model_data,
                                  check_creatable, command_line, emit, error, load_model_and_data,
                                  make_context, record_model, run_job)

NO_CLASSIFIER = "none"


def add_parsers(sub) -> None:
    train = sub.add_parser("train-generator", help="train a generator (vae, gan, diffusion or a plugin's) on a dataset")
    train.add_argument("--generator", required=True, metavar="KIND", type=text("generator kind"),
                       help="vae, gan, diffusion, or a kind a plugin adds (`workbench generators` lists them)")
    train.add_argument("--data", required=True, metavar="NAME", type=text("dataset"), help="dataset name or path")
    train.add_argument("--epochs", type=integer(1, 100_000), help="epochs in all (default: the kind's; when "
                                                                   "resuming, the run's)")
    train.add_argument("--batch-size", type=integer(1, 65536), help="default: the kind's (vae 128, gan and diffusion 64)")
    train.add_argument("--lr", type=real(0, 10, low_open=True), help="learning rate (default: the kind's)")
    train.add_argument("--preset", default="default", type=text("preset"),
                       help="the kind's sizes: default, or small (faster, for trials)")
    train.add_argument("--out", metavar="DIR", type=text("output folder"),
                       help="generator folder to write (default: <kind>-<data>, inside --project/generators when given)")
    train.add_argument("--resume", action="store_true",
                       help="continue the run whose checkpoint is in --out (to --epochs in all)")
    train.add_argument("--classifier", metavar="MODEL", type=text("classifier"),
                       help="reference classifier for the card's seed acceptance (default: the bundled model for "
                            f"the dataset, if there is one; '{NO_CLASSIFIER}' to skip)")
    train.add_argument("--acceptance-samples", type=integer(1, 100_000), default=500,
                       help="samples the seed acceptance is measured on (default 500)")
    add_loading(train)
    add_common(train)
    train.set_defaults(handler=cmd_train_generator)

    gen = sub.add_parser("generate", help="search generators' latent spaces for inputs the model misclassifies "
                                          "(the latent genetic test generator), per generator a summary")
    gen.add_argument("--generator", required=True, metavar="LIST", type=text("generators"),
                     help="comma-separated generator folders, bundled names (e.g. vae-fashion-mnist,"
                          "gan-fashion-mnist) or kinds (vae, gan, diffusion: the data's bundled one of that kind)")
    add_model_data(gen)
    gen.add_argument("--seeds", type=integer(1, 100_000), default=100, help="seeds per generator (default 100)")
    gen.add_argument("--extent", choices=("high", "low"), default="high",
                     help="mutation extent: the latent range / 1000 (high, default) or / 10 000 (low)")
    gen.add_argument("--budget", type=integer(1, 100_000), default=250, help="generations per seed (default 250)")
    gen.add_argument("--objective", choices=("misbehaviour", "idc", "both"), default="misbehaviour",
                     help="what a seed's search looks for: a misclassification (the benchmark's, default), an IDC "
                          "combination the test split leaves uncovered (idc), or both at once")
    gen.add_argument("--layer", metavar="LAYER", type=text("layer"),
                     help="the layer of the IDC objective (default: the model's coverage layer)")
    gen.add_argument("--m", type=integer(1, 64), default=6, help="IDC's m for the IDC objective (default 6)")
    gen.add_argument("--name", metavar="NAME", type=text("test set name"),
                     help="the generated set's name in --project (default: generated-<model>-<extent>)")
    gen.add_argument("--validators", metavar="DIR", type=text("validator folder"),
                     help="validator set for the validity proxies (default: the bundled set for the dataset)")
    gen.add_argument("--no-proxies", action="store_true", help="do not judge the results with the validity proxies")
    gen.add_argument("--export", metavar="DIR", type=text("export folder"),
                     help="also write the per-seed CSV (the benchmark's columns) and the inputs as PNG files here")
    add_loading(gen)
    add_common(gen)
    add_distribution(gen)
    gen.set_defaults(handler=cmd_generate)

    export = sub.add_parser("export-generator", help="copy a generator folder without its training state (for "
                                                     "sharing or bundling), optionally with float16 weights")
    export.add_argument("source", metavar="DIR", type=text("generator folder"), help="a generator folder")
    export.add_argument("dest", metavar="DEST", type=text("destination folder"), help="the folder to write")
    export.add_argument("--half", action="store_true",
                        help="store the weights as float16 (half the size); the card is measured again on them "
                             "and says how far the decoded pixels moved")
    export.add_argument("--measure", action="store_true",
                        help="measure the card again on the stored weights (latent range, seed acceptance with its "
                             "real-image ceiling, samples); --half does")
    export.add_argument("--classifier", metavar="MODEL", type=text("classifier"),
                        help="reference classifier for the seed acceptance measured again (default: the bundled "
                             f"model for the generator's dataset; '{NO_CLASSIFIER}' to skip)")
    add_loading(export)
    add_common(export)
    export.set_defaults(handler=cmd_export_generator)

    add = sub.add_parser("add-generator", help="make a generator folder from a pretrained pipeline on this disk "
                                               "(a diffusers Stable Diffusion folder, optionally with a LoRA)")
    add.add_argument("format", choices=("diffusers",), help="the pipeline's format: diffusers")
    add.add_argument("source", metavar="DIR", type=text("pipeline folder"),
                     help="the pipeline folder (with model_index.json), or its Hugging Face cache entry")
    add.add_argument("--data", required=True, metavar="NAME", type=text("dataset"),
                     help="the dataset whose classes are searched: class names fill the prompt, images are resized "
                          "and converted to its image shape")
    add.add_argument("--out", metavar="DIR", type=text("output folder"),
                     help="generator folder to write (default: stable-diffusion-<data>, inside --project/generators "
                          "when given)")
    add.add_argument("--lora", metavar="FILE", type=text("LoRA file"), help="LoRA weights (.safetensors) to fuse in")
    add.add_argument("--lora-scale", type=real(0, 100), default=1.0, help="the LoRA's weight (default 1)")
    add.add_argument("--prompt", default="a photo of {class}", type=text("prompt"),
                     help="the prompt of each class, {class} standing for its name (default: 'a photo of {class}')")
    add.add_argument("--negative-prompt", default="", help="the unconditional prompt of guidance (default: empty)")
    add.add_argument("--steps", type=integer(1, 1000), default=25, help="DDIM steps (default 25)")
    add.add_argument("--guidance", type=real(0, 100), default=3.5, help="guidance of the seeds (default 3.5)")
    add.add_argument("--search-guidance", type=real(0, 100), default=1.4,
                     help="guidance inside the search (default 1.4)")
    add.add_argument("--resolution", type=integer(8, 4096),
                     help="the side the pipeline generates at (default: its own, 512 for Stable Diffusion v1.5)")
    add.add_argument("--classifier", metavar="MODEL", type=text("classifier"),
                     help="reference classifier for the card's seed acceptance (default: the bundled model for "
                          f"the dataset, if there is one; '{NO_CLASSIFIER}' to skip)")
    add.add_argument("--acceptance-samples", type=integer(0, 100_000), default=0,
                     help="samples the seed acceptance is measured on (default 0: not measured; on a CPU a full-size "
                          "pipeline takes many seconds per image)")
    add.add_argument("--samples-per-class", type=integer(0, 64), default=0,
                     help="sample images per class stored with the card (default 0)")
    add_loading(add)
    add_common(add)
    add.set_defaults(handler=cmd_add_generator)

    card = sub.add_parser("generators", help="generator kinds and bundled generators; or a generator folder's card")
    card.add_argument("folder", nargs="?", metavar="DIR", help="a generator folder (or a bundled generator's name)")
    card.add_argument("--json", action="store_true", help="print machine-readable results")
    card.set_defaults(handler=cmd_generators)


def cmd_train_generator(args) -> int:
    from workbench.core.data.registry import load_dataset
    from workbench.core.errors import Cancelled
    from workbench.core.generation.registry import get_generator_kind
    from workbench.core.generation.training import train_generator
    from workbench.core.models.model_io import bundled_classifier, load_model
    from workbench.core.models.training import check_compatible

    kind = get_generator_kind(args.generator)  # plugins are loaded by now, so their kinds count
    if args.preset not in kind.presets:
        raise error(f"The {kind.title} generator has no preset {args.preset!r}.", f"Its presets: {', '.join(kind.presets)}.")
    dataset = load_dataset(args.data, download=args.download)
    key = dataset.spec
    classifier = None
    name = args.classifier if args.classifier is not None else bundled_classifier(key)
    if name and name.lower() != NO_CLASSIFIER:
        classifier = load_model(name, arch=args.arch, trust=args.trust_file)
        check_compatible(classifier, dataset)
    base = Path(args.project) / "generators" if args.project else Path.cwd()
    out = Path(args.out).expanduser() if args.out else base / f"{kind.name}-{dataset.name}"
    if not args.resume:
        check_creatable(out)

    def show_epoch(report) -> None:
        if not args.json:
            bar.close()
            losses = ", ".join(f"{k} {v:.4g}" for k, v in report.losses.items())
            print(f"epoch {report.epoch}/{report.epochs}: {losses} ({report.seconds:.1f} s so far)", file=sys.stderr)

    ctx, bar = make_context(args, show_epoch)
    try:
        result = train_generator(ctx, kind.name, dataset, out, epochs=args.epochs, batch_size=args.batch_size,
                                 lr=args.lr, preset=args.preset, seed=args.seed, resume=args.resume,
                                 classifier=classifier, acceptance_samples=args.acceptance_samples,
                                 command=command_line(args))
    except Cancelled:  # the job's note has said what is kept
        bar.close()
        print("cancelled.", file=sys.stderr)
        return EXIT_CANCELLED
    except KeyboardInterrupt:
        bar.close()
        print("cancelled; " + (f"the checkpoint of the last finished epoch is kept in {out} (continue it with "
                               "--resume)." if (out / "generator.json").is_file() else "nothing was written."),
              file=sys.stderr)
        return EXIT_CANCELLED
    finally:
        bar.close()
    card = result.card
    emit(args, {**card.to_dict(), "path": str(out), "warnings": card.warnings()}, card_text(card, out, trained=True))
    return 0


def card_text(card, folder, trained: bool = False) -> str:
    if not card.epochs_planned:  # a pretrained pipeline, not trained here
        lines = [f"{card.title or card.kind}: {card.parameters / 1e6:.2f} M parameters, for {card.dataset}."]
    elif trained:
        lines = [f"Trained {card.kind} on {card.dataset} for {card.epochs} epochs "
                 f"({card.seconds_per_epoch:.1f} s per epoch on {card.device or 'an unknown device'})."]
    else:
        lines = [f"{card.title or card.kind}: {card.epochs} of {card.epochs_planned} epochs on {card.dataset}, "
                 f"{card.parameters / 1e6:.2f} M parameters."]
    lines += [f"{label}: {text}" for label, text in card.summary()]
    lines += [f"warning: {w}" for w in card.warnings()]
    lines.append(f"{'Saved to' if trained else 'Folder:'} {folder}")
    return "\n".join(lines)


def cmd_generate(args) -> int:
    from workbench.cli.common import ProjectTarget
    from workbench.core.files import check_new_folder
    from workbench.core.generation.generated import default_name, export_generated, run_generation
    from workbench.core.generation.registry import generator_kinds
    from workbench.core.generation.storage import load_generator
    from workbench.core.generation.validators import choose_validators
    from workbench.core.project.staging import run_staged
    from workbench.core.testsets import from_artifact

    model, dataset = load_model_and_data(args)
    key = dataset.spec
    names = [n.strip() for n in args.generator.split(",") if n.strip()]
    if not names:
        raise error("No generator was named.", "Name bundled generators or folders, separated by commas.")
    generators = [(name, load_generator(name, num_classes=dataset.num_classes, dataset=key)) for name in names]
    kinds = {kind.name for kind in generator_kinds()}
    generators = [(generator.folder.name if name in kinds else name, generator) for name, generator in generators]
    for name, generator in generators:  # e.g. a hand-written card whose weights could not be checked
        for warning in generator.load_warnings:
            print(f"warning: {name}: {warning}", file=sys.stderr)
    validators, note = choose_validators(dataset, args.validators or "", not args.no_proxies)
    if note:
        print(f"note: {note}", file=sys.stderr)
    target = ProjectTarget(args.project)
    if args.export:
        check_creatable(Path(args.export).expanduser())
        check_new_folder(Path(args.export).expanduser(), "--export")
    name = args.name or default_name(model.name, args.extent, args.objective)
    project = target.open(key) if target else None
    result, _ = run_job(args, lambda ctx: run_staged(
        ctx, run_generation, project, generators, model, dataset, args.seeds, args.extent, args.budget, args.seed,
        validators, name, command=command_line(args), objective=args.objective, layer=args.layer, m=args.m))
    rows = result.summary()
    lines = [f"Latent search against {model.name} on {dataset.name}: {args.seeds} seeds per generator, {args.extent} "
             f"extent, budget {args.budget} generations, objective {args.objective}"
             + (" (stopped: partial)" if result.partial else "")]
    found = "misbehaviours" if args.objective == "misbehaviour" else "successes"
    proxies = validators is not None
    idc = args.objective != "misbehaviour"
    lines.append(f"{'generator':<26} {'seeds kept':>11} {found:>14} {'mean generations':>17}"
                 + (f" {'new IDC combinations':>21}" if idc else "")
                 + (f" {'proxy-valid (both)':>19} {'+ oracle kept label':>20}" if proxies else ""))
    for row in rows:
        mean = "—" if row["mean_generations"] is None else f"{row['mean_generations']:.1f}"
        kept = f"{row.get('kept', row['searched']):>5} / {row.get('seeds', '?'):<5}"
        line = f"{row['generator']:<26} {kept} {row['found']:>8} of {row['searched']:<4} {mean:>12}"
        if idc:
            line += f" {row.get('new_combinations', 0):>21}"
        if proxies:
            line += f" {row['proxy_both_valid']:>19} {row['proxy_valid_preserved']:>20}"
        lines.append(line)
    if proxies:
        lines.append("proxy-valid: accepted by both automated validity proxies (SelfOracle and DAIV); a proxy, "
                     "not a verdict of validity.")
    for run in result.runs:
        if not run.seeds.kept.any():
            lines.append(f"warning: {model.name} labels none of the {run.generator} seeds as intended; nothing was "
                         "searched from them.")
    exported = None
    if result.saved:
        record_model(project, args)
        lines.append(f"Stored as test set {name!r} in {project.folder}.")
    if args.export and result.arrays:
        testset = from_artifact(project, name, list(dataset.class_names)) if result.saved else result.testset()
        exported = export_generated(testset, Path(args.export).expanduser())
        lines.append(f"Exported {exported['images']} inputs and {exported['csv']}.")
    emit(args, {"runs": [{**run.summary(), "params": run.params,
                          "seeds_detail": [{"seed": r.seed, "label": r.label, "predicted": r.predicted,
                                            "found": r.found, "finished": r.finished, "generations": r.generations,
                                            "best_margin": r.best_margin, "distance": r.distance}
                                           for r in run.results]} for run in result.runs],
                "summary": rows, "partial": result.partial, "testset": name if result.saved else None,
                "export": exported}, "\n".join(lines))
    return 0


def cmd_export_generator(args) -> int:
    from workbench.core.data.registry import load_dataset
    from workbench.core.generation.storage import export_generator, load_generator
    from workbench.core.models.model_io import bundled_classifier, load_model

    card = load_generator(args.source).card
    dataset = classifier = None
    if args.half or args.measure:
        dataset = load_dataset(card.dataset, download=args.download)
        name = args.classifier if args.classifier is not None else bundled_classifier(card.dataset)
        if name and name.lower() != NO_CLASSIFIER:
            classifier = load_model(name, arch=args.arch, trust=args.trust_file)
    check_creatable(Path(args.dest).expanduser())
    folder, _ = run_job(args, lambda ctx: export_generator(ctx, args.source, Path(args.dest).expanduser(),
                                                           half=args.half, measure=args.measure, dataset=dataset,
                                                           classifier=classifier))
    copied = load_generator(folder).card
    emit(args, {**copied.to_dict(), "path": str(folder)}, card_text(copied, folder))
    return 0


def cmd_add_generator(args) -> int:
    from workbench.core.data.registry import load_dataset
    from workbench.core.generation.pipeline_import import add_diffusers_generator
    from workbench.core.models.model_io import bundled_classifier, load_model
    from workbench.core.models.training import check_compatible

    dataset = load_dataset(args.data, download=args.download)
    key = dataset.spec
    classifier = None
    name = args.classifier if args.classifier is not None else bundled_classifier(key)
    if args.acceptance_samples and name and name.lower() != NO_CLASSIFIER:
        classifier = load_model(name, arch=args.arch, trust=args.trust_file)
        check_compatible(classifier, dataset)
    base = Path(args.project) / "generators" if args.project else Path.cwd()
    out = Path(args.out).expanduser() if args.out else base / f"stable-diffusion-{dataset.name}"
    check_creatable(out)
    generator, _ = run_job(args, lambda ctx: add_diffusers_generator(
        ctx, args.source, out, dataset, prompt=args.prompt, negative_prompt=args.negative_prompt, lora=args.lora,
        lora_scale=args.lora_scale, steps=args.steps, guidance=args.guidance, search_guidance=args.search_guidance,
        resolution=args.resolution, classifier=classifier, acceptance_samples=args.acceptance_samples,
        grid_per_class=args.samples_per_class, seed=args.seed, command=command_line(args)))
    card = generator.card
    emit(args, {**card.to_dict(), "path": str(out), "latent_dim": generator.latent_dim, "warnings": card.warnings()},
         card_text(card, out) + f"\nLatent dimension {generator.latent_dim}")
    return 0


def cmd_generators(args) -> int:
    from workbench.core.generation.registry import generator_kinds
    from workbench.core.generation.storage import bundled_generators, load_generator, read_descriptor, resolve_generator

    if args.folder:
        folder = resolve_generator(args.folder)
        data = read_descriptor(folder)
        generator = load_generator(folder)  # checks the files and the weights' hash
        card = generator.card
        # what loading found (weights no recorded hash checked) is said beside the card's own warnings
        payload = {**card.to_dict(), "path": str(folder), "latent_dim": generator.latent_dim,
                   "config": data["config"], "warnings": card.warnings() + generator.load_warnings}
        emit(args, payload, card_text(card, folder) + f"\nLatent dimension {generator.latent_dim}"
             + "".join(f"\nwarning: {w}" for w in generator.load_warnings))
        return 0
    kinds = [{"name": k.name, "title": k.title, "presets": list(k.presets), "conditional": k.conditional,
              "can_encode": k.can_encode, "plugin": k.plugin, "trainable": k.trainable,
              "training_defaults": k.training_defaults} for k in generator_kinds()]
    bundled = bundled_generators()
    lines = ["Generator kinds:"]
    lines += [f"  {k['name']:<16} {k['title']}{' (plugin)' if k['plugin'] else ''}; " + (
        f"presets {', '.join(k['presets'])}" if k["trainable"] else "made by workbench add-generator diffusers")
              for k in kinds]
    lines.append("Bundled generators:" if bundled else "Bundled generators: none")
    lines += [f"  {b['name']:<24} {b['kind']} on {b['dataset']}, {b['epochs']} epochs" for b in bundled]
    emit(args, {"kinds": kinds, "bundled": bundled}, "\n".join(lines))
    return 0

"""`workbench info`: datasets found, bundled models, device, library versions and plugins.
"""

from __future__ import annotations

from workbench.cli.common import emit


def add_parsers(sub) -> None:
    info = sub.add_parser("info", help="datasets found, bundled models, device, versions, plugins; with --data, "
                                       "one dataset: its splits, image shape and which index is which class")
    info.add_argument("--data", metavar="NAME", help="describe this dataset (a name or a path) instead")
    info.add_argument("--download", action="store_true", help="let torchvision:<Name> datasets download")
    info.add_argument("--json", action="store_true")
    info.set_defaults(handler=cmd_info)


def cmd_dataset_info(args) -> int:
    from workbench.cli.training import classes_line
    from workbench.core.data.registry import load_dataset

    dataset = load_dataset(args.data, download=args.download)
    card = dataset.card_dict()
    lines = [f"{dataset.name}: {card['title']}", f"Source: {card['source']}",
             "Splits: " + ", ".join(f"{k} {v:,} images" for k, v in card["splits"].items()),
             "Image shape: " + "×".join(map(str, card["image_shape"])) + " (C×H×W)", classes_line(dataset)]
    emit(args, card, "\n".join(lines))
    return 0


def cmd_info(args) -> int:
    if args.data:
        return cmd_dataset_info(args)
    import platform

    import torch

    from workbench.core.data.registry import dataset_status
    from workbench.core.execution.jobs import device_description, resolve_device
    from workbench.core.models.model_io import bundled_models
    from workbench.core.plugins import load_plugins, plugin_folders, user_plugin_dir
    from workbench.core.project.store import library_versions

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
    emit(args, result, "\n".join(lines))
    return 0

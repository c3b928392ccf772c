"""`workbench coverage`: each criterion's coverage of a test set, IDC with its combinations.
"""

from __future__ import annotations

import json
from pathlib import Path

from workbench.cli.arguments import integer, output_folder
from workbench.cli.common import (
    add_common,
    add_distribution,
    add_rule_options,
    add_subset_options,
    emit,
    importance_rule,
    notify,
    record_model,
    run_job,
    with_subset,
)


def add_parsers(sub) -> None:
    cov = sub.add_parser("coverage", help="coverage of a test set: IDC (cluster counts, |INCC|, covered combinations) "
                                          "and the classic criteria NC, KMNC, NBC, SNAC, TKNC, TKNP, LSA, DSA, MDSA")
    cov.add_argument("--model", required=True, metavar="MODEL", help="bundled model name or a path")
    cov.add_argument("--data", required=True, metavar="NAME",
                     help="dataset the criteria are fitted on (its train split)")
    cov.add_argument("--layer", metavar="LAYER", help="layer of IDC and surprise adequacy (default: the last "
                                                      "Conv/Linear before the output layer)")
    cov.add_argument("--criteria", default="idc", metavar="LIST",
                     help="comma-separated criteria, e.g. idc,nc,kmnc,nbc,snac,tknc,tknp,lsa,dsa,mdsa, or all "
                          "(default idc)")
    cov.add_argument("--m", type=int, default=6, help="important neurons of IDC (default 6)")
    cov.add_argument("--testset", metavar="NAME", help="test set: a split of --data (test, train), a project test set "
                                                      "(e.g. fashion-mnist:test), or a dataset name or path whose images "
                                                      "fit the model (default: the test split of --data)")
    cov.add_argument("--max-inputs", type=integer(1, 10**9), metavar="N",
                     help="measure a seeded sample of N test inputs")
    cov.add_argument("--per-class", action="store_true", help="one criterion per class (test inputs routed by "
                                                              "--route); reports each class and the mean")
    cov.add_argument("--route", default="label", choices=["label", "prediction"],
                     help="per-class routing of test inputs (default label)")
    cov.add_argument("--preset", default="deepimportance", choices=["deepimportance", "nlc", "dnn-tip"],
                     help="layers and semantics of the classic criteria (default deepimportance)")
    cov.add_argument("--layers", metavar="LIST", help="comma-separated layers of the classic criteria "
                                                      "(default: the preset's; required with --preset dnn-tip)")
    cov.add_argument("--point", choices=["post", "pre"],
                     help="activation point, after (post) or before (pre) the layer's nonlinearity, of --layer's "
                          "neurons (default post) and of the preset's or --layers' layers (default the preset's: "
                          "post, nlc pre)")
    cov.add_argument("--option", action="append", default=[], metavar="CRITERION.NAME=VALUE",
                     help="a criterion option, e.g. kmnc.k=100 or lsa.max_features=50 (repeatable)")
    cov.add_argument("--state", action="append", default=[], metavar="FILE",
                     help="a criterion state saved with --save-state: its fit is used instead of fitting; refused "
                          "when it was made for another model, layer, data or options (repeatable)")
    cov.add_argument("--save-state", metavar="DIR", type=output_folder,
                     help="write each fitted criterion's state to DIR/<criterion>.h5")
    cov.add_argument("--batch-size", type=integer(1, 65536), default=500)
    add_subset_options(cov)
    cov.add_argument("--split", default="train", help="split the criteria are fitted on (default train)")
    add_rule_options(cov)
    cov.add_argument("--arch", help="architecture of a plain state_dict file")
    cov.add_argument("--download", action="store_true", help="let torchvision:<Name> datasets download")
    cov.add_argument("--trust-file", action="store_true",
                     help="allow loading a full pickle (runs code from the file: only for files you trust)")
    add_common(cov)
    add_distribution(cov)
    cov.set_defaults(handler=cmd_coverage)


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
    from workbench.core.errors import WorkbenchError
    from workbench.core.importance.ablation import layer_neuron_count
    from workbench.core.models.activations import NeuronDefinition
    from workbench.core.models.layers import default_layer, layer_catalogue

    for option, value in (("--m", args.m), ("--batch-size", args.batch_size), ("--max-inputs", args.max_inputs)):
        if value is not None and value < 1:
            raise WorkbenchError(f"{option} must be at least 1; got {value}.", f"Pass {option} 1 or more.")
    catalogue = layer_catalogue(model.module, dataset.image_shape)
    names = [info.name for info in catalogue]
    layer = args.layer or default_layer(catalogue)
    if layer is None:
        raise WorkbenchError("The model has no Conv/Linear layer before its output layer.",
                             f"Name the layer with --layer: {', '.join(names)}.")
    layers = [n.strip() for n in args.layers.split(",") if n.strip()] if args.layers else None
    for name in [layer] + (layers or []):
        if name not in names:
            raise WorkbenchError(f"The model has no layer {name!r}.", f"Valid layers: {', '.join(names)}.")
    if args.preset == "dnn-tip" and not layers:
        raise WorkbenchError("The dnn-tip preset measures the layers you name.", "Add --layers, e.g. --layers fc1,fc2.")
    if "idc" in criteria:
        count = layer_neuron_count(catalogue, NeuronDefinition(layer, args.point or "post"))
        if args.m > count:
            raise WorkbenchError(f"m = {args.m} is larger than the {count} neurons of layer {layer!r}.",
                                 f"Choose --m between 1 and {count}, or a layer with more neurons.")
    return layer, layers


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

    from workbench.core.coverage import measure_coverage
    from workbench.core.data.registry import load_dataset
    from workbench.core.execution.jobs import JobContext
    from workbench.core.labeling.labelled_sets import resolve
    from workbench.core.models.activations import NeuronDefinition
    from workbench.core.models.model_io import load_model
    from workbench.core.models.training import check_compatible
    from workbench.core.project.folder import SETTINGS, Project
    from workbench.core.project.staging import run_staged
    from workbench.core.sampling import seeded_sample

    started = time.monotonic()
    criteria = _criteria_list(args.criteria)
    options = _criterion_options(args.option, criteria)
    model = load_model(args.model, arch=args.arch, trust=args.trust_file)
    dataset = load_dataset(args.data, download=args.download)
    check_compatible(model, dataset)
    dataset.split(args.split)
    layer, layers = _check_coverage_request(args, model, dataset, criteria)
    composite = importance_rule(args)
    states = _load_states(args.state, criteria)
    existing = Project.open(args.project) if args.project and (Path(args.project) / SETTINGS).exists() else None
    test = resolve(existing, with_subset(args, args.testset or "test"), dataset, model=model,
                   ctx=JobContext(args.device), download=args.download)
    notes = notify(test)
    indices = seeded_sample(len(test), args.max_inputs, args.seed)
    project = existing or (Project.create(args.project, dataset.recipe.get("name", args.data)) if args.project
                           else None)
    if project:
        project.ensure_writable()

    def job(ctx, project=None):
        return measure_coverage(ctx, model, dataset, NeuronDefinition(layer, args.point or "post"), criteria,
                                train_split=args.split, test_split=test, m=args.m, seed=args.seed, project=project,
                                per_class=args.per_class, route=args.route, preset=args.preset, layers=layers,
                                options=options, rule=composite, batch_size=args.batch_size, test_indices=indices,
                                states=states, preset_point=args.point)

    results, device = run_job(args, lambda ctx: run_staged(ctx, job, project))
    if project:
        record_model(project, args)
    files = _save_states(args.save_state, results, model, dataset) if args.save_state else []
    payload = _coverage_payload(args, model, dataset, test.name, layer, results, files, device,
                                time.monotonic() - started)
    payload["notes"] = notes
    emit(args, payload, _coverage_text(payload))
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
    per_layer = c.layer_coverage()
    out = {"name": result.name, "title": inner.title, **_value(result.value), "warnings": result.warnings,
           "point": result.provenance.get("activation_point"),
           "per_layer": None if per_layer is None else {name: _value(v) for name, v in per_layer.items()},
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
        "layer": layer, "point": args.point or "post", "m": args.m, "per_class": args.per_class,
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


def _layer_amount(v: dict) -> str:
    """'3 / 6' of a layer, with its percentage where it is defined."""
    return f"{v['covered']:,} / {v['total']:,}" + (f" ({v['percent']:.1f} %)" if v["value"] is not None else "")


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
    from workbench.core.coverage.measure import PRESET_POINTS

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
        if "neurons" in r and r["point"] and r["point"] != PRESET_POINTS.get(p["preset"]):
            where += f", {r['point']}-activation"
        lines.append(f"{key.upper():<{width}}{_amount(r)}" + (f"   ({where})" if where else ""))
        if r["per_layer"] and len(r["per_layer"]) > 1:
            lines.append("  per layer: " + ", ".join(f"{name} {_layer_amount(v)}"
                                                     for name, v in r["per_layer"].items()))
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

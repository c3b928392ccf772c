"""What every command shares: the common options, the terminal progress bar, running a job with it,
printing results as text or JSON, and the checks and project target the commands use.

Every check raises a `WorkbenchError` (via `error`) before any work starts, so bad input ends in a
clear message and exit 2 with nothing written.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shlex
import sys
from pathlib import Path

import numpy as np

from workbench.cli.arguments import integer, real, text
from workbench.core.execution.sharding import EXECUTORS, Distribution
from workbench.core.project.store import lenient_json

EXIT_ERROR = 2
EXIT_CANCELLED = 130


def add_common(p: argparse.ArgumentParser, seed: bool = True) -> None:
    p.add_argument("--device", default="auto", help="auto (CUDA when present), cpu, cuda or cuda:N")
    p.add_argument("--project", metavar="DIR", type=text("project folder"),
                   help="project folder where results are stored")
    p.add_argument("--json", action="store_true", help="print machine-readable results")
    if seed:
        p.add_argument("--seed", type=integer(0, 2**32 - 1), default=0, help="random seed (default 0)")


def add_distribution(p: argparse.ArgumentParser) -> None:
    """--executor, --address and --shards, for the commands whose jobs can run as shards (`core.execution.sharding`)."""
    p.add_argument("--executor", choices=EXECUTORS, default="local",
                   help="where the job runs: local (this process, the default) or ray (its shards on a Ray cluster; "
                        "pip install 'dl-testing-workbench[distributed]')")
    p.add_argument("--address", metavar="ADDR", type=text("Ray address"),
                   help="the Ray cluster: auto (the one this machine belongs to) or ray://HOST:PORT; "
                        "default: a local Ray instance with this machine's cores")
    p.add_argument("--shards", type=integer(1, 100_000), metavar="N",
                   help="how many shards to cut the job into (default: four per worker); with --executor local "
                        "they run one after another here")


def distribution(args):
    """The `Distribution` that --executor, --address and --shards ask for (None: as jobs always ran)."""
    from workbench.core.errors import WorkbenchError

    executor = getattr(args, "executor", "local")
    if getattr(args, "address", None) and executor != "ray":
        raise WorkbenchError("--address names a Ray cluster, but the job runs locally.", "Add --executor ray.")
    if executor == "local" and getattr(args, "shards", None) is None:
        return None
    return Distribution(executor, getattr(args, "address", None), getattr(args, "shards", None))


def add_rule_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--rule", default="lrp-0", help="lrp-0 (default), epsilon, z+ or alpha-beta")
    p.add_argument("--epsilon", type=real(0, 1e3, low_open=True), default=0.01,
                   help="ε of the epsilon rule (default 0.01)")
    p.add_argument("--alpha", type=real(1, 100), default=2.0, help="α of the alpha-beta rule (default 2; β = α − 1)")
    p.add_argument("--maxpool", default="winner", choices=["winner", "equal-split"], help="max-pool variant")
    p.add_argument("--attention", default="cp", choices=["cp", "attnlrp"],
                   help="attention in transformers: cp (weights held constant, the default) or attnlrp (through "
                        "the softmax, products split evenly)")


def importance_rule(args):
    """The LRP composite that --rule, --epsilon, --alpha, --maxpool and --attention describe."""
    from workbench.core.errors import WorkbenchError
    from workbench.core.importance.lrp import Composite, make_rule

    name = args.rule.lower()
    params = {"epsilon": {"epsilon": args.epsilon}, "lrp-epsilon": {"epsilon": args.epsilon},
              "alpha-beta": {"alpha": args.alpha, "beta": args.alpha - 1.0},
              "alphabeta": {"alpha": args.alpha, "beta": args.alpha - 1.0}}.get(name, {})
    if name not in ("epsilon", "lrp-epsilon") and args.epsilon != 0.01:
        raise WorkbenchError(f"--epsilon applies to the epsilon rule, not to {args.rule!r}.", "Add --rule epsilon.")
    return Composite(make_rule(name, **params), maxpool=args.maxpool, attention=args.attention)


def add_model_data(p, data_default: str | None = None, model_default: str | None = None) -> None:
    if model_default:
        p.add_argument("--model", default=model_default, metavar="MODEL", type=text("model"),
                       help=f"bundled model name or a path (default {model_default})")
    else:
        p.add_argument("--model", required=True, metavar="MODEL", type=text("model"),
                       help="bundled model name or a path")
    if data_default:
        p.add_argument("--data", default=data_default, metavar="NAME", type=text("dataset"),
                       help=f"dataset name or path (default {data_default})")
    else:
        p.add_argument("--data", required=True, metavar="NAME", type=text("dataset"), help="dataset name or path")


def add_loading(p) -> None:
    p.add_argument("--arch", help="architecture of a plain state_dict file")
    p.add_argument("--download", action="store_true", help="let torchvision:<Name> datasets download")
    p.add_argument("--trust-file", action="store_true",
                   help="allow loading a full pickle (runs code from the file: only for files you trust)")


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


def make_context(args, on_partial=None):
    from workbench.core.execution.jobs import JobContext

    progress = TerminalProgress(enabled=sys.stderr.isatty() or not getattr(args, "json", False))

    def notice(text: str) -> None:  # on stderr, so --json output stays clean
        progress.close()
        print(f"note: {text}", file=sys.stderr, flush=True)

    return JobContext(args.device, on_progress=progress, on_partial=on_partial, on_notice=notice,
                      distribution=distribution(args)), progress


def run_job(args, job, on_partial=None, holder: dict | None = None):
    """Run `job(ctx)` with the terminal progress bar; the last moment to cancel is before anything is written."""
    ctx, bar = make_context(args, on_partial)
    if holder is not None:
        holder["bar"] = bar
    try:
        result = job(ctx)
        ctx.check()
    finally:
        bar.close()
    return result, str(ctx.device)


def say(holder: dict, text: str, file=None) -> None:
    """Print a line while a job runs: the progress bar is cleared first (it comes back with the next step)."""
    if holder.get("bar") is not None:
        holder["bar"].close()
    print(text, file=file or sys.stdout, flush=True)


def emit(args, result: dict, text: str) -> None:
    if args.json:  # to the real stdout: while a --json command runs, sys.stdout is stderr (see `cli.main`)
        print(json.dumps(result, indent=2, default=lenient_json), file=getattr(args, "document_out", sys.stdout))
    else:
        print(text)


def notify(testset) -> list[str]:
    """Print a test set's notes (how it was chosen, e.g. the split that stood in for a missing test split) on
    stderr, so --json output stays clean; returns them for the JSON result."""
    notes = list(getattr(testset, "notes", []) or [])
    for note in notes:
        print(f"note: {note}", file=sys.stderr, flush=True)
    return notes


def error(message: str, hint: str = ""):
    from workbench.core.errors import WorkbenchError

    return WorkbenchError(message, hint)


def command_line(args) -> str:
    return "workbench " + " ".join(shlex.quote(a) for a in args.argv)


def load_model_and_data(args):
    """(model, dataset), checked to fit each other."""
    from workbench.core.data.registry import load_dataset
    from workbench.core.models.model_io import load_model
    from workbench.core.models.training import check_compatible

    model = load_model(args.model, arch=args.arch, trust=args.trust_file)
    dataset = load_dataset(args.data, download=args.download)
    check_compatible(model, dataset)
    return model, dataset


def record_model(project, args) -> None:
    """List the model a stored result was made with in the project, with its architecture where the
    command was told it (a plain state_dict file loads again only with it)."""
    project.add_model(args.model, arch=getattr(args, "arch", None))


def add_subset_options(p: argparse.ArgumentParser) -> None:
    """--first / --indices / --class: measure a subset of the chosen test set or split."""
    p.add_argument("--first", type=integer(1, 10**9), metavar="N", help="only the first N inputs")
    p.add_argument("--indices", metavar="FILE|LIST",
                   help="only these inputs: a list like 1,2,5-9, or a text or .npy file of indices")
    p.add_argument("--class", dest="class_", metavar="C", help="only the inputs of class C (a name or an index)")


def with_subset(args, name: str) -> str:
    """`name` with the subset rule the options ask for (`NAME[first=N]` …), for `testsets.resolve`."""
    chosen = [(flag, value) for flag, value in (("--first", args.first), ("--indices", args.indices),
                                                 ("--class", args.class_)) if value is not None]
    if not chosen:
        return name
    if len(chosen) > 1:
        raise error(f"{' and '.join(f for f, _ in chosen)} both choose a subset.", "Give one of them.")
    flag, value = chosen[0]
    if flag == "--first":
        return f"{name}[first={value}]"
    if flag == "--class":
        return f"{name}[class={shlex.quote(str(value))}]"
    return f"{name}[indices={_index_list(value)}]"


def _index_list(value: str) -> str:
    """--indices as the rule's list: given inline, or read from a text (.txt, .csv) or .npy file."""
    path = Path(value)
    if not path.is_file():
        return value.replace(" ", "")
    from workbench.core.files import regular_file

    regular_file(path, "index file")
    try:
        numbers = np.load(path, allow_pickle=False) if path.suffix == ".npy" else \
            np.array(path.read_text().replace(",", " ").split(), dtype=np.int64)
    except (ValueError, OSError) as exc:
        raise error(f"{path.name} is not a list of input indices: {exc}",
                    "Write one whole number per line (or save an integer array with numpy.save).") from exc
    numbers = np.asarray(numbers).reshape(-1)
    if numbers.size == 0 or numbers.dtype.kind not in "iu":
        raise error(f"{path.name} holds no whole-number indices.", "Write one whole number per line.")
    return ",".join(str(int(i)) for i in numbers)


def check_positive(option: str, value, allow_none: bool = True) -> None:
    if value is None and allow_none:
        return
    if value is None or not value > 0 or (isinstance(value, float) and not math.isfinite(value)):
        raise error(f"{option} must be positive; got {value}.", f"Pass {option} 1 or more.")


def stats(values) -> dict:
    """Summary of a score vector (finite values only): n, mean, sd, min, quantiles, max."""
    from workbench.core.robustness.scores import summary_statistics

    return summary_statistics(values)


def stats_line(label: str, s: dict) -> str:
    if not s["n"]:
        return f"{label}: no finite values"
    return (f"{label}: mean {s['mean']:.4g}, median {s['median']:.4g} (q05 {s['q05']:.4g}, q25 {s['q25']:.4g}, "
            f"q75 {s['q75']:.4g}, q95 {s['q95']:.4g}), min {s['min']:.4g}, max {s['max']:.4g}")


class ProjectTarget:
    """The --project folder: an existing project opened (and checked writable) now, a new one created only
    when results are stored, so a failed or cancelled run leaves no project behind."""

    def __init__(self, folder: str | None, required: bool = False, what: str = "", write: bool = True):
        from workbench.core.project.folder import SETTINGS, Project

        self.folder = Path(folder) if folder else None
        self.project = None
        if self.folder is None:
            if required:
                raise error(f"{what} needs a project.", "Pass --project DIR (the project holding the pool).")
            return
        if (self.folder / SETTINGS).exists() or required:
            self.project = Project.open(self.folder)
            if write:
                self.project.ensure_writable()
        elif write:
            check_creatable(self.folder)

    def __bool__(self) -> bool:
        return self.folder is not None

    def open(self, dataset_key: str):
        from workbench.core.project.folder import Project

        if self.project is None:
            self.project = Project.create(self.folder, dataset_key)
        return self.project


def check_creatable(path: Path) -> None:
    """Refuse now, before the work, a folder that could not be created or written later."""
    parent = path
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if not parent.is_dir() or not os.access(parent, os.W_OK):
        raise error(f"Cannot write to {path}: {parent} is not a writable folder.", "Choose a folder you can write to.")


def parse_list(text: str, option: str) -> list[str]:
    items = [t.strip() for t in str(text).split(",") if t.strip()]
    if not items:
        raise error(f"{option} names nothing.", f"Give {option} as a comma-separated list.")
    if len(set(items)) != len(items):
        raise error(f"{option} names an item twice: {text!r}.", "Name each once.")
    return items

"""What the robustness commands share: option parsing and checks, the --project target, pools read
and written, the job runner and the output (see `cli_robustness` for the commands themselves).

Every check here raises a `WorkbenchError` (via `error`) before any work starts, so bad input ends
in a clear message and exit 2 with nothing written.
"""

from __future__ import annotations

import math
import os
import shlex
import sys
from pathlib import Path

import numpy as np

GRAD_L2_LABEL = "grad-L2 (RobOT fuzzer FOL)"
FOL_LABEL = "FOL∞ (FOSC)"
#: Strategies that can run on a candidate pool's own scores (coverage-greedy needs neuron coverage).
POOL_STRATEGIES = ("be-st", "km-st", "deepgini", "random", "mcp", "kmst-legacy")
FOL_STRATEGIES = ("be-st", "km-st", "kmst-legacy")


def error(message: str, hint: str = ""):
    from workbench.core.errors import WorkbenchError

    return WorkbenchError(message, hint)


def command_line(args) -> str:
    return "workbench " + " ".join(shlex.quote(a) for a in args.argv)


def load_model_and_data(args):
    """(model, dataset), checked to fit each other."""
    from workbench.core.dataset_registry import load_dataset
    from workbench.core.model_io import load_model
    from workbench.core.training import check_compatible

    model = load_model(args.model, arch=args.arch, trust=args.trust_file)
    dataset = load_dataset(args.data, download=args.download)
    check_compatible(model, dataset)
    return model, dataset


def dataset_key(dataset) -> str:
    return dataset.recipe.get("name", dataset.name)


def parse_eps(text) -> float:
    from workbench.core.robustness.attacks import check_eps

    value = text
    if isinstance(text, str) and "/" in text:
        top, _, bottom = text.partition("/")
        try:
            value = float(top) / float(bottom)
        except (ValueError, ZeroDivisionError):
            raise error(f"The attack budget {text!r} is not a number.", "Give --eps in (0, 1], e.g. 0.1 or 8/255.")
    return check_eps(value)


def resolve_eps(args, dataset, stored: float | None = None, stored_what: str = "") -> tuple[float, str]:
    """(ε, where it came from): --eps, --eps-preset, a stored artifact's ε, or the dataset default (§5.2)."""
    from workbench.core.errors import WorkbenchError
    from workbench.core.robustness.attacks import DATASET_EPS, EPS_PRESETS, default_eps

    if args.eps is not None and args.eps_preset:
        raise error("--eps and --eps-preset both set the attack budget.", "Give one of them.")
    if args.eps_preset:
        if args.eps_preset not in EPS_PRESETS:
            raise error(f"Unknown eps preset {args.eps_preset!r}.", f"Known presets: {', '.join(EPS_PRESETS)}.")
        eps, source = EPS_PRESETS[args.eps_preset], f"preset {args.eps_preset}"
    elif args.eps is not None:
        eps, source = parse_eps(args.eps), "--eps"
    elif stored is not None:
        return float(stored), f"recorded in {stored_what[:1].lower()}{stored_what[1:]}"
    else:
        key = dataset_key(dataset)
        try:
            return default_eps(key), f"default for {key}"
        except WorkbenchError:
            raise error(f"There is no default attack budget for dataset {key!r}.",
                        f"Pass --eps (in (0, 1], e.g. --eps 0.1) or --eps-preset; defaults exist for "
                        f"{', '.join(DATASET_EPS)}.") from None
    if stored is not None and not math.isclose(eps, float(stored), rel_tol=1e-9, abs_tol=1e-12):
        raise error(f"{stored_what} was made with eps={float(stored):g}, but eps={eps:g} was asked for.",
                    "FOL∞ needs the budget that produced the inputs: leave --eps out, or make a new pool.")
    return eps, source


def check_loss_mode(mode: str) -> str:
    from workbench.core.robustness.scores import check_loss_mode as check

    check(mode)
    return mode


def check_positive(option: str, value, allow_none: bool = True) -> None:
    if value is None and allow_none:
        return
    if value is None or not value > 0 or (isinstance(value, float) and not math.isfinite(value)):
        raise error(f"{option} must be positive; got {value}.", f"Pass {option} 1 or more.")


def seeded_indices(n: int, k: int | None, seed: int):
    """A seeded sample of k indices of n, ascending; None for all of them."""
    if k is None or k >= n:
        return None
    return np.sort(np.random.default_rng(seed).choice(n, k, replace=False))


def stats(values) -> dict:
    """Summary of a score vector (finite values only): n, mean, sd, min, quantiles, max."""
    v = np.asarray(values, dtype=np.float64).reshape(-1)
    finite = v[np.isfinite(v)]
    keys = ("mean", "sd", "min", "q05", "q25", "median", "q75", "q95", "max")
    if not finite.size:
        return {"n": 0, "nonfinite": int(v.size), **{k: None for k in keys}}
    q = np.quantile(finite, [0.05, 0.25, 0.5, 0.75, 0.95])
    return {"n": int(finite.size), "nonfinite": int(v.size - finite.size), "mean": float(finite.mean()),
            "sd": float(finite.std()), "min": float(finite.min()), "q05": float(q[0]), "q25": float(q[1]),
            "median": float(q[2]), "q75": float(q[3]), "q95": float(q[4]), "max": float(finite.max())}


def stats_line(label: str, s: dict) -> str:
    if not s["n"]:
        return f"{label}: no finite values"
    return (f"{label}: mean {s['mean']:.4g}, median {s['median']:.4g} (q05 {s['q05']:.4g}, q25 {s['q25']:.4g}, "
            f"q75 {s['q75']:.4g}, q95 {s['q95']:.4g}), min {s['min']:.4g}, max {s['max']:.4g}")


class ProjectTarget:
    """The --project folder: an existing project opened (and checked writable) now, a new one created only
    when results are stored, so a failed or cancelled run leaves no project behind."""

    def __init__(self, folder: str | None, required: bool = False, what: str = "", write: bool = True):
        from workbench.core.project import SETTINGS, Project

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
        from workbench.core.project import Project

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


def save_pool(project, name: str, pool, **how) -> str:
    """Store `pool` in `project` under `name` (core `save_pool`); returns the name."""
    from workbench.core.robustness import pool as pools

    pools.save_pool(project, name, pool, **how)
    return name


def load_pool(project, name: str):
    """The pool `name` of `project`; a clear error naming the pools there when it has none of that name."""
    from workbench.core.robustness import pool as pools

    if name not in project.artifacts():
        pools = [n for n, e in project.artifacts("testset").items()
                 if e.get("provenance", {}).get("role") == "candidate-pool"]
        raise error(f"The project has no pool named {name!r}.",
                    f"Pools in {project.folder}: {', '.join(pools)}." if pools else
                    "Make one with `workbench attack --project DIR`.")
    return pools.load_pool(project, name)


def check_pool_model(pool, model, name: str) -> None:
    stored = pool.params.get("model_fingerprint")
    if stored and stored != model.fingerprint():
        raise error(f"Pool {name!r} was made against model {pool.params.get('model')!r} with other weights "
                    f"than {model.name!r}.", "Use the model the pool was made against, or make a new pool.")


def check_pool_dataset(pool, dataset, name: str) -> None:
    stored = pool.params.get("dataset")
    if stored and stored != dataset_key(dataset):
        raise error(f"Pool {name!r} was made from dataset {stored!r}, not {dataset_key(dataset)!r}.",
                    f"Pass --data {stored}.")


def parse_list(text: str, option: str) -> list[str]:
    items = [t.strip() for t in str(text).split(",") if t.strip()]
    if not items:
        raise error(f"{option} names nothing.", f"Give {option} as a comma-separated list.")
    if len(set(items)) != len(items):
        raise error(f"{option} names an item twice: {text!r}.", "Name each once.")
    return items


def parse_strategies(text: str, option: str, with_model: bool = False) -> list[str]:
    """Strategy names; `with_model` allows coverage-greedy, whose neuron coverage the model computes."""
    from workbench.core.robustness.selection import STRATEGIES

    names = [s.lower() for s in parse_list(text, option)]
    for name in names:
        if name not in STRATEGIES:
            raise error(f"Unknown selection strategy {name!r}.", f"Known strategies: {', '.join(STRATEGIES)}.")
        if name not in POOL_STRATEGIES and not with_model:
            raise error(f"Strategy {name!r} needs neuron coverage, which a candidate pool does not carry.",
                        f"Use one of: {', '.join(POOL_STRATEGIES)}.")
    return names


def parse_budget(text: str):
    """'5%' stays a string, '50' becomes 50; both checked as budgets of some pool."""
    from workbench.core.robustness.selection import resolve_budget

    text = str(text).strip()
    if text.endswith("%"):
        try:
            percent = float(text[:-1])
        except ValueError:
            raise error(f"The budget {text!r} is not a percentage.", "Write it like 5%.") from None
        if not 0 < percent <= 100:
            raise error(f"The budget {text} is not a percentage of the pool in (0, 100].", "Write it like 5%.")
        budget = text
    else:
        try:
            budget = int(text)
        except ValueError:
            raise error(f"The budget {text!r} is not a count or a percentage.", "Give e.g. 50 or 5%.") from None
    resolve_budget(budget, 10**9)
    return budget


def parse_seeds(args) -> list[int]:
    if args.seeds is None:
        return [args.seed]
    if args.seed != 0:
        raise error("--seed and --seeds both set the seeds.", "Give --seeds only.")
    seeds = []
    for item in parse_list(args.seeds, "--seeds"):
        try:
            seeds.append(int(item))
        except ValueError:
            raise error(f"The seed {item!r} is not a whole number.", "Give seeds like 0,1,2.") from None
        if seeds[-1] < 0:
            raise error(f"The seed {item} is negative.", "Give seeds 0 or more.")
    return seeds


def check_checkpoint_and_preset(args) -> None:
    from workbench.core.robustness.retraining import get_preset

    if args.checkpoint not in ("clean", "paper"):
        raise error(f"Unknown checkpoint mode {args.checkpoint!r}.",
                    "Use clean (best epoch on the held-out pool part) or paper (best epoch on fp_test).")
    get_preset(args.preset)
    check_positive("--epochs", args.epochs)
    check_positive("--pool-inputs", args.pool_inputs)
    check_positive("--report-inputs", args.report_inputs, allow_none=False)


def say(holder: dict, text: str, file=None) -> None:
    """Print a line while a job runs: the progress bar is cleared first (it comes back with the next step)."""
    if holder.get("bar") is not None:
        holder["bar"].close()
    print(text, file=file or sys.stdout, flush=True)


def run_job(args, job, on_partial=None, holder: dict | None = None):
    """Run `job(ctx)` with the terminal progress bar; the last moment to cancel is before anything is written."""
    from workbench.cli import _context

    ctx, bar = _context(args, on_partial)
    if holder is not None:
        holder["bar"] = bar
    try:
        result = job(ctx)
        ctx.check()
    finally:
        bar.close()
    return result, str(ctx.device)



def emit(args, result: dict, text: str) -> None:
    """Print `result` as JSON with --json, else `text`."""
    from workbench.cli import _emit

    _emit(args, result, text)

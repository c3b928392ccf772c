"""The robustness sub-commands of the command line (spec/robustness.md): attack, fol, select, fuzz,
retrain, converge and `experiment robot`.

Each command loads what it needs, refuses bad input before any work starts, runs the core job with
the terminal progress bar, and writes to the project (or to files) only once the job has finished,
so a failure or a cancel leaves nothing half-written. `--json` prints the results as one JSON
object; otherwise a short human-readable summary goes to stdout.

The RobOT code's gradient-norm "FOL" is always called "grad-L2 (RobOT fuzzer FOL)" here (§2.3);
"FOL∞" is the FOSC L∞ form of §2.1.
"""

from __future__ import annotations

import math
import os
import shlex
import sys
import time
from pathlib import Path

import numpy as np

GRAD_L2_LABEL = "grad-L2 (RobOT fuzzer FOL)"
FOL_LABEL = "FOL∞ (FOSC)"
OPTIMISTIC_LABEL = "optimistic (checkpoint chosen on test data)"
#: Keys of a stored pool's provenance that describe the stored file, not the pool: not carried over.
_STORED_ONLY = ("kind", "role", "created", "versions")
#: Strategies that can run on a candidate pool's own scores (coverage-greedy needs neuron coverage).
POOL_STRATEGIES = ("be-st", "km-st", "deepgini", "random", "mcp", "kmst-legacy")
FOL_STRATEGIES = ("be-st", "km-st", "kmst-legacy")


# --- the parser ---------------------------------------------------------------------------------------

def _add_model_data(p, data_default: str | None = None, model_default: str | None = None) -> None:
    if model_default:
        p.add_argument("--model", default=model_default, metavar="MODEL",
                       help=f"bundled model name or a path (default {model_default})")
    else:
        p.add_argument("--model", required=True, metavar="MODEL", help="bundled model name or a path")
    if data_default:
        p.add_argument("--data", default=data_default, metavar="NAME",
                       help=f"dataset name or path (default {data_default})")
    else:
        p.add_argument("--data", required=True, metavar="NAME", help="dataset name or path")


def _add_loading(p) -> None:
    p.add_argument("--arch", help="architecture of a plain state_dict file")
    p.add_argument("--download", action="store_true", help="let torchvision:<Name> datasets download")
    p.add_argument("--trust-file", action="store_true",
                   help="allow loading a full pickle (runs code from the file: only for files you trust)")


def _add_eps(p) -> None:
    p.add_argument("--eps", metavar="E", help="L∞ attack budget in (0, 1], e.g. 0.1 or 8/255 (default: the "
                                              "dataset's: mnist 0.3, fashion-mnist 0.1, svhn 8/255, cifar10 0.01)")
    p.add_argument("--eps-preset", metavar="PRESET",
                   help="a named budget instead of --eps: robot-mnist-eps (0.3) or cifar10-8/255")


def _add_report(p) -> None:
    p.add_argument("--report-inputs", type=int, default=1000, metavar="N",
                   help="seeded subset of test inputs the adaptive PGD attack and the FOL curve use (default 1000)")


def add_robustness_commands(sub) -> None:
    """Register the robustness sub-commands on the `workbench` sub-parser set."""
    from workbench.cli import _add_common

    att = sub.add_parser("attack", help="FGSM/PGD candidate pool of a split: successes per attack, FOL∞ and "
                                        "grad-L2 of every successful adversarial")
    _add_model_data(att)
    att.add_argument("--split", default="train", help="split to attack (default train)")
    _add_eps(att)
    att.add_argument("--attacks", default="fgsm,pgd", metavar="LIST", help="comma-separated: fgsm, pgd (default both)")
    att.add_argument("--max-inputs", type=int, metavar="N", help="attack a seeded sample of N inputs of the split")
    att.add_argument("--loss-mode", default="logits", help="logits (default) or keras_compat")
    att.add_argument("--batch-size", type=int, default=256)
    att.add_argument("--name", help="name of the pool stored with --project "
                                    "(default pool-<model>-<split>-eps<E>)")
    _add_loading(att)
    _add_common(att)

    fol = sub.add_parser("fol", help="first-order loss per input: FOL∞ and grad-L2 (RobOT fuzzer FOL), with "
                                     "quantiles and an optional per-input CSV")
    _add_model_data(fol)
    fol.add_argument("--testset", metavar="NAME", help="a project test set (a stored pool uses its own clean "
                                                       "inputs), a split of --data, or a dataset name or path")
    fol.add_argument("--split", help="split of --data to score (default test)")
    fol.add_argument("--attack", default="none", help="none (x' = x0, so FOL∞ = ε‖g‖₁), fgsm or pgd (default none)")
    _add_eps(fol)
    fol.add_argument("--loss-mode", help="logits or keras_compat (default logits, or a stored pool's)")
    fol.add_argument("--max-inputs", type=int, metavar="N", help="score a seeded sample of N inputs")
    fol.add_argument("--batch-size", type=int, default=256)
    fol.add_argument("--out", metavar="CSV", help="write the per-input values to this CSV file")
    _add_loading(fol)
    _add_common(fol)

    sel = sub.add_parser("select", help="select tests from a stored candidate pool (BE-ST, KM-ST, DeepGini, "
                                        "random, MCP) and store them as a new test set")
    sel.add_argument("--pool", required=True, metavar="NAME", help="candidate pool stored in --project")
    sel.add_argument("--strategy", required=True, metavar="S", help="be-st, km-st, deepgini, random, mcp or "
                                                                     "kmst-legacy")
    sel.add_argument("--budget", required=True, metavar="B", help="a count, or a percentage of the pool like 5%%")
    sel.add_argument("--fol-kind", metavar="KIND", help="FOL the FOL strategies rank by: fol_linf (default), "
                                                        "grad_l2 or fosc_l2")
    sel.add_argument("--k", type=int, metavar="K", help="sections of KM-ST (default 4)")
    sel.add_argument("--compat", action="store_true", help="BE-ST as in the RobOT code (n−1 tests for odd n)")
    sel.add_argument("--name", help="name of the new test set (default <pool>-<strategy>-<budget>)")
    _add_common(sel)

    fz = sub.add_parser("fuzz", help="RobOT's FOL-guided fuzzer: tests that flip the model's label near seed "
                                     "inputs, with both FOL kinds")
    _add_model_data(fz)
    fz.add_argument("--split", default="train", help="split the seeds are drawn from (default train)")
    fz.add_argument("--seeds", type=int, default=1000, metavar="N", help="seed inputs drawn (default 1000)")
    fz.add_argument("--time-budget", type=float, default=300.0, metavar="S", help="wall-clock seconds (default 300)")
    fz.add_argument("--mutations", type=int, default=200, metavar="N", help="mutations per seed (default 200)")
    fz.add_argument("--max-tests", type=int, metavar="N", help="stop after N tests")
    fz.add_argument("--lr", type=float, default=0.1, help="mutation step size (default 0.1)")
    fz.add_argument("--max-dist", type=float, default=0.5, help="bound on ‖x − x0‖₂/‖x0‖₂ (default 0.5)")
    fz.add_argument("--project-linf", action="store_true", help="project every mutant onto the ε-ball around its seed")
    _add_eps(fz)
    fz.add_argument("--compat", action="store_true", help="the original's recording rule and seed filter")
    fz.add_argument("--loss-mode", default="logits", help="logits (default) or keras_compat")
    fz.add_argument("--batch-size", type=int, default=256)
    fz.add_argument("--name", help="name of the test set stored with --project (default fuzz-<model>-<split>)")
    fz.add_argument("--join-pool", metavar="NAME", help="also score the tests as candidates and store them merged "
                                                        "with this pool of --project")
    fz.add_argument("--merged-name", metavar="NAME", help="name of the merged pool (default <pool>+<name>)")
    _add_loading(fz)
    _add_common(fz)

    rt = sub.add_parser("retrain", help="select from the training-set pool, fine-tune, and report static AE, "
                                        "adaptive robust and clean accuracy (the RobOT protocol)")
    _add_model_data(rt)
    _add_grid_options(rt, strategies=None, budgets=None)
    rt.add_argument("--pool", metavar="NAME", help="use this candidate pool of --project instead of attacking the "
                                                   "training set")
    rt.add_argument("--out", metavar="MODEL.pt", help="save the retrained model (exactly one run)")
    rt.add_argument("--name", help="name of the run stored with --project")
    _add_loading(rt)
    _add_common(rt)

    cv = sub.add_parser("converge", help="rounds of attack and cumulative fine-tuning until static AE accuracy "
                                         "reaches the requirement; the FOL curve per round")
    _add_model_data(cv)
    cv.add_argument("--rounds", type=int, default=20, help="at most this many rounds (default 20)")
    cv.add_argument("--requirement", type=float, default=0.8, help="static AE accuracy to reach (default 0.8)")
    cv.add_argument("--epochs", type=int, default=5, help="fine-tuning epochs per round (default 5)")
    cv.add_argument("--strategy", metavar="S", help="select from each round's pool with this strategy (needs "
                                                    "--budget; default: every success)")
    cv.add_argument("--budget", metavar="B", help="a count or a percentage of each round's pool")
    cv.add_argument("--pool-inputs", type=int, metavar="N", help="attack a seeded sample of N training inputs per round")
    cv.add_argument("--plateau-stop", action="store_true", help="stop when the mean FOL∞ stops changing")
    _add_eps(cv)
    _add_report(cv)
    cv.add_argument("--name", help="name of the run stored with --project")
    _add_loading(cv)
    _add_common(cv)

    ex = sub.add_parser("experiment", help="a whole protocol: `experiment robot` runs the RobOT grid of "
                                           "strategies × budgets × seeds")
    protocols = ex.add_subparsers(dest="protocol")
    robot = protocols.add_parser("robot", help="RobOT: BE-ST and KM-ST against DeepGini and random selection")
    _add_model_data(robot, data_default="fashion-mnist", model_default="lenet5-fashion")
    _add_grid_options(robot, strategies="be-st,km-st,deepgini,random", budgets="1%,2%,4%")
    robot.add_argument("--out", metavar="DIR", help="folder for robot_experiment.csv/.md/.json (default "
                                                    "robot-experiment, or experiments/robot in --project)")
    robot.add_argument("--name", help="name of the run stored with --project")
    _add_loading(robot)
    _add_common(robot)


def _add_grid_options(p, strategies: str | None, budgets: str | None) -> None:
    if strategies:
        p.add_argument("--strategies", default=strategies, metavar="LIST", help=f"comma-separated (default {strategies})")
    else:
        p.add_argument("--strategy", required=True, metavar="LIST", help="strategy or comma-separated strategies: "
                                                                         "be-st, km-st, deepgini, random, mcp")
    if budgets:
        p.add_argument("--budgets", default=budgets, metavar="LIST", help="percentages of the pool or counts (default "
                                                                         + budgets.replace("%", "%%") + ")")
    else:
        p.add_argument("--budget", required=True, metavar="LIST",
                       help="budget(s): percentages of the pool or counts, e.g. 1%%,2%%")
    p.add_argument("--seeds", metavar="LIST", help="comma-separated seeds, the same for every strategy "
                                                   + ("(default 0,1,2; --seed N alone runs seed N)" if strategies
                                                      else "(default: --seed)"))
    p.add_argument("--preset", default="robot-mnist", help="robot-mnist (default) or robot-cifar")
    p.add_argument("--epochs", type=int, metavar="N", help="fine-tuning epochs (default: the preset's)")
    p.add_argument("--checkpoint", default="clean", help="clean (best epoch on a held-out part of the pool, default) "
                                                         "or paper (best epoch on fp_test: optimistic)")
    p.add_argument("--pool-inputs", type=int, metavar="N", help="attack a seeded sample of N training inputs")
    _add_eps(p)
    _add_report(p)


# --- shared helpers --------------------------------------------------------------------------------------

def _error(message: str, hint: str = ""):
    from workbench.core.errors import WorkbenchError

    return WorkbenchError(message, hint)


def _command(args) -> str:
    return "workbench " + " ".join(shlex.quote(a) for a in args.argv)


def _load(args):
    """(model, dataset), checked to fit each other."""
    from workbench.core.dataset_registry import load_dataset
    from workbench.core.model_io import load_model
    from workbench.core.training import check_compatible

    model = load_model(args.model, arch=args.arch, trust=args.trust_file)
    dataset = load_dataset(args.data, download=args.download)
    check_compatible(model, dataset)
    return model, dataset


def _dataset_key(dataset) -> str:
    return dataset.recipe.get("name", dataset.name)


def _parse_eps(text) -> float:
    from workbench.core.robustness.attacks import check_eps

    value = text
    if isinstance(text, str) and "/" in text:
        top, _, bottom = text.partition("/")
        try:
            value = float(top) / float(bottom)
        except (ValueError, ZeroDivisionError):
            raise _error(f"The attack budget {text!r} is not a number.", "Give --eps in (0, 1], e.g. 0.1 or 8/255.")
    return check_eps(value)


def _resolve_eps(args, dataset, stored: float | None = None, stored_what: str = "") -> tuple[float, str]:
    """(ε, where it came from): --eps, --eps-preset, a stored artifact's ε, or the dataset default (§5.2)."""
    from workbench.core.errors import WorkbenchError
    from workbench.core.robustness.attacks import DATASET_EPS, EPS_PRESETS, default_eps

    if args.eps is not None and args.eps_preset:
        raise _error("--eps and --eps-preset both set the attack budget.", "Give one of them.")
    if args.eps_preset:
        if args.eps_preset not in EPS_PRESETS:
            raise _error(f"Unknown eps preset {args.eps_preset!r}.", f"Known presets: {', '.join(EPS_PRESETS)}.")
        eps, source = EPS_PRESETS[args.eps_preset], f"preset {args.eps_preset}"
    elif args.eps is not None:
        eps, source = _parse_eps(args.eps), "--eps"
    elif stored is not None:
        return float(stored), f"recorded in {stored_what[:1].lower()}{stored_what[1:]}"
    else:
        key = _dataset_key(dataset)
        try:
            return default_eps(key), f"default for {key}"
        except WorkbenchError:
            raise _error(f"There is no default attack budget for dataset {key!r}.",
                         f"Pass --eps (in (0, 1], e.g. --eps 0.1) or --eps-preset; defaults exist for "
                         f"{', '.join(DATASET_EPS)}.") from None
    if stored is not None and not math.isclose(eps, float(stored), rel_tol=1e-9, abs_tol=1e-12):
        raise _error(f"{stored_what} was made with eps={float(stored):g}, but eps={eps:g} was asked for.",
                     "FOL∞ needs the budget that produced the inputs: leave --eps out, or make a new pool.")
    return eps, source


def _check_loss_mode(mode: str) -> str:
    from workbench.core.robustness.scores import check_loss_mode

    check_loss_mode(mode)
    return mode


def _check_positive(option: str, value, allow_none: bool = True) -> None:
    if value is None and allow_none:
        return
    if value is None or not value > 0 or (isinstance(value, float) and not math.isfinite(value)):
        raise _error(f"{option} must be positive; got {value}.", f"Pass {option} 1 or more.")


def _seeded_indices(n: int, k: int | None, seed: int):
    """A seeded sample of k indices of n, ascending; None for all of them."""
    if k is None or k >= n:
        return None
    return np.sort(np.random.default_rng(seed).choice(n, k, replace=False))


def _stats(values) -> dict:
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


def _stats_line(label: str, s: dict) -> str:
    if not s["n"]:
        return f"{label}: no finite values"
    return (f"{label}: mean {s['mean']:.4g}, median {s['median']:.4g} (q05 {s['q05']:.4g}, q25 {s['q25']:.4g}, "
            f"q75 {s['q75']:.4g}, q95 {s['q95']:.4g}), min {s['min']:.4g}, max {s['max']:.4g}")


def _pct(x) -> str:
    return "—" if x is None or (isinstance(x, float) and not math.isfinite(x)) else f"{x * 100:.1f} %"


def _num(x, fmt: str = ".4g") -> str:
    return "—" if x is None or (isinstance(x, float) and not math.isfinite(x)) else format(x, fmt)


def _epochs(n) -> str:
    return f"{n} epoch" + ("" if n == 1 else "s")


class _ProjectTarget:
    """The --project folder: an existing project opened (and checked writable) now, a new one created only
    when results are stored, so a failed or cancelled run leaves no project behind."""

    def __init__(self, folder: str | None, required: bool = False, what: str = "", write: bool = True):
        from workbench.core.project import SETTINGS, Project

        self.folder = Path(folder) if folder else None
        self.project = None
        if self.folder is None:
            if required:
                raise _error(f"{what} needs a project.", "Pass --project DIR (the project holding the pool).")
            return
        if (self.folder / SETTINGS).exists() or required:
            self.project = Project.open(self.folder)
            if write:
                self.project.ensure_writable()
        elif write:
            _check_creatable(self.folder)

    def __bool__(self) -> bool:
        return self.folder is not None

    def open(self, dataset_key: str):
        from workbench.core.project import Project

        if self.project is None:
            self.project = Project.create(self.folder, dataset_key)
        return self.project


def _check_creatable(path: Path) -> None:
    """Refuse now, before the work, a folder that could not be created or written later."""
    parent = path
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if not parent.is_dir() or not os.access(parent, os.W_OK):
        raise _error(f"Cannot write to {path}: {parent} is not a writable folder.", "Choose a folder you can write to.")


def _save_pool(project, name: str, pool, **how) -> str:
    from workbench.core.robustness.pool import save_pool

    save_pool(project, name, pool, **how)
    return name


def _load_pool(project, name: str):
    from workbench.core.robustness.pool import load_pool

    if name not in project.artifacts():
        pools = [n for n, e in project.artifacts("testset").items()
                 if e.get("provenance", {}).get("role") == "candidate-pool"]
        raise _error(f"The project has no pool named {name!r}.",
                     f"Pools in {project.folder}: {', '.join(pools)}." if pools else
                     "Make one with `workbench attack --project DIR`.")
    return load_pool(project, name)


def _check_pool_model(pool, model, name: str) -> None:
    stored = pool.params.get("model_fingerprint")
    if stored and stored != model.fingerprint():
        raise _error(f"Pool {name!r} was made against model {pool.params.get('model')!r} with other weights "
                     f"than {model.name!r}.", "Use the model the pool was made against, or make a new pool.")


def _check_pool_dataset(pool, dataset, name: str) -> None:
    stored = pool.params.get("dataset")
    if stored and stored != _dataset_key(dataset):
        raise _error(f"Pool {name!r} was made from dataset {stored!r}, not {_dataset_key(dataset)!r}.",
                     f"Pass --data {stored}.")


def _parse_list(text: str, option: str) -> list[str]:
    items = [t.strip() for t in str(text).split(",") if t.strip()]
    if not items:
        raise _error(f"{option} names nothing.", f"Give {option} as a comma-separated list.")
    if len(set(items)) != len(items):
        raise _error(f"{option} names an item twice: {text!r}.", "Name each once.")
    return items


def _parse_strategies(text: str, option: str) -> list[str]:
    from workbench.core.robustness.selection import STRATEGIES

    names = [s.lower() for s in _parse_list(text, option)]
    for name in names:
        if name not in STRATEGIES:
            raise _error(f"Unknown selection strategy {name!r}.", f"Known strategies: {', '.join(POOL_STRATEGIES)}.")
        if name not in POOL_STRATEGIES:
            raise _error(f"Strategy {name!r} needs neuron coverage, which a candidate pool does not carry.",
                         f"Use one of: {', '.join(POOL_STRATEGIES)}.")
    return names


def _parse_budget(text: str):
    """'5%' stays a string, '50' becomes 50; both checked as budgets of some pool."""
    from workbench.core.robustness.selection import resolve_budget

    text = str(text).strip()
    if text.endswith("%"):
        try:
            percent = float(text[:-1])
        except ValueError:
            raise _error(f"The budget {text!r} is not a percentage.", "Write it like 5%.") from None
        if not 0 < percent <= 100:
            raise _error(f"The budget {text} is not a percentage of the pool in (0, 100].", "Write it like 5%.")
        budget = text
    else:
        try:
            budget = int(text)
        except ValueError:
            raise _error(f"The budget {text!r} is not a count or a percentage.", "Give e.g. 50 or 5%.") from None
    resolve_budget(budget, 10**9)
    return budget


def _parse_seeds(args) -> list[int]:
    if args.seeds is None:
        return [args.seed]
    if args.seed != 0:
        raise _error("--seed and --seeds both set the seeds.", "Give --seeds only.")
    seeds = []
    for item in _parse_list(args.seeds, "--seeds"):
        try:
            seeds.append(int(item))
        except ValueError:
            raise _error(f"The seed {item!r} is not a whole number.", "Give seeds like 0,1,2.") from None
        if seeds[-1] < 0:
            raise _error(f"The seed {item} is negative.", "Give seeds 0 or more.")
    return seeds


def _check_checkpoint_and_preset(args) -> None:
    from workbench.core.robustness.retraining import get_preset

    if args.checkpoint not in ("clean", "paper"):
        raise _error(f"Unknown checkpoint mode {args.checkpoint!r}.",
                     "Use clean (best epoch on the held-out pool part) or paper (best epoch on fp_test).")
    get_preset(args.preset)
    _check_positive("--epochs", args.epochs)
    _check_positive("--pool-inputs", args.pool_inputs)
    _check_positive("--report-inputs", args.report_inputs, allow_none=False)


def _say(holder: dict, text: str, file=None) -> None:
    """Print a line while a job runs: the progress bar is cleared first (it comes back with the next step)."""
    if holder.get("bar") is not None:
        holder["bar"].close()
    print(text, file=file or sys.stdout, flush=True)


def _run_job(args, job, on_partial=None, holder: dict | None = None):
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


# --- attack -----------------------------------------------------------------------------------------------

def cmd_attack(args) -> int:
    from workbench.core.robustness.attacks import ATTACKS
    from workbench.core.robustness.pool import build_pool

    started = time.monotonic()
    model, dataset = _load(args)
    split = dataset.split(args.split)
    eps, eps_source = _resolve_eps(args, dataset)
    attacks = [a.lower() for a in _parse_list(args.attacks, "--attacks")]
    for name in attacks:
        if name not in ATTACKS:
            raise _error(f"Unknown attack {name!r}.", f"Use one of: {', '.join(ATTACKS)}.")
    _check_loss_mode(args.loss_mode)
    _check_positive("--max-inputs", args.max_inputs)
    _check_positive("--batch-size", args.batch_size, allow_none=False)
    target = _ProjectTarget(args.project)
    indices = _seeded_indices(len(split), args.max_inputs, args.seed)
    key = _dataset_key(dataset)
    name = args.name or f"pool-{model.name}-{args.split}-eps{eps:g}"

    pool, device = _run_job(args, lambda ctx: build_pool(
        ctx, model, split, eps, attacks=tuple(attacks), seed=args.seed, batch_size=args.batch_size, indices=indices,
        loss_mode=args.loss_mode, what=f"{key}:{args.split}"))
    artifact = None
    if target:
        project = target.open(key)
        artifact = _save_pool(project, name, pool, model=model.name, model_fingerprint=model.fingerprint(),
                              dataset=key, split=args.split, eps_source=eps_source, command=_command(args))
        project.add_model(args.model)
    attempted, succeeded = pool.params["attempted"], pool.params["succeeded"]
    result = {
        "model": model.name, "model_fingerprint": model.fingerprint(), "dataset": key, "split": args.split,
        "eps": eps, "eps_source": eps_source, "attacks": attacks, "loss_mode": args.loss_mode, "seed": args.seed,
        "attacked_inputs": pool.params["attacked_inputs"], "split_inputs": len(split),
        "attempted": attempted, "succeeded": succeeded,
        "success_rate": {a: (succeeded[a] / attempted[a] if attempted[a] else None) for a in attacks},
        "candidates": len(pool), "by_attack": pool.attack_counts(),
        "fol_linf": _stats(pool.scores["fol_linf"]), "grad_l2": _stats(pool.scores["grad_l2"]),
        "grad_l2_label": GRAD_L2_LABEL, "artifact": artifact, "device": device,
        "seconds": round(time.monotonic() - started, 3),
    }
    lines = [(f"{model.name} on {key}:{args.split} ({result['attacked_inputs']:,} of {len(split):,} inputs "
              f"attacked), eps {eps:g} ({eps_source}), loss {args.loss_mode}, seed {args.seed}")]
    width = max(len(a) for a in attacks) + 1
    for a in attacks:
        lines.append(f"  {a + ':':<{width}} {succeeded[a]:,} / {attempted[a]:,} succeeded "
                     f"({_pct(result['success_rate'][a])})")
    lines.append(f"Pool: {len(pool):,} candidates ("
                 + ", ".join(f"{a} {n:,}" for a, n in result["by_attack"].items()) + ")")
    lines.append(_stats_line(FOL_LABEL, result["fol_linf"]))
    lines.append(_stats_line(GRAD_L2_LABEL, result["grad_l2"]))
    if artifact:
        lines.append(f"Stored as test set {artifact!r} in {target.folder}.")
    lines.append(f"Took {result['seconds']:.1f} s on {device}.")
    _emit(args, result, "\n".join(lines))
    return 0


def _emit(args, result: dict, text: str) -> None:
    from workbench.cli import _emit as emit

    emit(args, result, text)


# --- fol --------------------------------------------------------------------------------------------------

def _fol_source(args, dataset, project):
    """What `fol` scores: {"kind": "split"|"pool"|"testset", "name", "split" (a Split), "x_adv" (pre-made
    inputs, for a stored pool), "x0", "eps", "loss_mode"}. A stored pool or fuzzer test set with a
    source index scores its own inputs against their clean inputs of the split it came from."""
    from workbench.cli import _resolve_testset
    from workbench.core.data import Split, as_image_array, as_labels

    if args.testset and args.split:
        raise _error("--testset and --split both name what to score.", "Give one of them.")
    key = _dataset_key(dataset)
    if not args.testset:
        name = args.split or "test"
        return {"kind": "split", "name": f"{key}:{name}", "split": dataset.split(name)}
    entry = next((t for t in project.testsets if t["name"] == args.testset), None) if project else None
    if entry and entry.get("artifact"):
        artifact = project.load_artifact(entry["artifact"])
        images = next((k for k in ("x", "images") if k in artifact.names), None)
        labels = next((k for k in ("y", "labels") if k in artifact.names), None)
        if images is None:
            raise _error(f"Test set {args.testset!r} of the project holds no images.", "Choose a test set with images.")
        if labels is None:
            raise _error(f"Test set {args.testset!r} of the project holds no labels.",
                         "FOL needs the ground-truth label of every input (an array y).")
        x = as_image_array(artifact[images], f"test set {args.testset!r}")
        y = as_labels(artifact[labels], dataset.num_classes, f"test set {args.testset!r} labels")
        how = artifact.provenance
        if "source_index" in artifact.names and how.get("split"):
            if how.get("dataset") and how["dataset"] != key:
                raise _error(f"Test set {args.testset!r} was made from dataset {how['dataset']!r}, not {key!r}.",
                             f"Pass --data {how['dataset']}.")
            origin = dataset.split(how["split"])
            source = np.asarray(artifact["source_index"], dtype=np.int64)
            if len(source) != len(y) or (len(source) and (source.min() < 0 or source.max() >= len(origin))):
                raise _error(f"Test set {args.testset!r} has source indices that do not fit {key}:{how['split']}.",
                             "It was made from other data; recompute it.")
            return {"kind": "pool", "name": args.testset, "split": Split(x, y), "source_index": source,
                    "origin": origin, "eps": how.get("eps"), "loss_mode": how.get("loss_mode"),
                    "origin_name": f"{key}:{how['split']}"}
        return {"kind": "testset", "name": args.testset, "split": Split(x, y)}
    test, name = _resolve_testset(args, dataset, project)
    return {"kind": "split" if isinstance(test, str) else "testset", "name": name,
            "split": dataset.split(test) if isinstance(test, str) else test}


def cmd_fol(args) -> int:
    from workbench.core.robustness.attacks import ATTACKS, attack_split
    from workbench.core.robustness.scores import score_inputs

    started = time.monotonic()
    model, dataset = _load(args)
    target = _ProjectTarget(args.project, write=False)  # read for its test sets; fol stores nothing there
    source = _fol_source(args, dataset, target.project)
    attack = args.attack.lower()
    if attack not in ("none", *ATTACKS):
        raise _error(f"Unknown attack {args.attack!r}.", "Use none, fgsm or pgd.")
    if source["kind"] == "pool":
        if attack != "none":
            raise _error(f"Test set {source['name']!r} already holds perturbed inputs with their clean sources.",
                         "Score it as it is with --attack none.")
        stored_eps = source["eps"]
        if stored_eps is None:
            raise _error(f"Test set {source['name']!r} does not record the eps that made it.", "Recompute it.")
        eps, eps_source = _resolve_eps(args, dataset, stored_eps, f"Test set {source['name']!r}")
        loss_mode = _check_loss_mode(args.loss_mode or source["loss_mode"] or "logits")
    else:
        eps, eps_source = _resolve_eps(args, dataset)
        loss_mode = _check_loss_mode(args.loss_mode or "logits")
    _check_positive("--max-inputs", args.max_inputs)
    _check_positive("--batch-size", args.batch_size, allow_none=False)
    split = source["split"]
    if len(split) == 0:
        raise _error(f"Test set {source['name']!r} is empty.", "Choose a test set with inputs.")
    if args.out:
        _check_creatable(Path(args.out).resolve().parent)
    rows = _seeded_indices(len(split), args.max_inputs, args.seed)
    rows = np.arange(len(split)) if rows is None else rows

    def job(ctx):
        if source["kind"] == "pool":
            x_adv, labels = split.numpy(rows), split.labels[rows]
            x0 = source["origin"].numpy(source["source_index"][rows])
            attacked = None
        elif attack == "none":
            x_adv = x0 = split.numpy(rows)
            labels, attacked = split.labels[rows], None
        else:
            attacked = attack_split(ctx.stage(0, 2, attack), model, split, eps, attacks=(attack,), seed=args.seed,
                                    batch_size=args.batch_size, indices=rows, loss_mode=loss_mode,
                                    successful_only=False)
            x_adv, labels, x0 = attacked.images, attacked.labels, split.numpy(attacked.source_index)
        scored = score_inputs(ctx.stage(1, 2, "FOL") if attacked else ctx, model, x_adv, labels, x0=x0, eps=eps,
                              loss_mode=loss_mode, batch_size=args.batch_size)
        return scored, labels, attacked

    (scored, labels, attacked), device = _run_job(args, job)
    predicted = scored["probs_matrix"].argmax(1)
    fol, grad = scored["fol_linf"], scored["grad_l2"]
    written = None
    if args.out:
        written = _write_fol_csv(args.out, rows, source, labels, predicted, fol, grad, scored["deepgini"])
    result = {
        "model": model.name, "model_fingerprint": model.fingerprint(), "dataset": _dataset_key(dataset),
        "testset": source["name"], "kind": source["kind"], "inputs": len(labels),
        "testset_inputs": len(split), "attack": attack, "eps": eps, "eps_source": eps_source,
        "loss_mode": loss_mode, "seed": args.seed,
        "accuracy": float((predicted == labels).mean()),
        "attack_success_rate": None if attacked is None else float((predicted != labels).mean()),
        "fol_linf": _stats(fol), "fol_linf_negative": int((fol < 0).sum()),
        "grad_l2": _stats(grad), "grad_l2_label": GRAD_L2_LABEL,
        "clean_source": source.get("origin_name"), "csv": written, "device": device,
        "seconds": round(time.monotonic() - started, 3),
    }
    what = {"none": "clean inputs (x' = x0, FOL∞ = ε‖g‖₁)", "fgsm": "FGSM adversarials", "pgd": "PGD adversarials"}
    lines = [f"{model.name} on {source['name']} ({result['inputs']:,} of {len(split):,} inputs), "
             + (f"stored inputs scored against their clean sources in {result['clean_source']}"
                if source["kind"] == "pool" else what[attack])
             + f"; eps {eps:g} ({eps_source}), loss {loss_mode}",
             f"accuracy on the scored inputs: {_pct(result['accuracy'])}",
             _stats_line(FOL_LABEL, result["fol_linf"]), _stats_line(GRAD_L2_LABEL, result["grad_l2"])]
    if result["fol_linf_negative"]:
        lines.append(f"  {result['fol_linf_negative']:,} inputs have FOL∞ < 0: they lie outside the ε-ball of "
                     "their clean input")
    if written:
        lines.append(f"Per-input values written to {written}.")
    lines.append(f"Took {result['seconds']:.1f} s on {device}.")
    _emit(args, result, "\n".join(lines))
    return 0


def _write_fol_csv(path, rows, source, labels, predicted, fol, grad, gini) -> str:
    import csv

    from workbench.core.store import atomic_path

    path = Path(path)
    origin = source.get("source_index")
    with atomic_path(path) as tmp, open(tmp, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["index", "source_index", "label", "prediction", "fol_linf", GRAD_L2_LABEL, "deepgini"])
        for k, i in enumerate(rows):
            w.writerow([int(i), int(origin[i]) if origin is not None else int(i), int(labels[k]),
                        int(predicted[k]), repr(float(fol[k])), repr(float(grad[k])), repr(float(gini[k]))])
    return str(path)


# --- select -----------------------------------------------------------------------------------------------

def cmd_select(args) -> int:
    from workbench.core.robustness.experiment import selection_scores
    from workbench.core.robustness.selection import FOL_KINDS, select

    started = time.monotonic()
    target = _ProjectTarget(args.project, required=True, what="Selection from a stored pool")
    project = target.project
    strategy = _parse_strategies(args.strategy, "--strategy")
    if len(strategy) != 1:
        raise _error("select takes one strategy.", "Run it once per strategy.")
    strategy = strategy[0]
    budget = _parse_budget(args.budget)
    options = {}
    if args.fol_kind is not None:
        if strategy not in FOL_STRATEGIES:
            raise _error(f"--fol-kind applies to the FOL strategies ({', '.join(FOL_STRATEGIES)}), not to {strategy}.",
                         "Leave --fol-kind out.")
        if args.fol_kind not in FOL_KINDS:
            raise _error(f"Unknown FOL kind {args.fol_kind!r}.", f"Use one of: {', '.join(FOL_KINDS)}.")
        options["fol_kind"] = args.fol_kind
    if args.k is not None:
        if strategy != "km-st":
            raise _error("--k is the section count of km-st.", "Leave --k out, or use --strategy km-st.")
        _check_positive("--k", args.k)
        options["k"] = args.k
    if args.compat:
        if strategy != "be-st":
            raise _error("--compat applies to be-st.", "Leave --compat out, or use --strategy be-st.")
        options["compat"] = True
    pool = _load_pool(project, args.pool)
    if len(pool) == 0:
        raise _error(f"Pool {args.pool!r} is empty.", "Make a pool with candidates first (workbench attack).")
    chosen = select(strategy, selection_scores(pool), budget, seed=args.seed, **options)
    indices = np.asarray(chosen.indices, dtype=np.int64)
    picked = pool.subset(indices)
    kind = chosen.params.get("fol_kind") or "fol_linf"
    name = args.name or f"{args.pool}-{strategy}-{args.budget}"
    if name == args.pool:
        raise _error(f"--name {name!r} would replace the pool it selects from.", "Choose another name.")
    _save_pool(project, name, picked, selection=chosen.params, selected_from=args.pool,
               what=f"{strategy} selection of {args.budget} from {args.pool}", command=_command(args))
    values = picked.scores.get(kind)
    result = {
        "pool": args.pool, "pool_size": len(pool), "strategy": strategy, "budget": args.budget,
        "selected": len(indices), "excluded_nan": chosen.excluded_nan, "seed": args.seed,
        "fol_kind": chosen.params.get("fol_kind"), "range_kind": kind,
        "range": _stats(values) if values is not None else None,
        "fol_linf": _stats(picked.scores["fol_linf"]) if "fol_linf" in picked.scores else None,
        "by_attack": picked.attack_counts(), "indices": indices.tolist(), "params": chosen.params,
        "artifact": name, "seconds": round(time.monotonic() - started, 3),
    }
    label = GRAD_L2_LABEL if kind == "grad_l2" else {"fol_linf": FOL_LABEL, "fosc_l2": "FOSC-L2"}[kind]
    r = result["range"]
    lines = [(f"{strategy}: selected {len(indices):,} of {len(pool):,} candidates in pool {args.pool!r} "
              f"(budget {args.budget}, seed {args.seed})"),
             (f"{label} of the selection: {r['min']:.4g} – {r['max']:.4g} (mean {r['mean']:.4g})"
              if r and r["n"] else f"{label}: no finite values"),
             "first indices: " + ", ".join(str(i) for i in indices[:20]) + (" …" if len(indices) > 20 else "")]
    if chosen.excluded_nan:
        lines.append(f"{chosen.excluded_nan:,} candidates with NaN scores were left out.")
    lines.append(f"Stored as test set {name!r} in {target.folder}.")
    _emit(args, result, "\n".join(lines))
    return 0


# --- fuzz -------------------------------------------------------------------------------------------------

def cmd_fuzz(args) -> int:
    from workbench.core.robustness.fuzzing import ATTACK_NAME, fuzz
    from workbench.core.robustness.pool import (
        CandidatePool,
        merge_pools,
        score_candidates,
    )

    started = time.monotonic()
    model, dataset = _load(args)
    split = dataset.split(args.split)
    key = _dataset_key(dataset)
    _check_loss_mode(args.loss_mode)
    for option, value in (("--seeds", args.seeds), ("--time-budget", args.time_budget), ("--mutations", args.mutations),
                          ("--max-tests", args.max_tests), ("--lr", args.lr), ("--max-dist", args.max_dist),
                          ("--batch-size", args.batch_size)):
        _check_positive(option, value)
    target = _ProjectTarget(args.project, required=bool(args.join_pool), what="--join-pool")
    joined = None
    if args.join_pool:
        joined = _load_pool(target.project, args.join_pool)
        _check_pool_model(joined, model, args.join_pool)
        _check_pool_dataset(joined, dataset, args.join_pool)
        if joined.params.get("split") and joined.params["split"] != args.split:
            raise _error(f"Pool {args.join_pool!r} holds candidates of the {joined.params['split']} split; the "
                         f"fuzzer seeds come from {args.split}.", f"Pass --split {joined.params['split']}.")
        if "fol_linf" not in joined.scores or joined.params.get("eps") is None:
            raise _error(f"Pool {args.join_pool!r} holds no FOL∞ scores to join.", "Join a pool made by workbench attack.")
        eps, eps_source = _resolve_eps(args, dataset, joined.params["eps"], f"Pool {args.join_pool!r}")
        pool_mode = joined.params.get("loss_mode", "logits")
        if pool_mode != args.loss_mode:
            raise _error(f"Pool {args.join_pool!r} was scored with loss mode {pool_mode}, the fuzzer uses "
                         f"{args.loss_mode}: their FOL values are not comparable.", f"Pass --loss-mode {pool_mode}.")
    else:
        eps, eps_source = _resolve_eps(args, dataset)
    name = args.name or f"fuzz-{model.name}-{args.split}"
    merged_name = args.merged_name or (f"{args.join_pool}+{name}" if args.join_pool else None)
    if args.merged_name and not args.join_pool:
        raise _error("--merged-name names the pool --join-pool makes.", "Add --join-pool NAME, or leave it out.")
    if args.join_pool and (merged_name == name or merged_name == args.join_pool):
        raise _error("The merged pool needs a name of its own.", "Pass --merged-name.")

    def job(ctx):
        tests = fuzz(ctx.stage(0, 2, "fuzzing") if joined else ctx, model, split, eps=eps, n_seeds=args.seeds,
                     seed=args.seed, lr=args.lr, max_dist=args.max_dist, mutations_per_seed=args.mutations,
                     time_budget_s=args.time_budget, max_tests=args.max_tests, project_linf=args.project_linf,
                     compat=args.compat, batch_size=args.batch_size, loss_mode=args.loss_mode)
        merged = None
        if joined is not None and len(tests):
            x0 = split.numpy(tests.seed_index)
            scores, probs = score_candidates(ctx.stage(1, 2, "scoring the tests"), model, tests.images, tests.labels,
                                             x0, eps, args.loss_mode, args.batch_size)
            candidates = CandidatePool(tests.images, tests.labels, tests.seed_index,
                                       np.full(len(tests), ATTACK_NAME), scores, probs,
                                       {"eps": eps, "loss_mode": args.loss_mode, "what": f"fuzzer tests {name}"})
            merged = merge_pools(joined, candidates)
        return tests, merged

    (tests, merged), device = _run_job(args, job)
    p = tests.params
    warnings = []
    outside = int(len(tests) - np.sum(tests.inside_ball))
    if merged is not None and outside:
        warnings.append(f"{outside:,} of the {len(tests):,} joined tests lie outside the ε-ball of their seed, where "
                        "FOL∞ can be negative and ranks them as the strongest; fuzz with --project-linf to keep them "
                        "inside, or select with --fol-kind grad_l2")
    artifact = merged_artifact = None
    if target and len(tests):
        project = target.open(key)
        how = {"model": model.name, "model_fingerprint": model.fingerprint(), "dataset": key, "split": args.split,
               "eps_source": eps_source, "command": _command(args)}
        project.save_artifact("testset", name, tests.to_arrays(), role="fuzz-tests",
                              **{k: v for k, v in p.items() if k not in how and k not in _STORED_ONLY}, **how)
        artifact = name
        if merged is not None:
            merged_artifact = _save_pool(project, merged_name, merged, merged_from=[args.join_pool, name],
                                         **{k: v for k, v in how.items() if k != "eps_source"})
        project.add_model(args.model)
    result = {
        "model": model.name, "model_fingerprint": model.fingerprint(), "dataset": key, "split": args.split,
        "eps": eps, "eps_source": eps_source, "tests": len(tests), "seeds_drawn": p["seeds_drawn"],
        "seeds_used": p["seeds_used"], "dropped_static": p["dropped_static"],
        "dropped_misclassified": p["dropped_misclassified"], "stop_reason": p["stop_reason"],
        "mutations_total": p["mutations_total"], "elapsed_s": p["elapsed_s"],
        "inside_ball": int(np.sum(tests.inside_ball)), "grad_l2": _stats(tests.grad_l2), "grad_l2_label": GRAD_L2_LABEL,
        "fol_linf": _stats(tests.fol_linf), "params": p, "artifact": artifact,
        "joined_pool": args.join_pool, "merged_pool": merged_artifact,
        "merged_candidates": None if merged is None else len(merged),
        "merged_by_attack": None if merged is None else merged.attack_counts(), "warnings": warnings,
        "device": device, "seconds": round(time.monotonic() - started, 3),
    }
    projection = "projected onto the ε-ball" if args.project_linf else "no L∞ projection"
    lines = [(f"{model.name} fuzzed from {key}:{args.split}: {len(tests):,} tests generated "
              f"(stopped: {p['stop_reason']}, {p['elapsed_s']:.1f} s, {p['mutations_total']:,} mutations)"),
             (f"seeds: {p['seeds_used']:,} used of {p['seeds_drawn']:,} drawn ({p['dropped_static']:,} dropped for "
              f"a vanishing gradient, {p['dropped_misclassified']:,} misclassified)"),
             (f"eps {eps:g} ({eps_source}), {projection}; {result['inside_ball']:,} of {len(tests):,} tests inside "
              "the ε-ball")]
    if len(tests):
        lines += [_stats_line(GRAD_L2_LABEL, result["grad_l2"]), _stats_line(FOL_LABEL, result["fol_linf"])]
    if artifact:
        lines.append(f"Stored as test set {artifact!r} in {target.folder}.")
    if merged_artifact:
        lines.append(f"Merged with pool {args.join_pool!r} into {merged_artifact!r}: {len(merged):,} candidates ("
                     + ", ".join(f"{a} {n:,}" for a, n in merged.attack_counts().items()) + ").")
    elif target and not len(tests):
        lines.append("No tests were generated; nothing was stored.")
    lines += [f"warning: {w}" for w in warnings]
    lines.append(f"Took {result['seconds']:.1f} s on {device}.")
    _emit(args, result, "\n".join(lines))
    return 0


# --- retrain ----------------------------------------------------------------------------------------------

def _row_line(row: dict) -> str:
    return (f"{row['strategy']} {row['budget']} seed {row['seed']}: {row['selected']:,} selected, static AE "
            f"{_pct(row.get('static_ae_accuracy'))}, adaptive robust {_pct(row['adaptive_robust_accuracy'])}, "
            f"clean {_pct(row['clean_accuracy'])}, mean FOL∞ {_num(row['fol_mean'])}")


def _results_table(rows: list[dict], baseline: dict) -> list[str]:
    header = ["strategy", "budget", "seed", "selected", "static AE acc", "adaptive robust acc", "clean acc",
              "mean FOL∞", "selected FOL∞"]
    body = [["original", "—", "—", "0", _pct(baseline.get("static_ae_accuracy")),
             _pct(baseline["adaptive_robust_accuracy"]), _pct(baseline["clean_accuracy"]), _num(baseline["fol_mean"]),
             "—"]]
    for r in rows:
        body.append([r["strategy"], r["budget"], str(r["seed"]), f"{r['selected']:,}", _pct(r.get("static_ae_accuracy")),
                     _pct(r["adaptive_robust_accuracy"]), _pct(r["clean_accuracy"]), _num(r["fol_mean"]),
                     _num(r.get("selected_fol_mean"))])
    widths = [max(len(line[i]) for line in [header] + body) for i in range(len(header))]
    fmt = lambda line: "  ".join(c.ljust(w) for c, w in zip(line, widths)).rstrip()
    return [fmt(header), fmt(["-" * w for w in widths])] + [fmt(line) for line in body]


def _setup_lines(summary: dict, checkpoint_mode: str) -> list[str]:
    pool, fp = summary["pool"], summary["fp_test"]
    mode = "clean (best epoch on the held-out pool part)" if checkpoint_mode == "clean" else \
        f"paper (best epoch on fp_test) — results are {OPTIMISTIC_LABEL}"
    return [f"eps {summary['eps']:g}; pool {pool['candidates']:,} candidates ("
            + ", ".join(f"{a} {n:,}" for a, n in pool["by_attack"].items())
            + f"), {summary['selectable']:,} selectable, {summary['heldout']:,} held out; fp_test {fp['candidates']:,}",
            f"checkpoint: {mode}"]


def cmd_retrain(args) -> int:
    from workbench.core.robustness.experiment import (
        ExperimentResult,
        prepare,
        run_strategy,
    )
    from workbench.core.robustness.pool import holdout
    from workbench.core.robustness.retraining import get_preset
    from workbench.core.robustness.selection import resolve_budget

    started = time.monotonic()
    strategies = _parse_strategies(args.strategy, "--strategy")
    budgets = [_parse_budget(b) for b in _parse_list(args.budget, "--budget")]
    seeds = _parse_seeds(args)
    _check_checkpoint_and_preset(args)
    grid = [(s, b, seed) for b in budgets for s in strategies for seed in seeds]
    if args.out and len(grid) != 1:
        raise _error(f"--out saves one retrained model, but this command makes {len(grid)} runs.",
                     "Give one strategy, one budget and one seed with --out.")
    if args.pool and args.pool_inputs:
        raise _error("--pool-inputs sizes a new pool, but --pool gives a stored one.", "Give one of them.")
    model, dataset = _load(args)
    if args.out:
        if not model.info.arch:
            raise _error(f"Model {model.name!r} ({model.info.format}) has no known architecture to save it with.",
                         "Use a workbench checkpoint or a bundled model, or pass --arch.")
        _check_creatable(Path(args.out).resolve().parent)
    dataset.split("train")
    dataset.split("test")
    target = _ProjectTarget(args.project, required=bool(args.pool), what="--pool")
    key = _dataset_key(dataset)
    pool = None
    if args.pool:
        pool = _load_pool(target.project, args.pool)
        _check_pool_model(pool, model, args.pool)
        _check_pool_dataset(pool, dataset, args.pool)
        eps, eps_source = _resolve_eps(args, dataset, pool.params.get("eps"), f"Pool {args.pool!r}")
        if len(pool) == 0:
            raise _error(f"Pool {args.pool!r} is empty.", "Make a pool with candidates first.")
        selectable = len(holdout(pool, 0.1, seeds[0])[0]) if args.checkpoint == "clean" else len(pool)
        for b in budgets:
            if resolve_budget(b, selectable) > selectable:
                raise _error(f"The budget {b} is larger than the {selectable:,} selectable candidates of pool "
                             f"{args.pool!r}.", "Lower the budget or make a larger pool.")
    else:
        eps, eps_source = _resolve_eps(args, dataset)
    epochs = args.epochs or get_preset(args.preset).epochs
    holder: dict = {}
    name = args.name or f"retrain-{model.name}-{'+'.join(strategies)}-{'+'.join(str(b) for b in budgets)}"

    def job(ctx):
        stages = len(grid) + 1
        setup = prepare(ctx.stage(0, stages, "setup"), model, dataset, eps, seed=seeds[0],
                        checkpoint_mode=args.checkpoint, pool=pool, pool_inputs=args.pool_inputs,
                        report_subset=args.report_inputs)
        rows, tuned = [], None
        for k, (strategy, budget, seed) in enumerate(grid):
            row, tuned = run_strategy(ctx.stage(k + 1, stages, f"run {k + 1}/{len(grid)}"), setup, strategy, budget,
                                      seed, preset=args.preset, epochs=args.epochs)
            rows.append(row)
            if not args.json:
                _say(holder, _row_line(row), sys.stderr)
        params = {"strategies": strategies, "budgets": [str(b) for b in budgets], "seeds": seeds,
                  "preset": args.preset, "epochs": epochs, "checkpoint_mode": args.checkpoint,
                  "report_subset": args.report_inputs, "eps": eps}
        return ExperimentResult(rows, setup.summary(), params), tuned

    (result, tuned), device = _run_job(args, job, holder=holder)
    out = None
    if args.out:
        out = _save_retrained(args, tuned, model, dataset, result.rows[0], result.params)
    artifact = None
    if target:
        project = target.open(key)
        params = {**result.params, "model": model.name, "model_fingerprint": model.fingerprint(), "dataset": key,
                  "pool": args.pool, "pool_inputs": args.pool_inputs, "eps_source": eps_source,
                  "setup": result.setup}
        _save_run(project, name, "experiment", result.rows, params, command=_command(args))
        artifact = name
        project.add_model(args.model)
        if out:
            project.add_model(out)
    baseline = result.setup["baseline"]
    payload = {
        "model": model.name, "model_fingerprint": model.fingerprint(), "dataset": key, "eps": eps,
        "eps_source": eps_source, "preset": args.preset, "epochs": epochs, "checkpoint_mode": args.checkpoint,
        "optimistic": args.checkpoint == "paper", "label": OPTIMISTIC_LABEL if args.checkpoint == "paper" else None,
        "pool": args.pool, "setup": result.setup, "baseline": baseline, "rows": result.rows, "out": out,
        "artifact": artifact, "device": device, "seconds": round(time.monotonic() - started, 3),
    }
    lines = [f"{model.name} on {key}: {len(grid)} retraining run(s), preset {args.preset}, {_epochs(epochs)}"]
    lines += _setup_lines(result.setup, args.checkpoint)
    lines += _results_table(result.rows, baseline)
    if args.checkpoint == "paper":
        lines.append(f"All retrained results are {OPTIMISTIC_LABEL}.")
    if out:
        lines.append(f"Retrained model saved to {out}.")
    if artifact:
        lines.append(f"Stored as run {artifact!r} in {target.folder}.")
    lines.append(f"Took {payload['seconds']:.1f} s on {device}.")
    _emit(args, payload, "\n".join(lines))
    return 0


def _save_run(project, name, what, rows, params, **how):
    from workbench.core.robustness.runs import save_run

    return save_run(project, name, what, rows, params, **how)


def _save_retrained(args, tuned, model, dataset, row: dict, params: dict) -> str:
    """The retrained model as a workbench checkpoint with its card (and the card as a sidecar JSON)."""
    from workbench.core.model_io import save_checkpoint
    from workbench.core.store import write_json

    out = Path(args.out)
    base = model.info.card or {}
    card = {
        "name": out.stem, "title": f"{model.name} fine-tuned with {row['strategy']} {row['budget']} (RobOT)",
        "arch": model.info.arch, "dataset": _dataset_key(dataset), "fine_tuned_from": model.name,
        "fine_tuned_from_fingerprint": model.fingerprint(), "strategy": row["strategy"], "budget": row["budget"],
        "selected": row["selected"], "seed": row["seed"], "preset": params["preset"], "epochs": params["epochs"],
        "best_epoch": row["best_epoch"], "checkpoint_mode": row["checkpoint_mode"], "optimistic": row["optimistic"],
        "eps": params["eps"], "test_accuracy": row["clean_accuracy"],
        "static_ae_accuracy": row.get("static_ae_accuracy"),
        "adaptive_robust_accuracy": row["adaptive_robust_accuracy"], "fol_mean": row["fol_mean"],
        "input_shape": list(dataset.image_shape), "class_names": list(model.info.class_names or dataset.class_names),
        "command": _command(args), "source": "fine-tuned by this project's own `workbench retrain`",
    }
    if base.get("licence"):
        card["licence"] = base["licence"]
    save_checkpoint(out, tuned.module, model.info.arch, card)
    write_json(out.with_suffix(".json"), card, backup=False)
    return str(out)


# --- converge ---------------------------------------------------------------------------------------------

def _round_line(row: dict) -> str:
    extra = f", pool {row['pool_size']:,}, selected {row['selected']:,}" if "pool_size" in row else ""
    return (f"round {row['round']}: static AE {_pct(row.get('static_ae_accuracy'))}, adaptive robust "
            f"{_pct(row['adaptive_robust_accuracy'])}, clean {_pct(row['clean_accuracy'])}, mean FOL∞ "
            f"{_num(row['fol_mean'])}{extra} ({row['seconds']:.1f} s)")


def cmd_converge(args) -> int:
    from workbench.core.robustness.convergence import convergence_loop
    from workbench.core.robustness.pool import build_pool

    started = time.monotonic()
    if args.rounds < 1:
        raise _error(f"--rounds must be at least 1; got {args.rounds}.", "Run one round or more.")
    if not 0.0 <= args.requirement <= 1.0:
        raise _error(f"--requirement {args.requirement} is not an accuracy in [0, 1].", "Use e.g. 0.8.")
    _check_positive("--epochs", args.epochs, allow_none=False)
    _check_positive("--pool-inputs", args.pool_inputs)
    _check_positive("--report-inputs", args.report_inputs, allow_none=False)
    if (args.strategy is None) != (args.budget is None):
        raise _error("--strategy and --budget go together.", "Give both, or neither to use every success.")
    strategy = _parse_strategies(args.strategy, "--strategy")[0] if args.strategy else None
    budget = _parse_budget(args.budget) if args.budget else None
    model, dataset = _load(args)
    dataset.split("train")
    test = dataset.split("test")
    eps, eps_source = _resolve_eps(args, dataset)
    target = _ProjectTarget(args.project)
    key = _dataset_key(dataset)
    name = args.name or f"converge-{model.name}"
    holder: dict = {}

    def show(row):
        if "round" in row and not args.json:
            _say(holder, _round_line(row))

    def job(ctx):
        fp_test = build_pool(ctx, model, test, eps, seed=args.seed + 100, what="the test set")
        return fp_test, convergence_loop(ctx, model, dataset, eps, fp_test, rounds=args.rounds,
                                         requirement=args.requirement, epochs=args.epochs, strategy=strategy,
                                         budget=budget, seed=args.seed, plateau_stop=args.plateau_stop,
                                         pool_inputs=args.pool_inputs, report_subset=args.report_inputs)

    (fp_test, result), device = _run_job(args, job, show, holder)
    artifact = None
    if target:
        project = target.open(key)
        params = {**result.params, "model": model.name, "model_fingerprint": model.fingerprint(), "dataset": key,
                  "eps_source": eps_source, "met": result.met, "stop_reason": result.stop_reason,
                  "fp_test": fp_test.summary()}
        _save_run(project, name, "convergence", result.rounds, params, command=_command(args))
        artifact = name
        project.add_model(args.model)
    payload = {
        "model": model.name, "model_fingerprint": model.fingerprint(), "dataset": key, "eps": eps,
        "eps_source": eps_source, "requirement": args.requirement, "met": result.met,
        "stop_reason": result.stop_reason, "rounds": result.rounds, "fp_test": fp_test.summary(),
        "params": result.params, "artifact": artifact, "device": device,
        "seconds": round(time.monotonic() - started, 3),
    }
    last = result.rounds[-1]
    lines = [(f"stopped after round {last['round']}: {result.stop_reason}; requirement static AE accuracy > "
              f"{_pct(args.requirement)} {'met' if result.met else 'NOT met'} "
              f"(final {_pct(last.get('static_ae_accuracy'))}); eps {eps:g} ({eps_source}), fp_test "
              f"{len(fp_test):,} adversarials")]
    if artifact:
        lines.append(f"Stored as run {artifact!r} in {target.folder}.")
    lines.append(f"Took {payload['seconds']:.1f} s on {device}.")
    _emit(args, payload, "\n".join(lines))
    return 0


# --- experiment robot -------------------------------------------------------------------------------------

EXPERIMENT_COLUMNS = ("strategy", "budget", "seed", "selected", "budget_percent", "static_ae_accuracy",
                      "adaptive_robust_accuracy", "clean_accuracy", "fol_mean", "fol_median", "selected_fol_mean",
                      "best_epoch", "checkpoint_mode", "optimistic", "seconds")


def _mean_sd(values) -> tuple[float | None, float | None, int]:
    v = np.asarray([x for x in values if x is not None], dtype=np.float64)
    if not v.size:
        return None, None, 0
    return float(v.mean()), float(v.std(ddof=1)) if v.size > 1 else 0.0, int(v.size)


def experiment_table(result, metric: str) -> dict:
    """{strategy: {budget: {"mean", "sd", "runs"}}} of one metric over the seeds, in the grid's order."""
    out: dict = {}
    for row in result.rows:
        out.setdefault(row["strategy"], {}).setdefault(row["budget"], []).append(row.get(metric))
    return {s: {b: dict(zip(("mean", "sd", "runs"), _mean_sd(v))) for b, v in by.items()} for s, by in out.items()}


def _markdown(result) -> str:
    p, s = result.params, result.setup
    baseline = s["baseline"]
    budgets = list(dict.fromkeys(r["budget"] for r in result.rows))
    optimistic = p.get("checkpoint_mode") == "paper"
    mode = ("paper: the epoch with the best fp_test accuracy is kept — " + OPTIMISTIC_LABEL) if optimistic else \
        "clean: the epoch with the best accuracy on the held-out part of the pool is kept"
    pool = s["pool"]
    lines = [f"# RobOT experiment: {p.get('model', '?')} on {p.get('dataset', '?')}", "", "## Protocol", "",
             f"- model: {p.get('model', '?')} (weights {p.get('model_fingerprint', '?')})",
             f"- data: {p.get('dataset', '?')}",
             f"- eps (L∞): {s['eps']:g} ({p.get('eps_source', '')})",
             f"- pool: {pool['candidates']:,} successful FGSM/PGD adversarials ("
             + ", ".join(f"{a} {n:,}" for a, n in pool["by_attack"].items())
             + f") of {p.get('pool_attacked', 'the whole training set')}",
             f"- selectable: {s['selectable']:,}; held out for checkpointing: {s['heldout']:,}",
             f"- fp_test: {s['fp_test']['candidates']:,} successful adversarials of the test set against the original model",
             f"- preset: {p['preset']}, {_epochs(p['epochs'])} of fine-tuning from the original weights per run",
             f"- strategies: {', '.join(p['strategies'])}; budgets (% of the selectable pool): {', '.join(p['budgets'])}",
             f"- seeds: {', '.join(str(x) for x in p['seeds'])}",
             f"- checkpoint mode: {mode}",
             ("- adaptive robust accuracy: PGD-10 (α = ε/6, random start) against each model on "
              f"{baseline.get('adaptive_inputs', p.get('report_subset'))} test inputs"),
             (f"- baseline (original model): static AE accuracy {_pct(baseline.get('static_ae_accuracy'))}, "
              f"adaptive robust accuracy {_pct(baseline['adaptive_robust_accuracy'])}, clean accuracy "
              f"{_pct(baseline['clean_accuracy'])}, mean FOL∞ {_num(baseline['fol_mean'])}"), ""]
    titles = {"static_ae_accuracy": "Static AE accuracy (accuracy on fp_test)",
              "adaptive_robust_accuracy": "Adaptive robust accuracy (PGD-10 against the retrained model)",
              "clean_accuracy": "Clean test accuracy"}
    for metric, title in titles.items():
        table = experiment_table(result, metric)
        lines += [f"## {title}, mean ± sd over seeds (%)" + (" — " + OPTIMISTIC_LABEL if optimistic else ""), "",
                  "| strategy | " + " | ".join(budgets) + " |", "|---|" + "---|" * len(budgets)]
        for strategy, by in table.items():
            cells = []
            for b in budgets:
                c = by.get(b)
                cells.append("—" if not c or c["mean"] is None else f"{c['mean'] * 100:.1f} ± {c['sd'] * 100:.1f}")
            lines.append(f"| {strategy} | " + " | ".join(cells) + " |")
        lines.append("")
    return "\n".join(lines)


def write_experiment_outputs(result, out_dir) -> dict[str, str]:
    """Write robot_experiment.csv (one row per run), .md (protocol and mean ± sd tables) and .json into
    `out_dir`, each atomically; returns {"csv", "md", "json"} paths. `result` is an `ExperimentResult`
    whose `params` may also carry model, dataset, eps_source and pool_attacked for the protocol."""
    import csv
    import json

    from workbench.core.store import atomic_path

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    files = {"csv": out / "robot_experiment.csv", "md": out / "robot_experiment.md",
             "json": out / "robot_experiment.json"}
    attacks = sorted({a for r in result.rows for a in (r.get("static_ae_by_attack") or {})})
    with atomic_path(files["csv"]) as tmp, open(tmp, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(list(EXPERIMENT_COLUMNS) + [f"static_ae_accuracy_{a}" for a in attacks])
        for r in result.rows:
            by = r.get("static_ae_by_attack") or {}
            w.writerow([r.get(c) for c in EXPERIMENT_COLUMNS] + [by.get(a) for a in attacks])
    with atomic_path(files["md"]) as tmp:
        tmp.write_text(_markdown(result))
    with atomic_path(files["json"]) as tmp:
        from workbench.cli import _plain

        data = {"params": result.params, "setup": result.setup, "rows": result.rows,
                "tables": {m: experiment_table(result, m) for m in ("static_ae_accuracy", "adaptive_robust_accuracy",
                                                                    "clean_accuracy")}}
        tmp.write_text(json.dumps(data, indent=2, default=_plain))
    return {k: str(v) for k, v in files.items()}


def cmd_experiment(args) -> int:
    if args.protocol != "robot":
        raise _error("Name the protocol to run.", "Use `workbench experiment robot`.")
    return cmd_experiment_robot(args)


def cmd_experiment_robot(args) -> int:
    from workbench.core.robustness.experiment import robot_experiment
    from workbench.core.robustness.retraining import get_preset

    started = time.monotonic()
    strategies = _parse_strategies(args.strategies, "--strategies")
    budgets = [_parse_budget(b) for b in _parse_list(args.budgets, "--budgets")]
    seeds = _parse_seeds(args) if args.seeds or args.seed else [0, 1, 2]
    _check_checkpoint_and_preset(args)
    model, dataset = _load(args)
    dataset.split("train")
    dataset.split("test")
    eps, eps_source = _resolve_eps(args, dataset)
    target = _ProjectTarget(args.project)
    key = _dataset_key(dataset)
    out_dir = Path(args.out) if args.out else (target.folder / "experiments" / "robot" if target
                                               else Path("robot-experiment"))
    _check_creatable(out_dir)
    epochs = args.epochs or get_preset(args.preset).epochs
    name = args.name or f"robot-{model.name}"
    holder: dict = {}

    def show(row):
        if not args.json and "strategy" in row:
            _say(holder, _row_line(row), sys.stderr)

    result, device = _run_job(args, lambda ctx: robot_experiment(
        ctx, model, dataset, eps, strategies=strategies, budgets=budgets, seeds=seeds, preset=args.preset,
        epochs=args.epochs, checkpoint_mode=args.checkpoint, pool_inputs=args.pool_inputs,
        report_subset=args.report_inputs), show, holder)
    result.params.update({"model": model.name, "model_fingerprint": model.fingerprint(), "dataset": key,
                          "eps_source": eps_source, "epochs": epochs, "pool_inputs": args.pool_inputs,
                          "pool_attacked": (f"a seeded sample of {args.pool_inputs:,} training inputs"
                                            if args.pool_inputs and args.pool_inputs < len(dataset.split("train"))
                                            else f"all {len(dataset.split('train')):,} training inputs"),
                          "command": _command(args)})
    files = write_experiment_outputs(result, out_dir)
    artifact = None
    if target:
        project = target.open(key)
        _save_run(project, name, "experiment", result.rows, {**result.params, "setup": result.setup},
                  command=_command(args), files=files)
        artifact = name
        project.add_model(args.model)
    baseline = result.setup["baseline"]
    tables = {m: experiment_table(result, m) for m in ("static_ae_accuracy", "adaptive_robust_accuracy",
                                                         "clean_accuracy")}
    payload = {
        "model": model.name, "model_fingerprint": model.fingerprint(), "dataset": key, "eps": eps,
        "eps_source": eps_source, "strategies": strategies, "budgets": [str(b) for b in budgets], "seeds": seeds,
        "preset": args.preset, "epochs": epochs, "checkpoint_mode": args.checkpoint,
        "optimistic": args.checkpoint == "paper", "label": OPTIMISTIC_LABEL if args.checkpoint == "paper" else None,
        "setup": result.setup, "baseline": baseline, "rows": result.rows, "tables": tables, "params": result.params,
        "files": files, "artifact": artifact, "device": device, "seconds": round(time.monotonic() - started, 3),
    }
    lines = [(f"RobOT experiment: {model.name} on {key}, {len(result.rows)} runs "
              f"({len(strategies)} strategies × {len(budgets)} budgets × {len(seeds)} seeds), preset {args.preset}, "
              f"{_epochs(epochs)}")]
    lines += _setup_lines(result.setup, args.checkpoint)
    lines.append("original: static AE accuracy " + _pct(baseline.get("static_ae_accuracy")) + ", adaptive robust "
                 + _pct(baseline["adaptive_robust_accuracy"]) + ", clean " + _pct(baseline["clean_accuracy"]))
    budget_names = [str(b) for b in budgets]
    for metric, title in (("static_ae_accuracy", "Static AE accuracy"),
                          ("adaptive_robust_accuracy", "Adaptive robust accuracy")):
        lines.append(f"{title}, mean ± sd over seeds (%)" + (f" — {OPTIMISTIC_LABEL}" if payload["optimistic"] else ""))
        width = max(len(s) for s in strategies) + 2
        lines.append(" " * (width + 2) + "".join(b.rjust(14) for b in budget_names))
        for s in strategies:
            cells = [tables[metric][s].get(b) for b in budget_names]
            lines.append(f"  {s:<{width}}" + "".join(
                ("—" if not c or c["mean"] is None else f"{c['mean'] * 100:.1f} ± {c['sd'] * 100:.1f}").rjust(14)
                for c in cells))
    lines.append(f"Written: {files['csv']}, {files['md']}, {files['json']}")
    if artifact:
        lines.append(f"Stored as run {artifact!r} in {target.folder}.")
    lines.append(f"Took {payload['seconds']:.1f} s on {device}.")
    _emit(args, payload, "\n".join(lines))
    return 0


COMMANDS = {"attack": cmd_attack, "fol": cmd_fol, "select": cmd_select, "fuzz": cmd_fuzz, "retrain": cmd_retrain,
            "converge": cmd_converge, "experiment": cmd_experiment}

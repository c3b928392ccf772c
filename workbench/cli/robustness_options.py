"""What the robustness commands share: their options (ε, report subset, the retraining grid), the
pools they read and write, and the checks of strategies, budgets, seeds and presets.
"""

from __future__ import annotations

import math

from workbench.cli.arguments import integer
from workbench.cli.common import check_positive, error, parse_list

from workbench.core.robustness.scores import GRAD_L2_LABEL  # noqa: F401 - the commands print it

FOL_LABEL = "FOL∞ (FOSC)"
POOL_STRATEGIES = ("be-st", "km-st", "deepgini", "random", "mcp", "kmst-legacy")
FOL_STRATEGIES = ("be-st", "km-st", "kmst-legacy")


def add_eps(p) -> None:
    p.add_argument("--eps", metavar="E", help="L∞ attack budget in (0, 1], e.g. 0.1 or 8/255 (default: the "
                                              "dataset's: mnist 0.3, fashion-mnist 0.1, svhn 8/255, cifar10 0.01)")
    p.add_argument("--eps-preset", metavar="PRESET",
                   help="a named budget instead of --eps: robot-mnist-eps (0.3) or cifar10-8/255")


def add_report(p) -> None:
    p.add_argument("--report-inputs", type=integer(1, 10**7), default=1000, metavar="N",
                   help="seeded subset of test inputs the adaptive PGD attack and the FOL curve use (default 1000)")


def add_grid_options(p, strategies: str | None, budgets: str | None) -> None:
    if strategies:
        p.add_argument("--strategies", default=strategies, metavar="LIST",
                       help=f"comma-separated (default {strategies})")
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
    p.add_argument("--epochs", type=integer(1, 10_000), metavar="N", help="fine-tuning epochs (default: the preset's)")
    p.add_argument("--checkpoint", default="clean", help="clean (best epoch on a held-out part of the pool, default) "
                                                         "or paper (best epoch on fp_test: optimistic)")
    p.add_argument("--pool-inputs", type=integer(1, 10**9), metavar="N",
                   help="attack a seeded sample of N training inputs")
    add_eps(p)
    add_report(p)


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
    """(ε, where it came from): --eps, --eps-preset, a stored artifact's ε, or the dataset default
    (docs/methods/fol-and-selection.md#attack-budgets-per-dataset)."""
    from workbench.core.errors import WorkbenchError
    from workbench.core.robustness.attacks import DATASET_EPS, EPS_PRESETS, dataset_eps_and_source

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
        try:
            return dataset_eps_and_source(dataset)
        except WorkbenchError:
            raise error(f"There is no default attack budget for dataset {dataset.name!r} (images of "
                        f"{dataset.image_shape[0]} channels).",
                        f"Pass --eps (in (0, 1], e.g. --eps 0.1) or --eps-preset; defaults exist for "
                        f"{', '.join(DATASET_EPS)}, and for grey and colour images.") from None
    if stored is not None and not math.isclose(eps, float(stored), rel_tol=1e-9, abs_tol=1e-12):
        raise error(f"{stored_what} was made with eps={float(stored):g}, but eps={eps:g} was asked for.",
                    "FOL∞ needs the budget that produced the inputs: leave --eps out, or make a new pool.")
    return eps, source


def check_loss_mode(mode: str) -> str:
    from workbench.core.robustness.scores import check_loss_mode as check

    check(mode)
    return mode


def save_pool(project, name: str, pool, **how) -> str:
    """Store `pool` in `project` under `name` (core `save_pool`); returns the name."""
    from workbench.core.robustness import pool as pools

    pools.save_pool(project, name, pool, **how)
    return name


def load_pool(project, name: str, generated_too: bool = False):
    """The pool `name` of `project`; a clear error naming the pools there (and, for a command that takes them,
    the generated sets) when it has none of that name."""
    from workbench.core.generation.generated import ROLE as GENERATED_ROLE
    from workbench.core.robustness import pool as pools

    if name not in project.artifacts():
        roles = ("candidate-pool", GENERATED_ROLE) if generated_too else ("candidate-pool",)
        usable = [n for n, e in project.artifacts("testset").items() if e.get("provenance", {}).get("role") in roles]
        what = "pool or generated set" if generated_too else "pool"
        raise error(f"The project has no {what} named {name!r}.",
                    f"{what[:1].upper()}{what[1:]}s in {project.folder}: {', '.join(usable)}." if usable else
                    "Make a pool with `workbench attack --project DIR`" + (
                        ", or a generated set with `workbench generate --project DIR`." if generated_too else "."))
    return pools.load_pool(project, name)


def load_generated_misbehaviours(project, name: str, model, dataset) -> dict | None:
    """The arrays of the generated set `name` of `project` (None when `name` is not a generated set), checked
    against the model and the data it is to retrain, and holding at least one misbehaviour of that model."""
    from workbench.core.errors import WorkbenchError
    from workbench.core.execution.jobs import JobContext
    from workbench.core.generation.generated import ROLE as GENERATED_ROLE
    from workbench.core.generation.generated import generated_for_model
    from workbench.core.robustness.pool import generated_misbehaviours

    if project.artifacts("testset").get(name, {}).get("provenance", {}).get("role") != GENERATED_ROLE:
        return None
    try:
        arrays = generated_for_model(JobContext("cpu").quiet(), project, name, model, dataset)
    except WorkbenchError as exc:
        raise error(exc.message, exc.hint) from None
    if not len(generated_misbehaviours(arrays)[0]):
        raise error(f"Generated set {name!r} holds no misbehaviour of {model.name!r} to retrain with.",
                    "Generate with a larger budget or more seeds, or choose another set.")
    return arrays


def check_pool_model(pool, model, name: str) -> None:
    stored = pool.params.get("model_fingerprint")
    if stored and stored != model.fingerprint():
        raise error(f"Pool {name!r} was made against model {pool.params.get('model')!r} with other weights "
                    f"than {model.name!r}.", "Use the model the pool was made against, or make a new pool.")


def check_pool_dataset(pool, dataset, name: str) -> None:
    stored = pool.params.get("dataset")
    if stored and stored != dataset.spec:
        raise error(f"Pool {name!r} was made from dataset {stored!r}, not {dataset.spec!r}.",
                    f"Pass --data {stored}.")


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
    resolve_budget(budget, None)
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

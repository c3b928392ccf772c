"""The robustness sub-commands of the command line (spec/robustness.md): attack, fol, select, fuzz,
retrain, converge and `experiment robot`.

Each command loads what it needs, refuses bad input before any work starts, runs the core job with
the terminal progress bar, and writes to the project (or to files) only once the job has finished,
so a failure or a cancel leaves nothing half-written. `--json` prints the results as one JSON
object; otherwise a short human-readable summary goes to stdout.

The RobOT code's gradient-norm "FOL" is always called "grad-L2 (RobOT fuzzer FOL)" here (§2.3);
"FOL∞" is the FOSC L∞ form of §2.1.

This module only registers the commands; they live in `cli_pools` (attack, fol, select, fuzz) and
`cli_retraining` (retrain, converge, experiment), sharing the option parsing and checks of
`cli_robustness_common`; the experiment report is written by `core.robustness.experiment_report`.
"""

from __future__ import annotations

from workbench.cli_pools import cmd_attack, cmd_fol, cmd_fuzz, cmd_select
from workbench.cli_retraining import cmd_converge, cmd_experiment, cmd_retrain

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
    robot.add_argument("--out", metavar="DIR", help="folder for robot_experiment.csv/.md/.json/.png (default "
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


COMMANDS = {"attack": cmd_attack, "fol": cmd_fol, "select": cmd_select, "fuzz": cmd_fuzz, "retrain": cmd_retrain,
            "converge": cmd_converge, "experiment": cmd_experiment}

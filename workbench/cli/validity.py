"""`workbench train-validators` and `workbench validity`: the models behind the automated validity
proxies, and the proxies' verdicts on a test set (docs/methods/validity.md). They are proxies: every
line printed says so.
"""

from __future__ import annotations

from pathlib import Path

from workbench.cli.arguments import integer, text
from workbench.cli.common import add_common, add_loading, check_creatable, command_line, emit, error, run_job


def add_parsers(sub) -> None:
    train = sub.add_parser("train-validators", help="train the validity proxies' models for a dataset (two VAEs and "
                                                    "an oracle classifier) and fit their thresholds")
    train.add_argument("--data", required=True, metavar="NAME", type=text("dataset"), help="dataset name or path")
    train.add_argument("--reference", metavar="NAME", type=text("reference dataset"),
                       help="another domain's dataset for the DAIV threshold (default: mnist-5k for Fashion-MNIST, "
                            "fashion-mnist for the MNIST sets)")
    train.add_argument("--out", required=True, metavar="DIR", type=text("output folder"), help="the folder to write")
    train.add_argument("--epochs", type=integer(1, 100_000), default=50, help="epochs of each VAE (default 50)")
    train.add_argument("--oracle-arch", type=text("architecture"),
                       help="the oracle classifier's architecture (default: lenet4 for 28×28 grey images, "
                            "resnet20 for 3×32×32, torchvision:resnet18 for other colour sizes)")
    train.add_argument("--oracle-epochs", type=integer(1, 10_000), default=8, help="the oracle's epochs (default 8)")
    train.add_argument("--full-precision", action="store_true", help="store the VAEs at float32 (default float16)")
    train.add_argument("--refit", action="store_true",
                       help="keep the models of the validator set in --out and fit its thresholds again")
    add_loading(train)
    add_common(train)
    train.set_defaults(handler=cmd_train_validators)

    show = sub.add_parser("validity", help="the automated validity proxies (SelfOracle, DAIV, oracle classifier) "
                                           "on a test set, per generator and extent where it has them")
    show.add_argument("--testset", required=True, metavar="NAME", type=text("test set"),
                      help="a test set of the project (a generated set, a pool, a split …)")
    show.add_argument("--data", metavar="NAME", type=text("dataset"),
                      help="the dataset whose classes label the set (default: the project's)")
    show.add_argument("--validators", metavar="DIR", type=text("validator folder"),
                      help="a validator folder (default: the bundled set for the dataset)")
    show.add_argument("--quantile", type=float, default=0.9999,
                      help="the SelfOracle gamma quantile (default 0.9999; the card lists the fitted ones)")
    add_loading(show)
    add_common(show)
    show.set_defaults(handler=cmd_validity)


def cmd_train_validators(args) -> int:
    from workbench.core.data.registry import load_dataset
    from workbench.core.generation.validators import REFERENCE_DOMAIN, refit_validators, train_validators

    dataset = load_dataset(args.data, download=args.download)
    reference_name = args.reference or REFERENCE_DOMAIN.get(dataset.spec)
    if not reference_name:
        raise error(f"No reference domain is known for {dataset.name}.",
                    "Name a dataset of another domain with the same image size: --reference NAME.")
    reference = load_dataset(reference_name, download=args.download)
    out = Path(args.out).expanduser()
    if args.refit:
        card, _ = run_job(args, lambda ctx: refit_validators(ctx, out, dataset, reference, command_line(args)))
        return _show_card(args, card, out)
    check_creatable(out)
    card, _ = run_job(args, lambda ctx: train_validators(
        ctx, dataset, reference, out, epochs=args.epochs, oracle_arch=args.oracle_arch,
        oracle_epochs=args.oracle_epochs, seed=args.seed, half=not args.full_precision, command=command_line(args)))
    return _show_card(args, card, out)


def _show_card(args, card, out: Path) -> int:
    lines = [f"Validity proxies for {card.dataset} (proxies, not verdicts of validity), in {out}:"]
    lines += [f"  {label}: {value}" for label, value in card.summary()]
    emit(args, {**card.to_dict(), "path": str(out)}, "\n".join(lines))
    return 0


def cmd_validity(args) -> int:
    from workbench.core.generation.validity_report import judge_testset

    report, _ = run_job(args, lambda ctx: judge_testset(ctx, args.project, args.testset, data=args.data,
                                                        validators=args.validators, quantile=args.quantile,
                                                        download=args.download))
    emit(args, report.to_dict(), report.text())
    return 0

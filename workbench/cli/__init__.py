"""The command line: `workbench [gui|info|train|evaluate|importance|coverage|attack|fol|uncertainty|select|fuzz|
retrain|converge|experiment|train-generator|generators|generate|train-validators|validity|label-stats|label-export|
label-import|compare|combine] ...`; no sub-command opens the GUI.

One module per command group registers its sub-commands (`add_parsers`) beside the commands
themselves; `common` holds what they share. Every command calls the same core job functions the
GUI runs, with a terminal progress bar in place of the jobs panel. A `WorkbenchError` is printed as
a message and a hint, never a traceback, and the exit status is non-zero.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys

from workbench.cli import (comparison, coverage, generation, gui, importance, info, labeling, pools, retraining,
                           training, uncertainty, validity)
from workbench.cli.common import EXIT_CANCELLED, EXIT_ERROR

GROUPS = (gui, info, training, importance, coverage, pools, uncertainty, retraining, generation, validity, labeling,
          comparison)
#: Commands that do not compute with models and data, so plugins are not loaded for them.
WITHOUT_PLUGINS = ("gui", "info", "label-import")


class UsageError(Exception):
    """A command line argparse refuses: printed like every other error, with where to read the options."""

    def __init__(self, message: str, prog: str):
        super().__init__(message)
        self.prog = prog


class Parser(argparse.ArgumentParser):
    """An argparse parser whose refusals reach `main` (and come out as `error: …`, exit 2)."""

    def error(self, message: str):
        raise UsageError(message, self.prog)


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="workbench", description="DL Testing Workbench")
    sub = parser.add_subparsers(dest="command")
    for group in GROUPS:
        group.add_parsers(sub)
    return parser


@contextlib.contextmanager
def _document_alone_on_stdout(args):
    """With --json, stdout carries the JSON document and nothing else: what anything else prints while the command
    runs (a plugin, a library, Ray's "(raylet) A worker died…") goes to stderr, where it stays visible. The
    document goes to the real stdout, kept in `args.document_out` (`common.emit`)."""
    if not getattr(args, "json", False):
        yield
        return
    args.document_out = sys.stdout
    with contextlib.redirect_stdout(sys.stderr):
        yield


def main(argv: list[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)
    except UsageError as exc:
        print(f"error: {exc}\n  `{exc.prog} --help` lists the options.", file=sys.stderr)
        return EXIT_ERROR
    args.argv = list(sys.argv[1:] if argv is None else argv)  # recorded in model cards as the command
    if args.command is None:
        args = build_parser().parse_args(["gui"])
        args.argv = []
    from workbench.core.errors import Cancelled, WorkbenchError

    try:
        with _document_alone_on_stdout(args):
            if args.command not in WITHOUT_PLUGINS:
                from workbench.core.plugins import load_plugins

                load_plugins()
            return args.handler(args)
    except WorkbenchError as exc:
        print(f"error: {exc.message}", file=sys.stderr)
        if exc.hint:
            print(f"  {exc.hint}", file=sys.stderr)
        if exc.details:
            print("  " + exc.details.replace("\n", "\n  "), file=sys.stderr)
        return EXIT_ERROR
    except BrokenPipeError:  # output piped into `head` and the like: not an error
        sys.stdout = open(os.devnull, "w")
        return 0
    except (KeyboardInterrupt, Cancelled):
        print("cancelled; nothing was written.", file=sys.stderr)
        return EXIT_CANCELLED

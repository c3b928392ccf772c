"""`workbench gui`: the one command that opens the GUI (the only place the CLI imports it).
"""

from __future__ import annotations

from workbench.cli.arguments import output_file


def add_parsers(sub) -> None:
    gui = sub.add_parser("gui", help="open the GUI (the default)")
    gui.add_argument("--project", metavar="DIR", help="project folder (default: the demo project)")
    gui.add_argument("--view", default=None,
                     help="view to show first: data, model, training, importance, coverage, robustness, generators, generation")
    gui.add_argument("--screenshot", metavar="PNG", type=output_file,
                     help="render the window with real data, save it, exit")
    gui.add_argument("--long-jobs", choices=("process", "thread"), default="process",
                     help="run long jobs (training, coverage, relevance over a split) in a worker process, "
                          "so the window never waits for them (the default), or on a thread of the window's")
    gui.set_defaults(handler=cmd_gui)


def cmd_gui(args) -> int:
    from workbench.gui.shell.app import run_gui

    return run_gui(project=getattr(args, "project", None), view=getattr(args, "view", None),
                   screenshot=getattr(args, "screenshot", None), long_jobs=getattr(args, "long_jobs", "process"))

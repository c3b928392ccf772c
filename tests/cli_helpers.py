"""Running `workbench.cli.main` in-process and checking how it fails, shared by the CLI tests."""

from __future__ import annotations

import json
import re

from workbench.cli import EXIT_ERROR, main


def run_cli(capsys, *argv) -> tuple[int, str, str]:
    rc = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return rc, out, err


def run_json(capsys, *argv) -> dict:
    rc, out, err = run_cli(capsys, *argv, "--json")
    assert rc == 0, err
    return json.loads(out)


def assert_clean_failure(rc: int, err: str, *words: str) -> None:
    """Exit 2 with an error message and no traceback; a progress bar (cleared with \\r) may come before it."""
    assert rc == EXIT_ERROR, err
    assert re.match(r"(.*[\r\n])?error: ", err, re.DOTALL) and "Traceback" not in err, err
    for w in words:
        assert w in err, f"{w!r} not in {err!r}"

"""Argument types that refuse what cannot work before a command starts, with argparse's usage error.

A count beyond its bound would allocate for hours (`--draws 10000000`) or never end, a learning rate
of NaN trains nothing, and an output path that cannot be written would fail only after the whole
run: each is refused here, naming the bound or the reason.
"""

from __future__ import annotations

import argparse
import math
import tempfile
from pathlib import Path


def integer(low: int, high: int):
    """An int in [low, high]."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"{value} is outside {low:,}–{high:,}")
        return value

    parse.__name__ = "whole number"
    return parse


def real(low: float, high: float, low_open: bool = False):
    """A finite float in [low, high] ((low, high] with `low_open`)."""
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
        if not math.isfinite(value) or value > high or value < low or (low_open and value == low):
            bound = f"{'above' if low_open else 'at least'} {low:g} and at most {high:g}"
            raise argparse.ArgumentTypeError(f"{text} is not {bound}")
        return value

    parse.__name__ = "number"
    return parse


def text(what: str):
    """A non-empty string."""
    def parse(value: str) -> str:
        if not value.strip():
            raise argparse.ArgumentTypeError(f"an empty {what} names nothing")
        return value

    parse.__name__ = what
    return parse


def _writable_place(path: Path) -> None:
    """Refuse a path whose nearest existing folder does not take a new file."""
    place = path.parent
    while not place.exists():
        place = place.parent
    if not place.is_dir():
        raise argparse.ArgumentTypeError(f"{path} lies under {place}, which is a file, not a folder")
    try:
        with tempfile.TemporaryFile(dir=place):
            pass
    except OSError as exc:
        raise argparse.ArgumentTypeError(f"cannot write in {place}: {exc.strerror or exc}") from None


def output_file(value: str) -> str:
    """A file the command will write: not a folder, in a place that takes new files."""
    path = Path(text("output path")(value)).expanduser()
    if path.is_dir():
        raise argparse.ArgumentTypeError(f"{path} is a folder; give a file name")
    _writable_place(path)
    return str(path)


def output_folder(value: str) -> str:
    """A folder the command will write into (made when missing)."""
    path = Path(text("output folder")(value)).expanduser()
    if path.exists() and not path.is_dir():
        raise argparse.ArgumentTypeError(f"{path} is a file, not a folder")
    _writable_place(path / "x")
    return str(path)

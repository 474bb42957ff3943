"""Running one subcommand: what ``seekdata COMMAND`` and ``python -m seekdata.tools.X`` share.

A tool registers its parser with ``add_parser(subparsers)`` and ``set_defaults(run=...)``; a
``ValueError``, ``TypeError`` or ``OSError`` its ``run(args)`` raises is printed on stderr as
``seekdata <command>: error: ...`` with exit status 2 (argparse's usage errors exit 2 too), and
so is a missing optional package, named with the extra that installs it.
Tools import this module, never :mod:`seekdata.tools.cli`, so no import goes in a circle.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from typing import Any

#: A function that registers one subcommand on argparse's subparsers object.
AddParser = Callable[[Any], None]


def build_parser(adders: Sequence[AddParser]) -> argparse.ArgumentParser:
    """The ``seekdata`` argument parser with the subcommands ``adders`` register."""
    parser = argparse.ArgumentParser(
        prog="seekdata", description="Tools for exactly resumable PyTorch training data."
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for add in adders:
        add(subparsers)
    return parser


def run(parser: argparse.ArgumentParser, argv: Sequence[str] | None) -> int:
    """Parse ``argv`` (default ``sys.argv[1:]``) and run the chosen command; the exit status."""
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help(sys.stderr)
        return 2
    try:
        status: int = args.run(args)
    except (ValueError, TypeError, OSError) as exc:
        print(f"seekdata {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except ImportError as exc:
        missing = missing_extra(exc)
        if missing is None:
            raise  # not an optional package: a bug, shown with its traceback
        print(f"seekdata {args.command}: error: {missing}", file=sys.stderr)
        return 2
    return status


#: optional packages seekdata's tools import -> the extra that installs them
EXTRAS = {
    "braceexpand": "webdataset",
    "webdataset": "webdataset",
    "PIL": "webdataset",
    "matplotlib": "bench",
}


def missing_extra(exc: ImportError) -> str | None:
    """What to say when ``exc`` (or the error it was raised from) is a missing optional
    package: which package, and the extra that installs it; None for any other ImportError."""
    cause: BaseException | None = exc
    while isinstance(cause, ImportError):
        package = (cause.name or "").partition(".")[0]
        if package in EXTRAS:
            extra = EXTRAS[package]
            return (
                f"this needs the optional package {package!r}, which is not installed; "
                f"install the {extra!r} extra: pip install -e '.[{extra}]' in a clone of "
                f"seekdata (pip install 'seekdata[{extra}]' once seekdata is on PyPI)"
            )
        cause = cause.__cause__
    return None


def main_of(name: str, add: AddParser, argv: Sequence[str] | None) -> int:
    """``python -m seekdata.tools.<tool> ...``: the same as ``seekdata <name> ...``."""
    return run(build_parser([add]), [name, *(sys.argv[1:] if argv is None else argv)])

"""Running one subcommand: what ``seekdata COMMAND`` and ``python -m seekdata.tools.X`` share.

A tool registers its parser with ``add_parser(subparsers)`` and ``set_defaults(run=...)``; a
``ValueError``, ``TypeError`` or ``OSError`` its ``run(args)`` raises is printed on stderr as
``seekdata <command>: error: ...`` with exit status 2 (argparse's usage errors exit 2 too).
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
    return status


def main_of(name: str, add: AddParser, argv: Sequence[str] | None) -> int:
    """``python -m seekdata.tools.<tool> ...``: the same as ``seekdata <name> ...``."""
    return run(build_parser([add]), [name, *(sys.argv[1:] if argv is None else argv)])

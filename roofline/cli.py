"""The ``roofline`` command: one subcommand per module of :mod:`roofline.commands`.

Each command module exposes ``register(subparsers)``, which adds its parser and sets
``func`` to a function ``run(args) -> int``. Input errors (any
:class:`roofline.errors.RooflineError`, a ValueError) print one line,
``roofline <command>: error: <message>``, on stderr and exit with status 2, as
argparse does for a bad option; so does output that cannot be written (a full disk,
``> /dev/full``). Status 1 is a failed check (``roofline validate``, ``roofline prove``).
SIGINT (Ctrl-C) and SIGTERM stop a command with one line on stderr and status 130 or 143
(128 + the signal), after removing any output file being written (no partial file is left).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import os
import signal
import sys
import threading
from collections.abc import Iterator, Sequence
from typing import Any, NoReturn

from ._checks import name_key
from .errors import RooflineError

#: Command modules under roofline.commands, in the order ``roofline --help`` lists them
#: (``presets`` adds ``models`` and ``accelerators``).
COMMANDS = ("report", "fit", "simulate", "plan", "calibrate", "validate", "prove", "plot", "presets")


class OneLineParser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one line on stderr (no usage block), exit status 2; a flag is taken only
    as spelled in full (no prefix matching: ``--max-num-seq`` is an unknown flag, not ``--max-num-seqs``)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {one_line(message)} (see {self.prog} --help)\n")


def one_line(text: str) -> str:
    """``text`` with every line break or other unprintable character escaped (``\\n``), so that an
    error is one line on stderr whatever the value it quotes (a stray ``\\r`` in an option, a
    library's message with a line break)."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser with every subcommand registered."""
    parser = OneLineParser(
        prog="roofline",
        description="Analytic model of LLM decode serving: roofline formulas, an exact "
        "reference scheduler, and proofs of the lesson's claims.",
    )
    from . import __version__

    parser.add_argument("--version", action="version", version=f"roofline {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=OneLineParser)
    for name in COMMANDS:
        importlib.import_module(f"roofline.commands.{name}").register(sub)
    for command in sub.choices.values():
        _names_by_key(command)
    return parser


def _names_by_key(parser: argparse.ArgumentParser) -> None:
    """Read every option with a list of named choices (``--policy``, ``--engine``, ``--format``...) as the
    library reads preset names: stripped and lower-cased (:func:`roofline._checks.name_key`), so that
    ``--policy Serial`` is ``--policy serial`` (docs/conventions.md, "Names")."""
    for action in parser._actions:
        if not action.choices or not all(isinstance(c, str) for c in action.choices):
            continue
        if isinstance(action, argparse._SubParsersAction):  # pragma: no cover - subcommands are not nested
            continue
        action.type = _keyed(action.type)


def _keyed(convert: Any) -> Any:
    def parse(text: str) -> Any:
        key = name_key(text)
        return key if convert is None else convert(key)

    return parse


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; return the exit status (0 ok, 1 a failed check, 2 bad input or output that cannot
    be written, 130 / 143 stopped by SIGINT / SIGTERM)."""
    parser = build_parser()
    args, unknown = parser.parse_known_args(argv)
    if unknown:  # named by the subcommand's parser, so that the message points to that subcommand's --help
        sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        named = sub.choices.get(str(getattr(args, "command", None)), parser)
        named.error(f"unrecognized arguments: {' '.join(unknown)}")
    if getattr(args, "func", None) is None:
        print("roofline: error: a command is required (see roofline --help)", file=sys.stderr)
        return 2
    try:
        with _terminated_as_interrupt():
            status = int(args.func(args) or 0)
            sys.stdout.flush()
        return status
    except RooflineError as exc:
        print(f"roofline {args.command}: error: {one_line(str(exc))}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # e.g. `roofline report | head`: the reader has all it wanted
        _silence_stdout()
        return 0
    except OSError as exc:  # e.g. `roofline report > /dev/full`: the output could not be written
        _silence_stdout()
        print(f"roofline {args.command}: error: cannot write the output: {exc.strerror or exc}", file=sys.stderr)
        return 2
    except _Terminated as exc:  # SIGINT (Ctrl-C) or SIGTERM: every file being written was removed on the way out
        print(f"roofline {args.command}: {exc.name}: stopped; no output file was left half-written", file=sys.stderr)
        return 128 + exc.signum


class _Terminated(BaseException):  # noqa: N818 - a signal, as KeyboardInterrupt, not an error
    """SIGINT or SIGTERM, raised where the program is, so that ``finally`` blocks (and
    :func:`roofline._io.atomic_write`, which removes its temporary file) run before the exit."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum
        self.name = signal.Signals(signum).name


@contextlib.contextmanager
def _terminated_as_interrupt() -> Iterator[None]:
    """SIGINT and SIGTERM raise :class:`_Terminated` while the command runs (the main thread only:
    elsewhere signals cannot be caught, and the defaults stay); the previous handlers come back after."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: Any) -> None:
        raise _Terminated(signum)

    previous = {s: signal.signal(s, handler) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for s, h in previous.items():
            signal.signal(s, h)


def _silence_stdout() -> None:
    """Point stdout at /dev/null so that the interpreter's final flush cannot fail a second time."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):  # pragma: no cover - stdout without a file descriptor
        pass


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

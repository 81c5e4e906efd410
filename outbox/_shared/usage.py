"""What both commands do the same way on a command line: one-line usage errors, quiet pipes.

- A usage error is one line naming the option as typed, with a hint to
  ``--help``, and exit code 2 (argparse's default prints its usage block).
- An argument that is not valid UTF-8 (a name typed in a Latin-1 terminal)
  is a usage error, before it can reach a query or a print.
- Standard output closed early by its reader (``| head -1``, ``| true``)
  ends the command quietly, as Unix tools do, instead of a traceback.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence

EXIT_USAGE = 2


def usage_line(prog: str, message: str) -> str:
    """``prog: error: message (see `prog --help`)``, with a hint where argparse is terse."""
    if "expected one argument" in message:
        message += " (a value starting with '-' goes after '=', as --older-than=-1d)"
    return f"{prog}: error: {message} (see `{prog} --help`)\n"


class OneLineParser(argparse.ArgumentParser):
    """argparse, with every usage error reported as :func:`usage_line` and exit code 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(EXIT_USAGE, usage_line(self.prog, message))


def undecodable(argv: Sequence[str]) -> str | None:
    """The first argument that is not valid UTF-8 (Python keeps its bytes as surrogates)."""
    for arg in argv:
        try:
            arg.encode("utf-8")
        except UnicodeEncodeError:
            return arg.encode("utf-8", "surrogateescape").decode("ascii", "backslashreplace")
    return None


def quiet_pipe(run: Callable[[], int]) -> int:
    """``run()``, its output flushed; a reader that went away ends it quietly with 0.

    After a broken pipe, standard output is pointed at /dev/null so that the
    interpreter's own flush at exit does not complain a second time.
    """
    try:
        code = run()
        sys.stdout.flush()
        return code
    except BrokenPipeError:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        return 0

"""What both commands do the same way on a command line: one-line usage errors, quiet pipes.

- A usage error is one line naming the option as typed, with a hint to
  ``--help``, and exit code 2 (argparse's default prints its usage block).
- An argument that is not valid UTF-8 (a name typed in a Latin-1 terminal)
  is a usage error, before it can reach a query or a print.
- Standard output closed early by its reader (``| head -1``, ``| true``)
  ends the command quietly, as Unix tools do, instead of a traceback.
- Standard output closed before the start (``>&-``) stops the command
  before it does anything, and one that cannot be written (``> /dev/full``)
  ends it with exit code 1: one line each on standard error.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any

EXIT_USAGE = 2
EXIT_FAILURE = 1


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
    prog = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else "outbox"
    if sys.stdout is None:
        sys.stderr.write(f"{prog}: error: standard output is closed; nothing was done "
                         "(point it at /dev/null to drop what the command prints)\n")
        return EXIT_FAILURE
    stdout = sys.stdout
    sys.stdout = _Guarded(stdout)
    try:
        code = run()
        sys.stdout.flush()
        return code
    except BrokenPipeError:
        _to_devnull(stdout)
        return 0
    except _WriteFailed as exc:
        _to_devnull(stdout)
        sys.stderr.write(f"{prog}: error: cannot write to standard output: {exc}\n")
        return EXIT_FAILURE
    finally:
        sys.stdout = stdout


class _WriteFailed(Exception):
    """Standard output refused what the command printed (a full disk, a closed descriptor)."""


class _Guarded:
    """Standard output, with its write errors told apart from every other OSError."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        try:
            return int(self._stream.write(text))
        except BrokenPipeError:
            raise
        except OSError as exc:
            raise _WriteFailed(exc.strerror or str(exc)) from exc

    def flush(self) -> None:
        try:
            self._stream.flush()
        except BrokenPipeError:
            raise
        except OSError as exc:
            raise _WriteFailed(exc.strerror or str(exc)) from exc

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def _to_devnull(stream: Any) -> None:
    """So that the interpreter's own flush at exit does not fail a second time."""
    try:
        fileno = stream.fileno()
    except (OSError, ValueError, AttributeError):
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, fileno)
    os.close(devnull)

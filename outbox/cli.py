"""The ``outbox`` administration command.

Each subcommand lives in its own module under ``outbox._cli`` and exposes
``register(subparsers)``, which adds its parser and sets ``func`` to a
function taking the parsed arguments and returning an exit code.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

import psycopg
from psycopg.conninfo import conninfo_to_dict

from outbox import __version__
from outbox._cli import common
from outbox._cli.common import EXIT_FAILURE, EXIT_USAGE, CommandFailed, UsageError
from outbox._shared.dsn import resolve_dsn
from outbox._shared.text import first_line, printable
from outbox._shared.usage import OneLineParser, quiet_pipe, undecodable, usage_line
from outbox.errors import OutboxError

_COMMANDS = ("migrate", "endpoints", "status", "show", "events", "dead", "replay", "purge",
             "grants", "web", "demo")


_Parser = OneLineParser


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="outbox", description="Administer the outbox: endpoints, "
                     "dead letters, replays, schema.")
    parser.add_argument("--version", action="version", version=f"outbox {__version__}")
    common.add_dsn_option(parser)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True
    import importlib
    for name in _COMMANDS:
        module = importlib.import_module(f"outbox._cli.{name}_cmd")
        module.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    return quiet_pipe(lambda: _main(sys.argv[1:] if argv is None else list(argv)))


def _main(argv: list[str]) -> int:
    bad = undecodable(argv)
    if bad is not None:
        print(usage_line("outbox", f"argument '{bad}' is not valid UTF-8"), end="",
              file=sys.stderr)
        return EXIT_USAGE
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args))
    except UsageError as exc:
        action = getattr(args, "action", None) or getattr(args, "endpoints_command", None)
        words = ["outbox", args.command, action or ""]
        print(usage_line(" ".join(w for w in words if w), str(exc)), end="", file=sys.stderr)
        return EXIT_USAGE
    except (CommandFailed, OutboxError) as exc:
        print(printable(f"outbox: {exc}"), file=sys.stderr)
        return EXIT_FAILURE
    except psycopg.Error as exc:
        message = (denied(exc, getattr(args, "dsn", None))
                   if isinstance(exc, psycopg.errors.InsufficientPrivilege)
                   else f"database error: {first_line(exc)}")
        print(printable(f"outbox: {message}"), file=sys.stderr)
        return EXIT_FAILURE
    except KeyboardInterrupt:
        return 130


def denied(exc: psycopg.errors.InsufficientPrivilege, dsn: str | None) -> str:
    """A refused privilege as what the role lacks and where its grants come from.

    A read-only role (``outbox grants --viewer``) meets this on a command that
    writes, or reads what it may not (endpoint secrets); a role made by hand
    meets it anywhere. The server names the object; the role is the one the
    connection string names, else libpq's ``PGUSER``.
    """
    try:
        role = conninfo_to_dict(resolve_dsn(dsn)).get("user") or os.environ.get("PGUSER")
    except psycopg.Error:
        role = None
    who = f"role {role}" if role else "this role"
    return (f"{who} lacks a privilege this command needs ({first_line(exc)}); "
            "`outbox grants` prints the privileges of each role (`--viewer ROLE`: "
            "reading only), to be applied by the schema's owner")


if __name__ == "__main__":
    sys.exit(main())

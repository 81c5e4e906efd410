"""``outbox migrate [--dry-run | --check] [--inbox-only]``: create or upgrade the schema.

``--dry-run`` prints the steps that would run and changes nothing;
``--check`` exits 0 when the schema is current and 1 when steps are pending
(a deploy gate; on a database made by ``--inbox-only`` it judges the inbox
alone), or when an object of the schema is bound to code of another schema
than pg_catalog and outbox (:func:`bound_outside`). Both only read: no lock
is taken.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

import psycopg

from outbox._cli import common
from outbox._shared.databases import Database
from outbox._shared.dsn import KEEPALIVES, server_options, without_passwords
from outbox._shared.text import first_line, printable
from outbox.errors import OutboxError
from outbox.migrate import (
    LOCK_ATTEMPTS,
    LOCK_TIMEOUT,
    known_versions,
    migrate,
    plan,
    read_state,
    script,
)
from outbox.sql import queries


def register(sub: Any) -> None:
    parser = sub.add_parser("migrate", help="create or upgrade the outbox schema")
    common.add_dsn_option(parser)
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--dry-run", action="store_true",
                      help="print the steps that would run; change nothing")
    mode.add_argument("--sql", action="store_true",
                      help="print the SQL that brings the schema (of --from, or of the "
                      "database) to the current version, for a migration tool; change nothing")
    mode.add_argument("--check", action="store_true",
                      help="exit 0 when the schema is current, 1 when steps are pending")
    parser.add_argument("--from", type=_version, dest="from_version", metavar="VERSION",
                        help="with --sql: the schema version to start from (0: no outbox); "
                        "then no database is needed")
    parser.add_argument("--all", action="store_true",
                        help="with --databases: migrate every database of the file in turn, "
                        "going on past one that fails; one line per database; exit 1 if any "
                        "failed (run it again to finish)")
    parser.add_argument("--json", action="store_true",
                        help="with --all: print the outcomes as JSON")
    parser.add_argument("--inbox-only", action="store_true",
                        help="only the inbox (outbox.receive), for a receiver's own database")
    parser.add_argument("--lock-timeout", type=_seconds, default=LOCK_TIMEOUT,
                        metavar="SECONDS",
                        help=f"how long a step waits for a lock per try (default {LOCK_TIMEOUT})")
    parser.add_argument("--lock-attempts", type=_count, default=LOCK_ATTEMPTS, metavar="N",
                        help=f"tries per step before giving up (default {LOCK_ATTEMPTS})")
    parser.set_defaults(func=run)


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not 0.001 <= value <= 60:
        raise argparse.ArgumentTypeError("must be from 0.001 to 60 seconds")
    return value


def _count(text: str) -> int:
    if not text.isdigit() or not 1 <= int(text) <= 100:
        raise argparse.ArgumentTypeError("must be a whole number from 1 to 100")
    return int(text)


def _role_warnings(conn: psycopg.Connection[Any]) -> list[str]:
    """What to say when the role that migrated is a superuser, or the schema is another's.

    A superuser's migration made objects a superuser owns; a schema made by
    another role lets that role change what this one created in it. Both
    still migrate (an administrator may mean it), and say so on stderr once
    done, and only when a step ran (a failure keeps its one line).
    """
    with conn.transaction():
        row = conn.execute(queries["migrate_role"]).fetchone()
    if row is None:
        return []
    me, superuser, owner = row
    if superuser:
        return [f"warning: migrated as {me}, a superuser: run `outbox migrate` as the role "
                "that owns the outbox schema instead (docs/upgrading.md, \"Roles\")"]
    if owner is not None and owner != me:
        return [f"warning: the outbox schema belongs to {owner}, not to {me}: {owner} can "
                "change or drop what this migration created; migrate as its owner, or make "
                "sure the schema is yours"]
    return []


def path_warnings(conn: psycopg.Connection[Any]) -> list[str]:
    """One line per schema that a role using the outbox searches by default and another
    role may create in (``writable_paths``): what that role plants there could run in the
    sessions of one that does not pin its search_path (an application's, a psql)."""
    with conn.transaction():
        rows = conn.execute(queries["writable_paths"]).fetchall()
    return [f"warning: schema {schema} is on the default search_path of {', '.join(users)}, "
            f"and {', '.join(creators)} may create in it: what they create there can run "
            "with those roles' rights; revoke CREATE on it, or give those roles a "
            "search_path without it (docs/upgrading.md, \"Roles\")"
            for schema, users, creators in rows]


def bound_outside(conn: psycopg.Connection[Any]) -> list[str]:
    """One line per object of the outbox schema bound to a function, operator, type,
    collation or cast of another schema (``bound_outside``), then how to repair; none
    when there is none.

    Such an object was made on a ``search_path`` where another role's look-alike
    stood in for a built-in (an earlier release's ``migrate --sql`` script, ``psql
    -f schema.sql`` or Python ``migrate`` on a planted path, DDL by hand), and runs
    that code in every statement that meets it, with that statement's rights.
    """
    with conn.transaction():
        rows = conn.execute(queries["bound_outside"]).fetchall()
    if not rows:
        return []
    return [*(f"{thing} uses {used}" for thing, used in rows),
            f"{len({thing for thing, _ in rows})} object(s) of the outbox schema run "
            "code of another schema than pg_catalog and outbox, with the rights of whoever "
            "writes them: as the schema's owner, on search_path pg_catalog, pg_temp, make "
            "each again as outbox/sql/schema.sql makes it, then drop what it used "
            "(docs/upgrading.md, \"Code bound into the schema\")"]


def _version(text: str) -> int:
    """argparse type for --from: a schema version this release knows (exit 2 otherwise)."""
    known = known_versions()
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value not in known:
        raise argparse.ArgumentTypeError(
            f"unknown schema version {text!r}: this release knows 0 (no outbox) to "
            f"{known[-1]}")
    return value


def _judge(conn: psycopg.Connection[Any], args: argparse.Namespace) -> int:
    """--dry-run and --check: what would run, or whether anything is pending."""
    with conn.transaction():
        todo = plan(read_state(conn), inbox_only=args.inbox_only, check=args.check)
    what = "inbox" if todo.inbox_only else "outbox schema"
    bound = []
    if args.check and todo.state.outbox:
        for warning in path_warnings(conn):
            print(warning, file=sys.stderr)
    if args.check and (todo.state.outbox or todo.state.inbox):
        bound = bound_outside(conn)
    for line in bound:
        print(printable(f"error: {line}"), file=sys.stderr)
    if not todo.pending:
        print(f"{what} is up to date (version {todo.state.version})")
        return common.EXIT_FAILURE if bound else common.EXIT_OK
    verb = "would run" if args.dry_run else "pending"
    for line in todo.describe():
        print(f"{verb}: {line}")
    return common.EXIT_OK if args.dry_run else common.EXIT_FAILURE


def run(args: argparse.Namespace) -> int:
    if args.all:
        return _run_all(args)
    if args.json:
        raise common.UsageError("--json goes with --all")
    if args.from_version is not None and not args.sql:
        raise common.UsageError("--from goes with --sql")
    if args.sql:
        if args.inbox_only:
            raise common.UsageError("--sql makes the whole outbox; --inbox-only is not for it")
        start = args.from_version
        if start is None:
            with common.connect(args, needs=None) as conn, conn.transaction():
                state = read_state(conn)
            start = state.version if state.outbox else 0
        sys.stdout.write(script(start, lock_timeout=args.lock_timeout))
        return common.EXIT_OK
    with common.connect(args, needs=None) as conn:
        if args.dry_run or args.check:
            return _judge(conn, args)
        before, after = migrate(conn, inbox_only=args.inbox_only,
                                lock_timeout=args.lock_timeout, attempts=args.lock_attempts,
                                on_step=print)
        warnings = _role_warnings(conn) if before != after else []
        warnings += path_warnings(conn)
        warnings += [f"warning: {line}" for line in bound_outside(conn)]
    if before == after:
        print(f"outbox schema is up to date (version {after})")
    elif args.inbox_only and before == 0:
        print(f"inbox made (schema version {after}): the inbox and the version table "
              "only, no outbox; `outbox migrate` without --inbox-only adds it later")
    else:
        print(f"outbox schema migrated from version {before} to {after}")
    for warning in warnings:
        print(printable(warning), file=sys.stderr)
    return common.EXIT_OK


def _run_all(args: argparse.Namespace) -> int:
    """``migrate --all``: each database of the file in turn; a failure is its line, not the end.

    Each database is migrated as ``outbox migrate`` migrates one, so a run
    stopped or failed half way is finished by running it again: a database
    already current is only read.
    """
    for option in ("dry_run", "sql", "check", "inbox_only"):
        if getattr(args, option):
            raise common.UsageError(f"--all migrates; --{option.replace('_', '-')} is for one "
                                    "database (give --db NAME)")
    path = common.file_for_all(args, "migrates every database")
    listing = common.all_databases(path)
    common.say_aside(listing)  # not served, so not migrated: not a failure of the command
    outcomes = []
    for database in listing.databases:
        outcome = _migrate_one(database, args)
        outcomes.append(outcome)
        if not args.json:
            said = f": {outcome['error']}" if outcome["error"] else ""
            common.print_line(f"{outcome['database']}: {outcome['outcome']}{said}")
            sys.stdout.flush()
    if args.json:
        common.print_json(outcomes)
    failed = sum(1 for o in outcomes if o["outcome"] not in ("migrated", "current"))
    if failed:
        print(f"outbox: {failed} of {len(outcomes)} databases were not migrated: run "
              "`outbox migrate --all` again once their reasons are dealt with", file=sys.stderr)
        return common.EXIT_FAILURE
    return common.EXIT_OK


def _migrate_one(database: Database, args: argparse.Namespace) -> dict[str, Any]:
    """One database's outcome: migrated, current, failed or unreachable (the reason in
    ``error``; the line printed for people joins them, ``failed: REASON``)."""
    result: dict[str, Any] = {"database": database.name, "outcome": "", "from_version": None,
                              "to_version": None, "error": None}

    def failed(kind: str, exc: BaseException) -> dict[str, Any]:
        reason = without_passwords(first_line(exc), [database.dsn]) or type(exc).__name__
        result.update(outcome=kind, error=reason)
        return result

    try:
        conn = psycopg.connect(database.dsn, connect_timeout=10, application_name="outbox-cli",
                               options=server_options(database.dsn), **KEEPALIVES)
    except psycopg.Error as exc:
        return failed("unreachable", exc)
    try:
        with conn:
            with conn.transaction():
                state = read_state(conn)
            result["from_version"] = state.version if state.outbox else 0
            before, after = migrate(conn, lock_timeout=args.lock_timeout,
                                    attempts=args.lock_attempts)
    except (psycopg.Error, OutboxError) as exc:
        return failed("failed", exc)
    result.update(outcome="migrated" if before != after else "current", from_version=before,
                  to_version=after)
    return result

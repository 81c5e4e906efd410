"""``outbox grants [--application R] [--dispatcher R] [--viewer R] [--endpoint-manager R]
[--apply | --check] [--all]``: the least privileges of each role that does not own the schema.

Prints SQL (``outbox grants ... | psql``) for the owner of the schema, the
operator, to run after every ``outbox migrate``; printing needs no database:
the role names are quoted as identifiers and literals, never pasted into the
text. ``--apply`` runs the same SQL over the command's own connection
instead (as the owner), so that a migration Job needs no psql.

Each kind is a part of the text (``sql/grants_KIND.sql``); a role gets the
parts of every kind it is named for, after everything it held in the schema
is taken back. The database records each role and kind granted
(``outbox.grantees``): ``--apply`` grants every recorded role again with all
its kinds, so a role never loses what it was granted for another kind and
every role is brought to this version; the printed text, which cannot read
the record, refuses (in SQL, changing nothing) to take a recorded kind away.
``--check`` applies the same text in a transaction it rolls back and names
each privilege the grants would have added: what is missing.

Naming the schema's owner would revoke the owner's own rights: it is refused
before anything changes (exit 2), and the printed SQL carries the same check,
in the one transaction it runs in, for whoever applies it by hand.
"""

from __future__ import annotations

import argparse
import sys
from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

import psycopg
from psycopg import sql

from outbox._cli import common
from outbox._shared.databases import Database
from outbox._shared.dsn import KEEPALIVES, server_options, without_passwords
from outbox._shared.search_path import APPLIED, arrived
from outbox._shared.text import first_line
from outbox.sql import grants_text, queries

KINDS = ("application", "dispatcher", "viewer", "endpoint-manager")
"""The kinds of role, in the order their grants are written; each is an option."""
_HELP = {
    "application": "the role your application publishes and receives as",
    "dispatcher": "the role outbox-dispatcher connects as",
    "viewer": "a read-only role, enough for `outbox web` without --allow-actions and for "
              "status, dead list, show and events list",
    "endpoint-manager": "the role the application's outbox.endpoints functions run as (a "
                        "customers' settings page, `outbox portal`): no secret, header value "
                        "or payload readable, no env: secret, no endpoint without a tenant",
}
Roles = Mapping[str, Sequence[str]]
"""Role name -> the kinds it is granted, in KINDS order."""


def register(sub: Any) -> None:
    parser = sub.add_parser("grants", help="print (or --apply, or --check) the grants of the "
                            "roles that use the outbox (docs/upgrading.md, \"Roles\")")
    for kind in KINDS:
        parser.add_argument(f"--{kind}", metavar="ROLE", dest=kind.replace("-", "_"),
                            help=_HELP[kind])
    doing = parser.add_mutually_exclusive_group()
    doing.add_argument("--apply", action="store_true",
                       help="apply them over the database connection (as the schema's owner) "
                       "instead of printing them, with every role granted before")
    doing.add_argument("--check", action="store_true",
                       help="change nothing; print each privilege missing (ROLE: missing ...) "
                       "of the named roles, else of every role granted before; exit 1 if any")
    parser.add_argument("--all", action="store_true",
                        help="with --databases and --apply or --check: every database of the "
                        "file, a line each")
    common.add_dsn_option(parser)
    parser.set_defaults(func=run)


def named(args: argparse.Namespace) -> dict[str, list[str]]:
    """The roles the command line names, each with its kinds."""
    roles: dict[str, list[str]] = defaultdict(list)
    for kind in KINDS:
        role = getattr(args, kind.replace("-", "_"), None)
        if role is not None:
            if not role or "\x00" in role:
                raise common.UsageError(f"not a role name: {role!r}")
            roles[role].append(kind)
    return dict(roles)


def grants(roles: Roles, *, printed: bool = True, framed: bool = True) -> str:
    """The grants text for ``roles``. ``printed``: for psql, with the refusal to take away
    a kind the record holds; ``framed``: in its own BEGIN and COMMIT (``--check`` runs it
    in a transaction of its own, rolled back)."""
    kept: sql.Composable = sql.SQL("")
    if printed:
        kept = sql.SQL(grants_text("grants_kept")).format(
            named_kinds=sql.SQL(", ").join(
                sql.SQL("({}, {})").format(sql.Literal(role), sql.Literal(kind))
                for role, kinds in roles.items() for kind in kinds),
            role_names=sql.SQL(", ").join(map(sql.Literal, roles)))
    parts = [sql.SQL(grants_text("grants_role")).format(
        role=sql.Identifier(role), role_name=sql.Literal(role),
        kinds=sql.SQL(", ".join(kinds)),
        kind_names=sql.SQL(", ").join(map(sql.Literal, kinds)),
        parts=sql.SQL("\n").join(
            sql.SQL(grants_text(f"grants_{kind.replace('-', '_')}")).format(
                role=sql.Identifier(role)) for kind in kinds))
        for role, kinds in roles.items()]
    text = sql.SQL(grants_text()).format(
        role_names=sql.SQL(", ").join(map(sql.Literal, roles)),
        role_list=sql.SQL(", ").join(map(sql.Identifier, roles)),
        kept_kinds=kept, roles=sql.SQL("").join(parts)).as_string(None)
    if not framed:
        text = text.replace("\nBEGIN;\n", "\n", 1).removesuffix("COMMIT;\n")
    return text


def run(args: argparse.Namespace) -> int:
    roles = named(args)
    if args.all:
        return _run_all(args, roles)
    if not roles and not args.check:
        raise common.UsageError("name at least one role: --application, --dispatcher, "
                                "--viewer or --endpoint-manager ROLE")
    if not args.apply and not args.check:
        print(grants(roles), end="")
        return common.EXIT_OK
    with common.connect(args) as conn:
        if args.apply:
            granted = apply(conn, roles)
            print("granted: " + ", ".join(f"{kind} {role}" for role, kinds in granted.items()
                                          for kind in kinds))
            return common.EXIT_OK
        missing = check(conn, roles)
    for line in missing:
        print(line)
    return common.EXIT_FAILURE if missing else common.EXIT_OK


def _recorded(conn: psycopg.Connection[Any], roles: Roles) -> dict[str, list[str]]:
    """``roles`` with every role and kind the database recorded, in KINDS order; those
    recorded for a role that no longer exists are said on standard error and left."""
    rows = conn.execute(queries["grants_recorded"]).fetchall()
    merged: dict[str, set[str]] = defaultdict(set)
    gone = sorted({str(role) for role, _, exists in rows if not exists})
    for role, kind, exists in rows:
        if exists:
            merged[str(role)].add(str(kind))
    for role, kinds in roles.items():
        merged[role].update(kinds)
    if gone:
        print(f"outbox: roles granted before and gone since, left alone: {', '.join(gone)}",
              file=sys.stderr)
    return {role: [k for k in KINDS if k in kinds] for role, kinds in merged.items()}


def _checked_roles(conn: psycopg.Connection[Any], roles: Roles) -> None:
    """Refuse (exit 2) the schema's owner or a role that does not exist."""
    row = conn.execute(queries["grants_roles"], {"roles": list(roles)}).fetchone()
    assert row is not None
    _owner, _me, owned, missing = row
    if owned:
        raise common.UsageError(
            f"role {owned} owns the outbox schema: it needs no grants, and these would "
            "take its own away; name the other roles (docs/upgrading.md, \"Roles\")")
    if missing:
        raise common.UsageError(f"no such role: {', '.join(missing)}")


def apply(conn: psycopg.Connection[Any], roles: Roles) -> dict[str, list[str]]:
    """Grant ``roles`` and every role recorded before, each with all its kinds; returns
    them. Refusals are exit 2 (a named role) or 1 (the database's)."""
    conn.autocommit = True  # the text holds its own BEGIN and COMMIT
    _checked_roles(conn, roles)
    everyone = _recorded(conn, roles)
    try:
        conn.execute(grants(everyone, printed=False).encode())
    except psycopg.errors.InsufficientPrivilege as exc:
        raise common.CommandFailed(f"cannot grant: {first_line(exc)} (run it as the schema's "
                                   "owner)") from exc
    except psycopg.Error as exc:
        raise common.CommandFailed(f"grants not applied: {first_line(exc)}") from exc
    return everyone


def check(conn: psycopg.Connection[Any], roles: Roles) -> list[str]:
    """``ROLE: missing PRIVILEGE`` for each privilege the grants of ``roles`` (else of every
    recorded role) would add, found by applying them in a transaction rolled back."""
    conn.autocommit = True
    if roles:
        _checked_roles(conn, roles)
    everyone = _recorded(conn, roles)
    wanted = {role: kinds for role, kinds in everyone.items() if not roles or role in roles}
    if not wanted:
        return []
    names = [*wanted, "PUBLIC"]
    try:
        with conn.transaction(force_rollback=True):
            before = _held(conn, names)
            conn.execute(grants(wanted, printed=False, framed=False).encode())
            after = _held(conn, names)
    except psycopg.errors.InsufficientPrivilege as exc:
        raise common.CommandFailed(f"cannot check: {first_line(exc)} (run it as the schema's "
                                   "owner, who could grant what is missing)") from exc
    return [f"{role}: missing {privilege}" for role, privilege in sorted(after - before)]


def _held(conn: psycopg.Connection[Any], roles: Sequence[str]) -> set[tuple[str, str]]:
    """Each privilege the roles hold in the schema, as GRANT spells it, a column's on its
    own (``SELECT (tenant) ON outbox.endpoints``): a check names exactly what is missing."""
    return {(str(role), f"{privilege} ON {target}" if column is None
             else f"{privilege} ({column}) ON {target}")
            for role, privilege, column, target in conn.execute(
                queries["grants_held"], {"roles": list(roles)}).fetchall()}


def _run_all(args: argparse.Namespace, roles: Roles) -> int:
    """``--all``: each database of the file in turn, a line each; a failure is its line."""
    if not args.apply and not args.check:
        raise common.UsageError("--all needs --apply or --check: it prints no SQL")
    if args.apply and not roles:
        raise common.UsageError("name at least one role to --apply")
    path = common.file_for_all(args, "grants in every database")
    listing = common.all_databases(path)
    common.say_aside(listing)
    failed = 0
    for database in listing.databases:
        line = _one(database, roles, apply_them=args.apply)
        failed += not (line.endswith(": granted") or line.endswith(": ok"))
        common.print_line(line)
        sys.stdout.flush()
    if failed:
        print(f"outbox: {failed} of {len(listing.databases)} databases were not "
              f"{'granted' if args.apply else 'found complete'}", file=sys.stderr)
        return common.EXIT_FAILURE
    return common.EXIT_OK


def _pinned(conn: psycopg.Connection[Any]) -> None:
    """The connection's pinned search_path reached the server (as ``common.connect``
    checks it), else CommandFailed."""
    row = conn.execute(APPLIED).fetchone()
    if not arrived(str(row[0]) if row else ""):
        raise common.CommandFailed("the server did not apply the connection's search_path "
                                   "(a pooler that drops startup parameters)")


def _one(database: Database, roles: Roles, *, apply_them: bool) -> str:
    """``NAME: granted|ok|missing: ...|unreachable: REASON|failed: REASON``."""
    try:
        conn = psycopg.connect(database.dsn, connect_timeout=10, application_name="outbox-cli",
                               options=server_options(database.dsn), autocommit=True,
                               **KEEPALIVES)
    except psycopg.Error as exc:
        return (f"{database.name}: unreachable: "
                f"{without_passwords(first_line(exc), [database.dsn])}")
    try:
        with conn:
            _pinned(conn)
            if apply_them:
                apply(conn, roles)
                return f"{database.name}: granted"
            missing = check(conn, roles)
    except (common.UsageError, common.CommandFailed) as exc:
        return f"{database.name}: failed: {exc}"
    except psycopg.Error as exc:
        return f"{database.name}: failed: {without_passwords(first_line(exc), [database.dsn])}"
    if missing:
        return f"{database.name}: missing: {'; '.join(missing)}"
    return f"{database.name}: ok"

"""``outbox grants --application ROLE --dispatcher ROLE [--viewer ROLE] [--apply]``: the
least privileges.

Prints SQL (``outbox grants ... | psql``) for the owner of the schema, the
operator, to run after every ``outbox migrate``; printing needs no database:
the role names are quoted as identifiers and literals, never pasted into the
text. ``--apply`` runs the same SQL over the command's own connection
instead (as the owner), so that a migration Job needs no psql. ``--viewer``
adds a read-only role that ``outbox web`` (without ``--allow-actions``) and
the reading commands can connect as: no secret, URL or header value of an
endpoint, no event's headers, no write.

Naming the schema's owner as either role would revoke the owner's own
rights: ``--apply`` refuses it before it changes anything (exit 2), and the
printed SQL carries the same check, in the one transaction it runs in, for
whoever applies it by hand.
"""

from __future__ import annotations

import argparse
from typing import Any

import psycopg
from psycopg import sql

from outbox._cli import common
from outbox._shared.text import first_line
from outbox.sql import grants_text, queries


def register(sub: Any) -> None:
    parser = sub.add_parser("grants", help="print (or --apply) the grants of the application "
                            "and dispatcher roles (docs/upgrading.md, \"Roles\")")
    parser.add_argument("--application", required=True, metavar="ROLE",
                        help="the role your application connects as")
    parser.add_argument("--dispatcher", required=True, metavar="ROLE",
                        help="the role outbox-dispatcher connects as")
    parser.add_argument("--viewer", metavar="ROLE",
                        help="also a read-only role, enough for `outbox web` without "
                        "--allow-actions and for status, dead list, show and events list")
    parser.add_argument("--apply", action="store_true",
                        help="apply them over the database connection (as the schema's "
                        "owner) instead of printing them")
    common.add_dsn_option(parser)
    parser.set_defaults(func=run)


def grants(application: str, dispatcher: str, viewer: str | None = None) -> str:
    """grants.sql with the role names in place, quoted as identifiers (and literals)."""
    roles = [application, dispatcher, *([viewer] if viewer is not None else [])]
    for role in roles:
        if not role or "\x00" in role:
            raise common.UsageError(f"not a role name: {role!r}")
    viewing: sql.Composable = sql.SQL("")
    if viewer is not None:  # packaged files, not input
        viewing = sql.SQL(grants_text("grants_viewer")).format(viewer=sql.Identifier(viewer))
    template = sql.SQL(grants_text())
    return template.format(application=sql.Identifier(application),
                           dispatcher=sql.Identifier(dispatcher),
                           role_names=sql.SQL(", ").join(map(sql.Literal, roles)),
                           viewer_grants=viewing).as_string(None)


def run(args: argparse.Namespace) -> int:
    text = grants(args.application, args.dispatcher, args.viewer)
    if not args.apply:
        print(text, end="")
        return common.EXIT_OK
    with common.connect(args) as conn:
        conn.autocommit = True  # the text holds its own BEGIN and COMMIT
        row = conn.execute(queries["grants_roles"],
                           {"roles": [args.application, args.dispatcher,
                                      *([args.viewer] if args.viewer else [])]}).fetchone()
        assert row is not None
        owner, me, owned, missing = row
        if owned:
            raise common.UsageError(
                f"role {owned} owns the outbox schema: it needs no grants, and these would "
                "take its own away; name the application's and the dispatcher's own roles "
                "(docs/upgrading.md, \"Roles\")")
        if missing:
            raise common.UsageError(f"no such role: {', '.join(missing)}")
        try:
            conn.execute(text.encode())
        except psycopg.errors.InsufficientPrivilege as exc:
            raise common.CommandFailed(
                f"cannot grant as {me}: {first_line(exc)} (run it as the schema's owner, "
                f"{owner})") from exc
        except psycopg.Error as exc:
            raise common.CommandFailed(f"grants not applied: {first_line(exc)}") from exc
    viewer = f", viewer {args.viewer}" if args.viewer else ""
    print(f"granted: application {args.application}, dispatcher {args.dispatcher}{viewer}")
    return common.EXIT_OK

"""``outbox grants --application ROLE --dispatcher ROLE``: print the least privileges.

Prints SQL (``outbox grants ... | psql``) for the owner of the schema, the
operator, to run after every ``outbox migrate``. It needs no database: the
role names are quoted as identifiers, never pasted into the text.
"""

from __future__ import annotations

import argparse
from typing import Any

from psycopg import sql

from outbox._cli import common
from outbox.sql import grants_text


def register(sub: Any) -> None:
    parser = sub.add_parser("grants", help="print the grants of the application and "
                            "dispatcher roles (docs/upgrading.md, \"Roles\")")
    parser.add_argument("--application", required=True, metavar="ROLE",
                        help="the role your application connects as")
    parser.add_argument("--dispatcher", required=True, metavar="ROLE",
                        help="the role outbox-dispatcher connects as")
    parser.set_defaults(func=run)


def grants(application: str, dispatcher: str) -> str:
    """grants.sql with the two role names in place, quoted as identifiers."""
    for role in (application, dispatcher):
        if not role or "\x00" in role:
            raise common.UsageError(f"not a role name: {role!r}")
    template = sql.SQL(grants_text())  # a packaged file, not input
    return template.format(application=sql.Identifier(application),
                           dispatcher=sql.Identifier(dispatcher)).as_string(None)


def run(args: argparse.Namespace) -> int:
    print(grants(args.application, args.dispatcher), end="")
    return common.EXIT_OK

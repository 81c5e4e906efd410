"""``outbox migrate``: apply the packaged schema and upgrade steps."""

from __future__ import annotations

import argparse
from typing import Any

from outbox._cli import common
from outbox.migrate import migrate


def register(sub: Any) -> None:
    parser = sub.add_parser("migrate", help="create or upgrade the outbox schema")
    common.add_dsn_option(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    with common.connect(args) as conn:
        before, after = migrate(conn)
    if before == after:
        print(f"outbox schema is up to date (version {after})")
    else:
        print(f"outbox schema migrated from version {before} to {after}")
    return common.EXIT_OK

"""``outbox replay``: not written yet."""

from __future__ import annotations

import argparse
from typing import Any

from outbox._cli import common


def register(sub: Any) -> None:
    parser = sub.add_parser("replay", help="(not yet available)")
    common.add_dsn_option(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    raise common.CommandFailed("outbox replay is not available yet")

"""Django's own psycopg 3 connection to a test's database, and one set up as Django sets its up.

- ``django_alias``: a database alias of Django's ``connections`` pointed at the
  test's database, for the length of a block (Django configured once per
  process, ``USE_TZ = True`` as new projects have it);
- ``django_like``: a plain psycopg connection given what Django gives its
  own under ``USE_TZ = False``: its adapters template (``jsonb``, ``inet`` and
  ``cidr`` loaded as text, ``timestamptz`` stamped with no zone at all) and a
  cursor factory of its own (here ``RawCursor``, ``$1`` placeholders), so that
  what only a plain connection would forgive shows.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

django = pytest.importorskip("django")


def _configured() -> None:
    from django.conf import settings

    if not settings.configured:
        settings.configure(DATABASES={}, USE_TZ=True)
        django.setup()


@contextlib.contextmanager
def django_alias(dsn: str) -> Iterator[str]:
    """A Django database alias (``connections[alias]``) of ``dsn``'s database."""
    _configured()
    from django.db import connections

    info = psycopg.conninfo.conninfo_to_dict(dsn)
    alias = f"t{uuid.uuid4().hex[:8]}"
    connections.settings[alias] = connections.configure_settings({"default": {
        "ENGINE": "django.db.backends.postgresql", "NAME": info["dbname"],
        "USER": info.get("user", ""), "PASSWORD": info.get("password", ""),
        "HOST": info.get("host", ""), "PORT": str(info.get("port", ""))}})["default"]
    try:
        yield alias
    finally:
        connections[alias].close()
        del connections[alias]
        del connections.settings[alias]


def django_connection(alias: str) -> psycopg.Connection[Any]:
    """Django's psycopg connection of ``alias``, opened (``connection.connection``)."""
    from django.db import connections

    wrapper = connections[alias]
    wrapper.ensure_connection()
    pg: psycopg.Connection[Any] = wrapper.connection
    return pg


def django_like(dsn: str, *, autocommit: bool = False) -> psycopg.Connection[Any]:
    """A psycopg connection with Django's adapters (``USE_TZ = False``: naive times) and a
    ``RawCursor`` factory."""
    _configured()
    from django.db.backends.postgresql.psycopg_any import get_adapters_template

    conn = psycopg.connect(dsn, autocommit=autocommit,
                           context=get_adapters_template(False, None),
                           cursor_factory=psycopg.RawCursor)
    conn.adapters.register_loader("json", psycopg.types.string.TextLoader)
    return conn

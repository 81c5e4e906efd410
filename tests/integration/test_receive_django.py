"""Django's own connection: first_time and assert_published inside transaction.atomic()."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

import outbox
from outbox import receive
from outbox.testing import assert_published, published_events

django = pytest.importorskip("django")


@pytest.fixture
def django_connection(dsn: str) -> Iterator[Any]:
    """``django.db.connection``'s kind, for the test's database (one alias per test)."""
    from django.conf import settings

    if not settings.configured:
        settings.configure(DATABASES={}, USE_TZ=True)
        django.setup()
    from django.db import connections

    info = psycopg.conninfo.conninfo_to_dict(dsn)
    alias = f"t{uuid.uuid4().hex[:8]}"
    connections.settings[alias] = connections.configure_settings({"default": {
        "ENGINE": "django.db.backends.postgresql", "NAME": info["dbname"],
        "USER": info.get("user", ""), "PASSWORD": info.get("password", ""),
        "HOST": info.get("host", ""),
        "PORT": str(info.get("port", ""))}})["default"]
    connection = connections[alias]
    try:
        yield connection
    finally:
        connection.close()
        del connections[alias]
        del connections.settings[alias]


def test_first_time_runs_in_djangos_atomic_block(django_connection: Any, dsn: str) -> None:
    """In atomic(): True, then False; a rolled back block forgets, a committed one keeps."""
    from django.db import transaction

    event_id = str(uuid.uuid4())
    alias = django_connection.alias
    with transaction.atomic(using=alias):
        assert receive.first_time(django_connection, event_id) is True
        assert receive.first_time(django_connection, event_id) is False
        transaction.set_rollback(True, using=alias)
    with transaction.atomic(using=alias):
        assert receive.first_time(django_connection, event_id) is True
    with transaction.atomic(using=alias):
        assert receive.first_time(django_connection, event_id) is False
    with psycopg.connect(dsn) as conn:
        assert conn.execute("SELECT count(*) FROM outbox.inbox").fetchone() == (1,)


def test_assert_published_through_djangos_connection(django_connection: Any) -> None:
    """assert_published reads the atomic block's own events through Django's connection."""
    from django.db import transaction

    with transaction.atomic(using=django_connection.alias):
        assert published_events(django_connection) == []
        outbox.publish(django_connection, "order.created", {"order_id": 1})
        with transaction.atomic(using=django_connection.alias):  # a savepoint
            outbox.publish(django_connection, "order.created", {"order_id": 2})
        assert_published(django_connection, "order.created", count=2)
        assert_published(django_connection, "order.created", {"order_id": 2})

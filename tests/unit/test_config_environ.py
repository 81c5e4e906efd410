"""The dispatcher keeps, of its environment, only what env: secrets may name."""

from __future__ import annotations

from dispatcher.cli import build_config


def test_the_configuration_never_reaches_the_snapshot() -> None:
    """OUTBOX_DSN, DATABASE_URL, PG* and the other OUTBOX_* are not in the snapshot endpoints
    read from; variables of their own are."""
    environ = {"OUTBOX_DSN": "postgresql://app:pw@db/app", "DATABASE_URL": "postgresql://x/y",
               "PGPASSWORD": "pw", "HOME": "/home/app", "OUTBOX_CONCURRENCY": "8",
               "OUTBOX_SECRET_WORKFLOW": "whsec_x", "OUTBOX_SECRET_": "bare prefix",
               "WORKFLOW_WEBHOOK_SECRET": "whsec_y"}
    config = build_config([], environ)
    assert config.environ == {"OUTBOX_SECRET_WORKFLOW": "whsec_x", "HOME": "/home/app",
                              "WORKFLOW_WEBHOOK_SECRET": "whsec_y"}
    assert config.dsn == "postgresql://app:pw@db/app"
    assert config.concurrency == 8

"""The dispatcher keeps, of its environment, only what env: secrets may name."""

from __future__ import annotations

from dispatcher.cli import build_config


def test_only_outbox_secret_variables_reach_the_config() -> None:
    """OUTBOX_DSN, DATABASE_URL and the rest are not in the snapshot endpoints read from."""
    environ = {"OUTBOX_DSN": "postgresql://app:pw@db/app", "DATABASE_URL": "postgresql://x/y",
               "PGPASSWORD": "pw", "HOME": "/home/app", "OUTBOX_CONCURRENCY": "8",
               "OUTBOX_SECRET_WORKFLOW": "whsec_x", "OUTBOX_SECRET_": "bare prefix"}
    config = build_config([], environ)
    assert config.environ == {"OUTBOX_SECRET_WORKFLOW": "whsec_x",
                              "OUTBOX_SECRET_": "bare prefix"}
    assert config.dsn == "postgresql://app:pw@db/app"
    assert config.concurrency == 8

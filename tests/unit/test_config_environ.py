"""The dispatcher keeps, of its environment, only what env: secrets may name and use."""

from __future__ import annotations

from dispatcher.cli import build_config


def test_the_configuration_never_reaches_the_snapshot() -> None:
    """OUTBOX_DSN, DATABASE_URL, PG* and the other OUTBOX_* are not in the snapshot endpoints
    read from, nor any variable not holding a whsec_ secret; whsec_ variables of their own
    are."""
    environ = {"OUTBOX_DSN": "postgresql://app:pw@db/app", "DATABASE_URL": "postgresql://x/y",
               "PGPASSWORD": "pw", "HOME": "/home/app", "OUTBOX_CONCURRENCY": "8",
               "OUTBOX_SECRET_WORKFLOW": "whsec_x", "OUTBOX_SECRET_": "bare prefix",
               "WORKFLOW_WEBHOOK_SECRET": "whsec_y"}
    config = build_config([], environ)
    assert config.environ == {"OUTBOX_SECRET_WORKFLOW": "whsec_x",
                              "WORKFLOW_WEBHOOK_SECRET": "whsec_y"}
    assert config.dsn == "postgresql://app:pw@db/app"
    assert config.concurrency == 8


def test_only_whsec_values_reach_the_snapshot() -> None:
    """Cloud keys and passwords (valid base64 of a key's size) stay out of the snapshot."""
    environ = {"AWS_SECRET_ACCESS_KEY": "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
               "POSTGRES_PASSWORD": "c2VjcmV0LXBhc3N3b3JkLXRoaXJ0eS1ieXRlcyE=",
               "HOOK_SECRET": " whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\n"}
    assert set(build_config([], environ).environ) == {"HOOK_SECRET"}

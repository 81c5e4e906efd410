"""The dispatcher keeps, of its environment, only what env: secrets may name and use."""

from __future__ import annotations

import pytest

from dispatcher.cli import build_config
from dispatcher.config import ConfigError


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


def test_listen_dsn_from_the_flag_or_the_environment() -> None:
    """--listen-dsn, else OUTBOX_LISTEN_DSN (an ORM-style URL reduced as --dsn is); unset: ""."""
    environ = {"OUTBOX_LISTEN_DSN": "postgresql+psycopg://app:pw@db-direct/app"}
    assert build_config([], environ).listen_dsn == "postgresql://app:pw@db-direct/app"
    assert build_config(["--listen-dsn", "host=direct"], environ).listen_dsn == "host=direct"
    assert build_config([], {}).listen_dsn == ""
    assert "OUTBOX_LISTEN_DSN" not in build_config([], environ).environ


def test_a_malformed_listen_dsn_is_bad_usage() -> None:
    """A listen DSN libpq cannot read is refused like a bad --dsn."""
    with pytest.raises(ConfigError):
        build_config(["--listen-dsn", "host=x port=notaport"], {})


def test_the_traces_exporter_is_opentelemetrys_variable() -> None:
    """OTEL_TRACES_EXPORTER is read as the SDK reads it; unset, no spans."""
    assert build_config([], {"OTEL_TRACES_EXPORTER": "otlp"}).traces_exporter == "otlp"
    assert build_config([], {}).traces_exporter == ""


def test_histograms_from_the_flag_or_the_environment() -> None:
    """--histograms, else OUTBOX_HISTOGRAMS (any case); unset: endpoint; anything else: refused."""
    assert build_config([], {}).histograms == "endpoint"
    assert build_config([], {"OUTBOX_HISTOGRAMS": "Fleet"}).histograms == "fleet"
    assert build_config(["--histograms", "endpoint"],
                        {"OUTBOX_HISTOGRAMS": "fleet"}).histograms == "endpoint"
    with pytest.raises(ConfigError, match="--histograms must be endpoint or fleet"):
        build_config([], {"OUTBOX_HISTOGRAMS": "tenant"})

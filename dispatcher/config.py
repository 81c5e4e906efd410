"""DispatcherConfig: every setting of the dispatcher, in one frozen object.

The command line and the ``OUTBOX_*`` environment build it (dispatcher.cli);
nothing else in the dispatcher reads the environment. ``environ`` is the
snapshot of the variables an ``env:NAME`` secret may name, taken at start
(those holding a ``whsec_`` secret, none of the configuration's: ``OUTBOX_*``
other than ``OUTBOX_SECRET_*``, ``DATABASE_URL``, ``PG*``), kept only to
resolve endpoint secrets.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Literal

from dispatcher.http.netguard import parse_allow_list
from dispatcher.http.proxy import ProxyRoutes

LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
HISTOGRAMS = ("endpoint", "fleet")
"""--histograms: the two histograms per endpoint, or one of each for all endpoints."""
SITE_CONNECTIONS = 5
"""Connections one database served with pinned connections may hold (with --databases)."""
MIN_CONNECTIONS = SITE_CONNECTIONS + 2
"""The least --max-connections: one database pinned, the membership session, one look."""


class ConfigError(ValueError):
    """A setting is out of range; the message names the option."""


@dataclass(frozen=True, slots=True)
class DispatcherConfig:
    dsn: str = ""
    """libpq URL or key=value string. Defaults to "" (libpq's PG* variables)."""
    listen_dsn: str = ""
    """A direct connection (not through a transaction pooler) for LISTEN. Defaults to ""
    (LISTEN on ``dsn``)."""
    databases: str = ""
    """A databases file (TOML: ``[[database]]`` entries, ``refresh``, an optional
    ``[catalog]``): serve every database it lists, sharing them with the dispatchers
    given the same file. Cannot be given with ``--dsn``; with it, OUTBOX_DSN and
    DATABASE_URL are ignored. Defaults to none (one database, ``--dsn``)."""
    max_connections: int = 20
    """With ``--databases``: the most connections this dispatcher holds to the database
    servers, however many databases it serves. Databases with recent work hold up to 5
    each (and LISTEN); the others hold none and are looked at with a short-lived one.
    Defaults to 20."""
    sweep_interval: float = 60.0
    """With ``--databases``: how often a database without recent work is looked at with
    a short-lived connection (jittered once, after its first look): the look finds work
    the hint missed, measures its backlog gauges and says this dispatcher serves it, so
    these are never older than the sweep. Beside the sweep, such a database is looked at
    when the hint (each server's ``pg_stat_database``, read every second through one
    connection per server) shows rows inserted in it, and when a retry it holds comes
    due. 0 turns the sweep off (hosts that bill or wake per connection; the gauges of
    an idle database then go unmeasured). Defaults to 60."""
    traces_exporter: str = ""
    """OpenTelemetry's ``OTEL_TRACES_EXPORTER``, as the SDK reads it: the exporters of the
    attempt spans. Defaults to "" (no spans); the SDK reads the other OTEL_* itself."""
    metrics_host: str = "0.0.0.0"  # noqa: S104 - a sidecar is scraped from outside the pod
    """Address of the metrics and health server. Defaults to 0.0.0.0 (all interfaces)."""
    metrics_port: int = 9464
    """Port of the metrics and health server (0: pick a free one). Defaults to 9464."""
    histograms: Literal["endpoint", "fleet"] = "endpoint"
    """The two histograms (``outbox_delivery_duration_seconds``,
    ``outbox_delivery_lag_seconds``): ``endpoint``, one of each per endpoint (39 series
    an endpoint); ``fleet``, one of each for all endpoints, without the ``endpoint``
    label (per database with ``--databases``), for thousands of endpoints: 15 of the
    documented series an endpoint instead of 54. Defaults to endpoint."""
    concurrency: int = 64
    """HTTP requests in flight at once, over all endpoints (with ``--databases``: of each
    database served with pinned connections). Defaults to 64."""
    batch_size: int = 1000
    """Most deliveries claimed by one claim statement. Defaults to 1000 (ten requests to an
    endpoint taking batches of 100; one-event requests stay within the free slots)."""
    poll_interval: float = 2.0
    """Seconds between polls when no notification arrives. Defaults to 2."""
    lease: float = 60.0
    """Seconds a claim is leased for; extended while a request runs. Defaults to 60,
    and never less than the longest endpoint timeout plus 15 seconds."""
    shutdown_grace: float = 20.0
    """Seconds to let in-flight requests finish after SIGTERM. Defaults to 20."""
    once: bool = False
    """Deliver what is due now, then exit. Defaults to False."""
    block_private_networks: bool = False
    """Refuse loopback, private, link-local and metadata addresses. Defaults to False."""
    allow_networks: tuple[str, ...] = ()
    """CIDRs or host names exempt from the block. Defaults to none."""
    retention: timedelta = timedelta(days=7)
    """Delivered (and discarded) deliveries and finished events older than this are purged.
    Defaults to 7d; 0 turns purging off."""
    log_format: Literal["text", "json"] = "text"
    """Log line format. Defaults to text."""
    log_level: str = "INFO"
    """Lowest level logged. Defaults to INFO."""
    https_proxy: str = field(default="", repr=False)
    """The forward proxy of https:// endpoints, http://[USER:PASSWORD@]HOST[:PORT], reached
    with CONNECT (TLS stays end to end); https_proxy wins over HTTPS_PROXY. Credentials go
    as Proxy-Authorization and are shown nowhere. Defaults to none (direct)."""
    http_proxy: str = field(default="", repr=False)
    """The forward proxy of http:// endpoints, sent absolute-form requests; http_proxy wins
    over HTTP_PROXY. Defaults to none (direct)."""
    no_proxy: str = ""
    """Hosts reached directly whatever the proxies (no_proxy wins over NO_PROXY): host names
    (and the names under them), IP addresses, CIDR ranges, or *, each with an optional
    :PORT, separated by commas. Defaults to none."""
    environ: Mapping[str, str] = field(default_factory=dict, repr=False)
    """The variables env:NAME secrets may name, at start: whsec_ values only, none of the
    configuration's. Defaults to empty."""

    def __post_init__(self) -> None:
        if not 0 <= self.metrics_port <= 65535:
            raise ConfigError(
                f"--metrics-port must be between 0 and 65535, not {self.metrics_port}")
        if not 1 <= self.concurrency <= 10_000:
            raise ConfigError(f"--concurrency must be between 1 and 10000, not {self.concurrency}")
        if not 1 <= self.batch_size <= 10_000:
            raise ConfigError(f"--batch-size must be between 1 and 10000, not {self.batch_size}")
        if not 0.01 <= self.poll_interval <= 3600:
            raise ConfigError("--poll-interval must be between 0.01 and 3600 seconds")
        if not 1 <= self.lease <= 86_400:
            raise ConfigError("--lease must be between 1 and 86400 seconds")
        if not 0 <= self.shutdown_grace <= 3600:
            raise ConfigError("--shutdown-grace must be between 0 and 3600 seconds")
        if self.histograms not in HISTOGRAMS:
            raise ConfigError(f"--histograms must be endpoint or fleet, not {self.histograms!r}")
        if self.log_format not in ("text", "json"):
            raise ConfigError(f"--log-format must be text or json, not {self.log_format!r}")
        if self.log_level.upper() not in LOG_LEVELS:
            raise ConfigError(f"--log-level must be one of {', '.join(LOG_LEVELS)}")
        self._check_many()
        if self.retention < timedelta(0):
            raise ConfigError("--retention must not be negative")
        for item in self.allow_networks:
            _check_allow(item)
        self.proxies()  # raises ConfigError for a proxy it cannot use

    def _check_many(self) -> None:
        """The settings of --databases."""
        if not MIN_CONNECTIONS <= self.max_connections <= 10_000:
            raise ConfigError(f"--max-connections must be between {MIN_CONNECTIONS} and 10000, "
                              f"not {self.max_connections}")
        if self.sweep_interval != 0 and not 1 <= self.sweep_interval <= 86_400:
            raise ConfigError("--sweep-interval must be 0 (off) or between 1 and 86400 seconds")
        if self.databases and (self.dsn or self.listen_dsn or self.once):
            raise ConfigError("--databases serves every database of its file: it cannot be "
                              "given with --dsn, --listen-dsn (give listen_dsn in the file) "
                              "or --once")

    def proxies(self) -> ProxyRoutes:
        """The proxies requests go through, and the hosts that skip them."""
        try:
            return ProxyRoutes.from_settings(self.https_proxy, self.http_proxy, self.no_proxy)
        except ValueError as exc:
            raise ConfigError(str(exc)) from None


def _check_allow(item: str) -> None:
    """An --allow-network value: the sender's own parser decides, so the two cannot drift."""
    try:
        parse_allow_list([item])
    except ValueError as exc:
        raise ConfigError(str(exc)) from None

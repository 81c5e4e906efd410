"""``outbox-dispatcher``: options and environment -> one DispatcherConfig -> run.

Every option also reads from ``OUTBOX_<OPTION>`` (``--batch-size`` from
``OUTBOX_BATCH_SIZE``); a flag on the command line wins over the environment.
This is the only module of the dispatcher that reads ``os.environ``.
"""

from __future__ import annotations

import argparse
import asyncio
import difflib
import logging
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from dispatcher.config import HISTOGRAMS, ConfigError, DispatcherConfig
from dispatcher.observe.logs import setup_logging
from outbox._shared import extras
from outbox._shared.argtypes import duration, seconds
from outbox._shared.dsn import InvalidDsn, check_dsn, nothing_configured, resolve_dsn
from outbox._shared.secrets import env_name_allowed
from outbox._shared.usage import OneLineParser, undecodable, usage_line
from outbox._shared.version import current as version

EXIT_FAILURE, EXIT_USAGE = 1, 2
_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


_Parser = OneLineParser

# The variables the dispatcher reads beside those of _spec(), by the setting they give
# (see build_config); OTEL_TRACES_EXPORTER is OpenTelemetry's own, read as its SDK does.
_OTHER_VARIABLES = {"dsn": "OUTBOX_DSN", "listen_dsn": "OUTBOX_LISTEN_DSN",
                    "databases": "OUTBOX_DATABASES",
                    "allow_networks": "OUTBOX_ALLOW_NETWORK",
                    "traces_exporter": "OTEL_TRACES_EXPORTER",
                    "https_proxy": "HTTPS_PROXY", "http_proxy": "HTTP_PROXY",
                    "no_proxy": "NO_PROXY"}
# Options whose setting has another name: --allow-network, repeated, gives allow_networks.
_SETTING_OF_OPTION = {"allow_network": "allow_networks"}


def _int(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid integer {text!r}") from None


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="outbox-dispatcher",
                description="Deliver committed outbox events over HTTP. Every option also "
                            "reads from OUTBOX_<OPTION>, e.g. OUTBOX_CONCURRENCY.")
    p.add_argument("--version", action="version", version=f"outbox-dispatcher {version()}")
    p.add_argument("--dsn",
                   help="database URL (default: $OUTBOX_DSN, $DATABASE_URL, PG* variables)")
    p.add_argument("--databases", metavar="FILE",
                   help="serve every database this file lists (not with --dsn; "
                        "default: $OUTBOX_DATABASES)")
    p.add_argument("--max-connections", type=_int, metavar="N",
                   help="with --databases: most connections to the database servers "
                        "(default 20)")
    p.add_argument("--sweep-interval", type=seconds, metavar="SECONDS",
                   help="with --databases: how often a database without recent work is "
                        "looked at (default 30; 0 = off)")
    p.add_argument("--listen-dsn", metavar="DSN",
                   help="a direct connection for LISTEN when --dsn goes through a "
                        "transaction pooler (default: $OUTBOX_LISTEN_DSN, else --dsn)")
    p.add_argument("--metrics-host", help="metrics/health address (default 0.0.0.0)")
    p.add_argument("--metrics-port", type=_int, help="metrics/health port (default 9464)")
    p.add_argument("--histograms", type=str.lower, choices=HISTOGRAMS,
                   help="the duration and lag histograms per endpoint, or one of each for "
                        "all endpoints (fleet: for thousands of them; default endpoint)")
    p.add_argument("--concurrency", type=_int, help="HTTP requests in flight (default 64)")
    p.add_argument("--batch-size", type=_int, help="deliveries per claim (default 1000)")
    p.add_argument("--poll-interval", type=seconds, metavar="SECONDS",
                   help="fallback poll period (default 2)")
    p.add_argument("--lease", type=seconds, metavar="SECONDS",
                   help="claim lease, extended while a request runs (default 60; never less "
                        "than the longest endpoint timeout + 15)")
    p.add_argument("--shutdown-grace", type=seconds, metavar="SECONDS",
                   help="time to finish in-flight requests on SIGTERM (default 20)")
    p.add_argument("--once", action="store_const", const=True,
                   help="deliver what is due now, then exit (1 if anything was dead-lettered)")
    p.add_argument("--block-private-networks", action="store_const", const=True,
                   help="refuse loopback, private, link-local and metadata addresses")
    p.add_argument("--allow-network", action="append", metavar="CIDR|HOST",
                   help="exempt from --block-private-networks (repeatable)")
    p.add_argument("--retention", type=duration, metavar="DURATION",
                   help="purge finished rows older than this (default 7d; 0 = never)")
    p.add_argument("--log-format", choices=("text", "json"), help="default text")
    p.add_argument("--log-level", type=str.upper,
                   choices=("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"), help="default INFO")
    return p


def _env_bool(value: str) -> bool:
    lowered = value.strip().lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    raise ValueError(f"must be true or false, not {value!r}")


def _from_env(environ: Mapping[str, str], name: str, convert: Callable[[str], Any]) -> Any:
    raw = environ.get(name)
    if raw is None:
        return None
    try:
        return convert(raw)
    except (argparse.ArgumentTypeError, ValueError) as exc:
        raise ConfigError(f"{name}: {exc}") from None


def _spec() -> dict[str, tuple[str, Callable[[str], Any]]]:
    """Per option: the variable it reads and how its text converts."""
    return {
        "max_connections": ("OUTBOX_MAX_CONNECTIONS", _int),
        "sweep_interval": ("OUTBOX_SWEEP_INTERVAL", seconds),
        "metrics_host": ("OUTBOX_METRICS_HOST", str),
        "metrics_port": ("OUTBOX_METRICS_PORT", _int),
        "histograms": ("OUTBOX_HISTOGRAMS", str.lower),
        "concurrency": ("OUTBOX_CONCURRENCY", _int),
        "batch_size": ("OUTBOX_BATCH_SIZE", _int),
        "poll_interval": ("OUTBOX_POLL_INTERVAL", seconds),
        "lease": ("OUTBOX_LEASE", seconds),
        "shutdown_grace": ("OUTBOX_SHUTDOWN_GRACE", seconds),
        "once": ("OUTBOX_ONCE", _env_bool),
        "block_private_networks": ("OUTBOX_BLOCK_PRIVATE_NETWORKS", _env_bool),
        "retention": ("OUTBOX_RETENTION", duration),
        "log_format": ("OUTBOX_LOG_FORMAT", str.lower),
        "log_level": ("OUTBOX_LOG_LEVEL", str.upper),
    }


def sources() -> dict[str, tuple[str | None, str | None]]:
    """Per setting of :class:`DispatcherConfig`, the option and the variable it is read
    from (None for neither), in the parser's order: what the configuration reference
    (``dispatcher.reference``) lists. An option without a setting raises, so that
    neither can be added without the other."""
    variables = {attr: name for attr, (name, _) in _spec().items()} | _OTHER_VARIABLES
    found: dict[str, tuple[str | None, str | None]] = {}
    for action in build_parser()._actions:
        if action.dest in ("help", "version"):
            continue
        setting = _SETTING_OF_OPTION.get(action.dest, action.dest)
        if setting not in DispatcherConfig.__dataclass_fields__:
            raise AssertionError(f"{action.option_strings[0]} sets no DispatcherConfig field")
        found[setting] = (action.option_strings[0], variables.get(setting))
    for setting in DispatcherConfig.__dataclass_fields__:
        found.setdefault(setting, (None, variables.get(setting)))
    return found


def unknown_variables(environ: Mapping[str, str]) -> list[tuple[str, str | None]]:
    """``OUTBOX_*`` variables the dispatcher does not read (a misspelt option, most likely),
    each with the closest known name; those an ``env:`` secret may name are left alone."""
    known = ({name for name, _ in _spec().values()}
             | {name for name in _OTHER_VARIABLES.values() if name.startswith("OUTBOX_")})
    found = []
    for name in sorted(environ):
        if name.startswith("OUTBOX_") and name not in known and not env_name_allowed(name):
            close = difflib.get_close_matches(name, sorted(known), n=1)
            found.append((name, close[0] if close else None))
    return found


def build_config(argv: Sequence[str] | None, environ: Mapping[str, str]) -> DispatcherConfig:
    """Flags, else OUTBOX_* variables, else the defaults; raises ConfigError or exits 2."""
    args = build_parser().parse_args(argv)
    values: dict[str, Any] = {}
    for attr, (env_name, convert) in _spec().items():
        flag = getattr(args, attr)
        value = flag if flag is not None else _from_env(environ, env_name, convert)
        if value is not None:
            values[attr] = value
    allow = args.allow_network
    if allow is None and environ.get("OUTBOX_ALLOW_NETWORK"):
        allow = environ["OUTBOX_ALLOW_NETWORK"].replace(",", " ").split()
    values["allow_networks"] = tuple(allow or ())
    if args.dsn is not None and args.databases is not None:
        raise ConfigError("--dsn and --databases cannot be used together: give one database "
                          "with --dsn, or a file of them with --databases")
    databases = args.databases or ("" if args.dsn is not None
                                   else environ.get("OUTBOX_DATABASES", ""))
    values["databases"] = databases
    if databases:  # OUTBOX_DSN, DATABASE_URL and OUTBOX_LISTEN_DSN name one database only
        return _finish(values, args.listen_dsn or "", environ)
    values["dsn"] = resolve_dsn(args.dsn, environ)
    return _finish(values, args.listen_dsn or environ.get("OUTBOX_LISTEN_DSN") or "",
                   environ)


def _finish(values: dict[str, Any], listen: str, environ: Mapping[str, str]
            ) -> DispatcherConfig:
    """The DSNs checked, and the settings read from other variables."""
    values["listen_dsn"] = resolve_dsn(listen, {}) if listen else ""
    try:
        if not values["databases"]:
            check_dsn(values["dsn"])
        if values["listen_dsn"]:
            check_dsn(values["listen_dsn"])
    except InvalidDsn as exc:
        raise ConfigError(str(exc)) from None
    # OpenTelemetry's own variable, read here as the SDK reads it; the other OTEL_*
    # (endpoints, sampler, resource) are read by the SDK itself, if tracing is on.
    values["traces_exporter"] = environ.get("OTEL_TRACES_EXPORTER", "")
    # The proxy variables as requests and httpx read them: either case, lower case first.
    for setting in ("https_proxy", "http_proxy", "no_proxy"):
        values[setting] = _either_case(environ, setting)
    # Only the variables an env: secret may name, holding a whsec_ secret: the rest
    # (OUTBOX_DSN with its password first, cloud keys) never reaches the endpoint view.
    secrets = {k: v for k, v in environ.items()
               if env_name_allowed(k) and v.strip().startswith("whsec_")}
    return DispatcherConfig(environ=secrets, **values)


def _either_case(environ: Mapping[str, str], name: str) -> str:
    """The lower-case variable's value if set and not empty, else the upper-case one's."""
    return (environ.get(name.lower(), "").strip()
            or environ.get(name.upper(), "").strip())


def _warn_about_environment(environ: Mapping[str, str], dsn: str) -> None:
    _warn_about_variables(environ)
    hint = nothing_configured(dsn, environ)
    if hint:
        logging.getLogger("dispatcher").warning(
            "%s; trying libpq's defaults (the local socket)", hint)


def _warn_about_variables(environ: Mapping[str, str]) -> None:
    log = logging.getLogger("dispatcher")
    for name, close in unknown_variables(environ):
        log.warning("unknown environment variable %s ignored%s", name,
                    f" (did you mean {close}?)" if close else "")


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    bad = undecodable(argv)
    if bad is not None:
        print(usage_line("outbox-dispatcher", f"argument '{bad}' is not valid UTF-8"), end="",
              file=sys.stderr)
        return EXIT_USAGE
    # Before the options are read, --help included: without its extra nothing here runs.
    missing = extras.missing("outbox-dispatcher", "dispatcher", extras.DISPATCHER)
    if missing is not None:
        print(missing, file=sys.stderr)
        return EXIT_FAILURE
    try:
        config = build_config(argv, os.environ)
    except ConfigError as exc:
        print(f"outbox-dispatcher: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if config.databases:
        return _many(config)
    setup_logging(config.log_format, config.log_level)
    _warn_about_environment(os.environ, config.dsn)
    from dispatcher.app import run

    # asyncio's own event loop: uvloop was measured slower for this process
    # (BENCHMARKS.md, "The hot path"), fewer events/s at more CPU per event.
    try:
        with asyncio.Runner() as runner:
            return runner.run(run(config))
    except KeyboardInterrupt:  # a second Ctrl-C while shutting down
        return 130


def _many(config: DispatcherConfig) -> int:
    """``--databases``: the file read (and its catalog) before anything starts; a bad one
    exits 2, a catalog database that is down is tried again once running."""
    from outbox._shared.database_catalog import first
    from outbox._shared.databases import BadDatabasesFile

    environ = dict(os.environ)
    try:
        listed = first(config.databases, environ)
    except BadDatabasesFile as exc:
        print(f"outbox-dispatcher: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    setup_logging(config.log_format, config.log_level)
    _warn_about_variables(environ)
    from dispatcher.many.supervisor import run

    try:
        with asyncio.Runner() as runner:
            return runner.run(run(config, config.databases, listed, environ))
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())

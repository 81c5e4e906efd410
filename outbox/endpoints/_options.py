"""The endpoint options, written down once: one row per option, read by every other part.

Each :class:`Option` says what an option is called everywhere (its field of
:class:`~outbox.endpoints.EndpointSpec`, which is also its sync file key, its
keyword of ``add`` and ``update`` and its ``list --json`` key; its column of
``outbox.endpoints``; its command-line flags), how text becomes its value (the
parser), what values it takes (the check), its default, and how it is shown.
From :data:`OPTIONS` come the command's ``add`` and ``update`` arguments
(``_cli/endpoints_cmd``), the spec's checks and columns (``_spec``), the
columns the store reads (``_store``), the options a sync compares
(``_sync``) and ``list --json`` (``_shown``, the web view's object for the viewer
role too). The SQL statements name the columns literally (``queries/endpoints.sql``,
``web_endpoint_options``, the viewer's grant): ``tests/unit/test_endpoint_options.py``
holds them and the spec's typed fields to this table, and
``tests/integration/test_schema.py`` the columns' defaults.

The rows are in the order the command's help lists them and a change names
them ("changed billing: url, timeout").
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal

from outbox._shared import endpoint_defaults as defaults
from outbox._shared.secrets import check_secret
from outbox.durations import parse_duration
from outbox.endpoints import _checks as checks
from outbox.errors import InvalidEndpoint

# Upper bounds: generous for any real receiver, small enough to catch a typo
# (a timeout of 3000 s where 30 was meant would pin a lease for an hour).
MAX_ATTEMPTS = 100
MAX_TIMEOUT = 300.0
MAX_BACKOFF = 86400.0
MAX_IN_FLIGHT = 1000
MAX_RATE_LIMIT = 100_000.0
MAX_BATCH = 1000
MAX_BREAKER_FAILURES = 1000
MAX_PENDING = 1_000_000_000
MAX_BREAKER_COOLDOWN = 86400.0
MAX_BREAKER_WINDOW = 86400.0
MAX_KEEP_DEAD = 366 * 86400.0

Check = Callable[[Any, str], Any]
"""(value, field) -> the clean value; InvalidEndpoint naming the field for a bad one."""

Shown = Literal["as is", "masked url", "kind", "names"]
"""How ``list --json`` and ``show`` give an option: as stored; a URL with its query
values and user information masked; a secret as its kind (``whsec``, ``env:NAME``,
under the key ``signing``); header names only, their values hidden."""


class _Required:
    """The default of an option that has none: it must be given."""

    def __repr__(self) -> str:
        return "REQUIRED"


REQUIRED: Final = _Required()


@dataclass(frozen=True, slots=True)
class Parser:
    """How an option given as text (a command line, a quoted sync file value) is read."""

    read: Callable[[str], object]
    wants: str
    """What the text must spell, for "must be {wants}, not '10x'"."""


SECONDS = Parser(lambda text: parse_duration(text).total_seconds(),
                 "a duration such as 30, 30s or 2m")
WHOLE = Parser(int, "a whole number")
NUMBER = Parser(float, "a number")


@dataclass(frozen=True, slots=True)
class Flag:
    """The option on the command line: ``--name VALUE``."""

    name: str
    help: str
    metavar: str | None = None
    repeated: Callable[[list[str]], object] | None = None
    """For a flag given any number of times: its texts -> the option's value."""
    clear: tuple[str, str] | None = None
    """``update``'s flag (and its help) that returns the option to its default."""


@dataclass(frozen=True, slots=True)
class Switch:
    """A yes-or-no option on the command line: two flags, one of them at most; listed
    after the flags that take a value."""

    on: str
    on_help: str
    off: str
    off_help: str


@dataclass(frozen=True, slots=True)
class Option:
    """One endpoint option, everywhere it appears."""

    field: str
    """Its EndpointSpec field, sync file key, keyword of add/update and list --json key."""
    column: str
    """Its column of outbox.endpoints."""
    cli: Flag | Switch
    check: Check
    default: Any
    """What it is when not given (REQUIRED: it must be given); the column's default too."""
    parser: Parser | None = None
    """How text becomes its value; None: text is the value."""
    shown: Shown = "as is"
    viewer: bool = True
    """Whether the viewer role (``outbox grants --viewer``) may read its column: False for
    what may hold a credential or names a file; the web view shows those as null to it."""
    unit: str | None = None
    """The unit ``show`` prints after the number (the JSON gives the bare number)."""
    to_column: Callable[[Any], Any] = lambda value: value
    """The spec's value -> the column's (a tuple of patterns -> a list)."""
    derived: tuple[str, Callable[[Any], Any]] | None = None
    """A column computed from this option's value (events_like from events)."""

    def clean(self, value: object) -> Any:
        """The checked value; InvalidEndpoint naming the option otherwise."""
        return self.check(value, self.field)

    def read(self, value: object) -> object:
        """Text (from a sync file or a command line) to the value it spells; others as they
        are: the check judges them."""
        if self.parser is None or not isinstance(value, str):
            return value
        try:
            return self.parser.read(value.strip())
        except ValueError:
            raise InvalidEndpoint(f"must be {self.parser.wants}, not {value!r}",
                                  self.field) from None

    @property
    def flag(self) -> str:
        """The flag that gives it, for messages (``--header``)."""
        return self.cli.name if isinstance(self.cli, Flag) else self.cli.on

    @property
    def clear_flag(self) -> str | None:
        """``update``'s flag that returns it to its default (``--no-tenant``), if any."""
        return self.cli.clear[0] if isinstance(self.cli, Flag) and self.cli.clear else None

    @property
    def columns(self) -> tuple[str, ...]:
        """Its column and the one derived from it, if any."""
        return (self.column,) if self.derived is None else (self.column, self.derived[0])


def _whole(low: int, high: int) -> Check:
    return lambda value, field: checks.check_int(value, field, low, high)


def _seconds(high: float, *, zero: bool = False) -> Check:
    return lambda value, field: checks.check_number(value, field, 0, high, low_inclusive=zero)


def _optional(check: Check) -> Check:
    """None (no bound, no limit) passes; anything else is checked."""
    return lambda value, field: None if value is None else check(value, field)


def _format(value: object, field: str) -> object:
    if value not in defaults.FORMATS:
        raise InvalidEndpoint(f"must be {' or '.join(defaults.FORMATS)}, not {value!r}", field)
    return value


def _when_full(value: object, field: str) -> object:
    if value not in defaults.WHEN_FULL:
        raise InvalidEndpoint(f"must be {' or '.join(defaults.WHEN_FULL)}, not {value!r}",
                              field)
    return value


def _boolean(value: object, field: str) -> bool:
    if not isinstance(value, bool):
        raise InvalidEndpoint(f"must be true or false, not {value!r}", field)
    return value


def _patterns_given(texts: list[str]) -> list[str]:
    """``--events a.*,b.* --events c``: every pattern, commas separating them too."""
    return [pattern for text in texts for pattern in text.split(",")]


def _headers_given(texts: list[str]) -> dict[str, str]:
    """``--header NAME:VALUE`` given again and again; a name given twice is refused."""
    headers: dict[str, str] = {}
    for text in texts:
        name, value = checks.parse_header(text)
        if name.lower() in (known.lower() for known in headers):
            raise InvalidEndpoint(f"{name!r} is given twice", "headers")
        headers[name] = value
    return headers


def _likes(patterns: Sequence[str]) -> list[str]:
    return [checks.glob_to_like(pattern) for pattern in patterns]


OPTIONS: tuple[Option, ...] = (
    Option("url", "url", Flag("--url", "http:// or https:// address to POST to"),
           lambda value, field: checks.check_url(value), REQUIRED, shown="masked url",
           viewer=False),
    Option("events", "events",
           Flag("--events", "event type glob such as 'mail.*' (repeatable; default '*')",
                "PATTERN", repeated=_patterns_given),
           lambda value, field: checks.check_patterns(value), ("*",), to_column=list,
           derived=("events_like", _likes)),
    Option("secret", "secret",
           Flag("--secret", "whsec_<base64>, or env:NAME read by the dispatcher "
                "(not OUTBOX_* but OUTBOX_SECRET_*, DATABASE_URL, PG*)"),
           lambda value, field: check_secret(value), None, shown="kind", viewer=False),
    Option("max_attempts", "max_attempts",
           Flag("--max-attempts",
                f"default {defaults.DEFAULT_MAX_ATTEMPTS} (with the backoffs: a day)", "N"),
           _whole(1, MAX_ATTEMPTS), defaults.DEFAULT_MAX_ATTEMPTS, WHOLE),
    Option("timeout", "timeout_seconds",
           Flag("--timeout", "per attempt; default 10", "SECONDS"),
           _seconds(MAX_TIMEOUT), defaults.DEFAULT_TIMEOUT, SECONDS, unit="s"),
    Option("min_backoff", "min_backoff_seconds", Flag("--min-backoff", "default 1", "SECONDS"),
           _seconds(MAX_BACKOFF, zero=True), defaults.DEFAULT_MIN_BACKOFF, SECONDS, unit="s"),
    Option("max_backoff", "max_backoff_seconds",
           Flag("--max-backoff", f"default {defaults.DEFAULT_MAX_BACKOFF:g}", "SECONDS"),
           _seconds(MAX_BACKOFF), defaults.DEFAULT_MAX_BACKOFF, SECONDS, unit="s"),
    Option("max_in_flight", "max_in_flight",
           Flag("--max-in-flight", "concurrent requests; default 16", "N"),
           _whole(1, MAX_IN_FLIGHT), defaults.DEFAULT_MAX_IN_FLIGHT, WHOLE),
    Option("rate_limit", "rate_limit",
           Flag("--rate-limit", "default: no limit", "PER_SECOND"),
           _optional(lambda value, field: checks.check_number(
               value, field, 0, MAX_RATE_LIMIT, low_inclusive=False,
               unit="requests per second")),
           None, NUMBER, unit="/s"),
    Option("max_batch", "max_batch", Flag("--max-batch", "events per request; default 1", "N"),
           _whole(1, MAX_BATCH), defaults.DEFAULT_MAX_BATCH, WHOLE),
    Option("format", "format",
           Flag("--format", "default standard-webhooks", "standard-webhooks|cloudevents"),
           _format, "standard-webhooks"),
    Option("headers", "headers",
           Flag("--header", "extra request header (repeatable)", "NAME:VALUE",
                repeated=_headers_given),
           lambda value, field: checks.check_headers(value), {}, shown="names", viewer=False,
           to_column=dict),
    Option("breaker_failures", "breaker_failures",
           Flag("--breaker-failures", "retryable failures within --breaker-window that open "
                "the circuit (if --breaker-rate of its attempts); 0: no breaker; default 10",
                "N"),
           _whole(0, MAX_BREAKER_FAILURES), defaults.DEFAULT_BREAKER_FAILURES, WHOLE),
    Option("breaker_cooldown", "breaker_cooldown_seconds",
           Flag("--breaker-cooldown", "how long the circuit stays open before one probe; "
                "default 30", "SECONDS"),
           _seconds(MAX_BREAKER_COOLDOWN), defaults.DEFAULT_BREAKER_COOLDOWN, SECONDS, unit="s"),
    Option("breaker_window", "breaker_window_seconds",
           Flag("--breaker-window", "the breaker counts the attempts that ended this "
                "recently; default 30", "SECONDS"),
           _seconds(MAX_BREAKER_WINDOW), defaults.DEFAULT_BREAKER_WINDOW, SECONDS, unit="s"),
    Option("breaker_rate", "breaker_rate",
           Flag("--breaker-rate", "the share of those attempts (1-100) that must have "
                "failed, besides --breaker-failures of them, to open the circuit; default 50",
                "PERCENT"),
           lambda value, field: checks.check_number(value, field, 1, 100, low_inclusive=True,
                                                    unit="percent"),
           defaults.DEFAULT_BREAKER_RATE, NUMBER),
    Option("max_pending", "max_pending",
           Flag("--max-pending", "publish() refuses events for this endpoint while it holds "
                "N undelivered deliveries; default: no bound", "N"),
           _optional(_whole(1, MAX_PENDING)), None, WHOLE),
    Option("max_pending_per_tenant", "max_pending_per_tenant",
           Flag("--max-pending-per-tenant", "bounds one tenant's undelivered deliveries at "
                "this endpoint; publish() of that tenant's events past it raises BacklogFull "
                "naming the endpoint and the tenant; other tenants publish as before; "
                "default: no bound", "N"),
           _optional(_whole(1, MAX_PENDING)), None, WHOLE),
    Option("send_tracestate", "send_tracestate",
           Switch("--send-tracestate", "send the event's tracestate beside its traceparent "
                  "(the default)", "--no-tracestate", "send traceparent alone, no tracestate"),
           _boolean, True),
    Option("ca_file", "ca_file",
           Flag("--ca-file", "PEM bundle of the CAs the endpoint's certificate is checked "
                "against instead of the default bundle; a path on the dispatcher's filesystem",
                "PATH"),
           checks.check_path, None, viewer=False),
    Option("client_cert", "client_cert",
           Flag("--client-cert", "client certificate (PEM) shown to the endpoint, mutual "
                "TLS; with --client-key; a path on the dispatcher's filesystem", "PATH"),
           checks.check_path, None, viewer=False),
    Option("client_key", "client_key",
           Flag("--client-key", "the client certificate's private key (PEM, unencrypted); "
                "with --client-cert", "PATH"),
           checks.check_path, None, viewer=False),
    Option("tenant", "tenant",
           Flag("--tenant", "the tenant the endpoint belongs to: it receives only the events "
                "published with that tenant (among those --events matches); default: none, it "
                "receives every tenant's", "TENANT",
                clear=("--no-tenant", "the endpoint belongs to no tenant any more: it "
                       "receives the matching events of every tenant published from now on "
                       "(as --unset tenant)")),
           lambda value, field: checks.check_tenant(value), None),
    Option("description", "description",
           Flag("--description", "the endpoint's own label, free text shown beside its name "
                "(at most 200 printable characters); default: none", "TEXT",
                clear=("--no-description", "the endpoint has no label any more")),
           lambda value, field: checks.check_description(value), None),
    Option("when_full", "when_full",
           Flag("--when-full", "what a full backlog (--max-pending, "
                "--max-pending-per-tenant) does: refuse (publish() raises BacklogFull; the "
                "default) or drop-oldest (publish() never refuses; the oldest pending "
                "deliveries past the bound are discarded)", "refuse|drop-oldest"),
           _when_full, "refuse"),
    Option("keep_dead", "keep_dead_seconds",
           Flag("--keep-dead", "dead letters older than this are discarded by the "
                "retention; default: kept until retried or discarded", "DURATION",
                clear=("--no-keep-dead", "dead letters are kept until retried or "
                       "discarded")),
           _optional(_seconds(MAX_KEEP_DEAD)), None, SECONDS, unit="s"),
    Option("trace_context", "trace_context",
           Switch("--trace-context", "send the event's traceparent and tracestate (the "
                  "default)", "--no-trace-context", "send neither traceparent nor "
                  "tracestate, whatever span publish() ran in"),
           _boolean, True),
)

BY_FIELD: Mapping[str, Option] = {option.field: option for option in OPTIONS}

KEY_COLUMN = "name"
"""The column that names an endpoint: given apart from its options, never changed."""

STORED_COLUMNS: tuple[str, ...] = (
    KEY_COLUMN, *(column for option in OPTIONS for column in option.columns))
"""Every column an endpoint's definition is stored in: what the store writes and reads."""

VIEWER_COLUMNS: tuple[str, ...] = (
    KEY_COLUMN, *(option.column for option in OPTIONS if option.viewer))
"""The columns of the definition that the viewer role may read (and the web view shows it)."""


def default(field: str) -> Any:
    """The option's default, for EndpointSpec's fields."""
    return BY_FIELD[field].default

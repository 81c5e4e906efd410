"""``outbox endpoints``: add, update, show, list, enable, disable, retry-now, remove, ...

(and rotate-secret, sync).

Input is checked completely (an :class:`~outbox.endpoints.EndpointSpec`, a
parsed sync file) before the database is touched, and every change commits
once at the end, so a refused command has written nothing. Options are read
as text and converted here rather than by argparse, so that a bad value gets
one clear line and exit 2 instead of a usage dump.
"""

from __future__ import annotations

import argparse
import re
import sys
from datetime import timedelta
from typing import Any

import psycopg

from outbox import endpoints as store
from outbox._cli import common, endpoints_view
from outbox._present.words import retry_now_said
from outbox._shared.text import counted, first_line
from outbox._shared.urls import shown_url
from outbox.durations import parse_duration
from outbox.endpoints import (
    BY_FIELD,
    OPTIONS,
    REQUIRED,
    EndpointSpec,
    Flag,
    Switch,
    check_secret,
    check_tenant,
    file_warning,
    generate_secret,
    load_sync_file,
    signing_label,
)
from outbox.errors import EndpointBusy, EndpointExists, InvalidEndpoint

_MAX_OVERLAP = timedelta(days=365)
_TLS_OPTIONS = frozenset({"ca_file", "client_cert", "client_key"})


def register(sub: Any) -> None:
    parser = sub.add_parser("endpoints", help="define the endpoints events are delivered to")
    common.add_dsn_option(parser)
    commands = parser.add_subparsers(dest="endpoints_command", metavar="SUBCOMMAND")
    commands.required = True

    add = _command(commands, "add", _add, "add an endpoint")
    add.add_argument("name", metavar="NAME")
    _option_arguments(add, url_required=True)
    update = _command(commands, "update", _update,
                      "change some options of an endpoint in place; the others stay")
    update.add_argument("name", metavar="NAME")
    _option_arguments(update, url_required=False)
    update.add_argument("--unset", action="append", metavar="OPTION", default=[],
                        help="return an option to its default (rate-limit, max-pending, "
                        "max-pending-per-tenant, secret, header, tenant, ...; repeatable)")
    for option in OPTIONS:
        if isinstance(option.cli, Flag) and option.cli.clear is not None:
            flag, text = option.cli.clear
            update.add_argument(flag, dest=_clear_dest(option.field), action="store_true",
                                help=text)
    show = _command(commands, "show", endpoints_view.show,
                    "every option of one endpoint (the secret only as its kind)")
    show.add_argument("name", metavar="NAME")
    show.add_argument("--json", action="store_true", help="machine-readable output")

    listing = _command(commands, "list", endpoints_view.list_endpoints,
                       "show endpoints with their limits (never their secrets)")
    listing.add_argument("--json", action="store_true", help="machine-readable output")
    listing.add_argument("--tenant", metavar="TENANT", help="only the endpoints of this tenant")
    _command(commands, "enable", _enable, "resume deliveries to an endpoint").add_argument(
        "name", metavar="NAME")
    disable = _command(commands, "disable", _disable,
                       "hold deliveries to an endpoint (with --drop: stop sending to it)")
    disable.add_argument("name", metavar="NAME")
    disable.add_argument("--drop", action="store_true",
                         help="stop sending: requests in flight finish, its pending deliveries "
                         "are discarded now (the number is printed), and so is every delivery "
                         "made for it until it is enabled")
    retry = _command(commands, "retry-now", _retry_now,
                     "make an endpoint's pending deliveries due now and its open circuit "
                     "half-open (once it is fixed)")
    retry.add_argument("name", metavar="NAME")
    retry.add_argument("--tenant", metavar="TENANT",
                       help="only this tenant's deliveries (the circuit is the endpoint's)")
    retry.add_argument("--dry-run", action="store_true",
                       help="print how many deliveries would be made due; change nothing")
    remove = _command(commands, "remove", _remove, "remove an endpoint")
    remove.add_argument("name", metavar="NAME")
    remove.add_argument("--force", action="store_true",
                        help="dead-letter its undelivered deliveries")
    rotate = _command(commands, "rotate-secret", _rotate, "install a new signing secret")
    rotate.add_argument("name", metavar="NAME")
    rotate.add_argument("--secret", help="the new secret (default: generate and print one)")
    rotate.add_argument("--overlap", metavar="DURATION", default="24h",
                        help="how long the old secret keeps signing (default 24h)")
    sync = _command(commands, "sync", _sync, "make the endpoints exactly those of a TOML file")
    sync.add_argument("file", metavar="FILE.toml")
    sync.add_argument("--force", action="store_true",
                      help="remove endpoints even with undelivered deliveries")
    sync.add_argument("--dry-run", action="store_true",
                      help="print the plan (added, changed, removed) and change nothing")


def _option_arguments(parser: argparse.ArgumentParser, *, url_required: bool) -> None:
    """The endpoint options, as `add` and `update` take them: one argument per row of the
    options table, the yes-or-no switches after those that take a value."""
    for option in OPTIONS:
        flag = option.cli
        if isinstance(flag, Flag):
            extra: dict[str, Any] = {} if flag.metavar is None else {"metavar": flag.metavar}
            if flag.repeated is not None:
                extra["action"] = "append"
            if option.default is REQUIRED:
                extra["required"] = url_required
            parser.add_argument(flag.name, dest=option.field, help=flag.help, **extra)
    for option in OPTIONS:
        switch = option.cli
        if isinstance(switch, Switch):
            both = parser.add_mutually_exclusive_group()
            both.add_argument(switch.on, dest=option.field, action="store_const", const=True,
                              help=switch.on_help)
            both.add_argument(switch.off, dest=option.field, action="store_const",
                              const=False, help=switch.off_help)


def _clear_dest(field: str) -> str:
    return f"clear_{field}"


def _command(commands: Any, name: str, func: Any, text: str) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = commands.add_parser(name, help=text, description=text)
    common.add_dsn_option(parser)
    parser.set_defaults(func=func)
    return parser


# The options whose sync file key differs from their flag's word (max_attempts, --max-attempts),
# longest first, to name them as the command line spells them in a message of two options.
_OPTION_WORD = re.compile(r"\b(?:" + "|".join(sorted(
    (option.field for option in OPTIONS if "_" in option.field), key=len, reverse=True))
    + r")\b")


def _usage(exc: InvalidEndpoint) -> common.UsageError:
    """The message, with the option named as on the command line (--max-attempts)."""
    if exc.field is None or exc.field == "name":
        # A problem of two options (min_backoff above max_backoff) names them as a sync
        # file spells them; on the command line they are --min-backoff, --max-backoff.
        return common.UsageError(_OPTION_WORD.sub(
            lambda m: "--" + m.group(0).replace("_", "-"), str(exc)))
    known = BY_FIELD.get(exc.field)
    option = known.flag if known is not None else "--" + exc.field.replace("_", "-")
    return common.UsageError(f"{option} {exc.problem}")


def _given_options(args: argparse.Namespace) -> dict[str, object]:
    """The options given on the command line, keyed like EndpointSpec's fields."""
    options: dict[str, object] = {}
    for option in OPTIONS:
        given = getattr(args, option.field)
        if given is None:
            continue
        repeated = option.cli.repeated if isinstance(option.cli, Flag) else None
        options[option.field] = given if repeated is None else repeated(given)
    return options


def _add(args: argparse.Namespace) -> int:
    try:
        options = _given_options(args)
        options.setdefault("headers", {})
        spec = EndpointSpec.from_options(args.name, options)
        with common.connect(args) as conn:
            store.add_endpoint(conn, spec)
    except EndpointExists as exc:
        raise common.UsageError(f"{exc}; change its options with `outbox endpoints update "
                                f"{exc.name} ...`") from None
    except InvalidEndpoint as exc:
        raise _usage(exc) from None
    _warn_about_files(spec, cli=True)
    signing = signing_label(spec.secret) or "unsigned"
    # The tenant decides whose events it receives: said with the patterns it narrows.
    whose = f" of tenant {spec.tenant}" if spec.tenant is not None else ""
    print(f"added endpoint {spec.name}: {shown_url(spec.url)} for {', '.join(spec.events)}"
          f"{whose} ({signing})")
    return common.EXIT_OK


# `--unset` takes an option by its sync file key with dashes or by its flag's word.
_UNSETTABLE = {word: option.field for option in OPTIONS if option.default is not REQUIRED
               for word in (option.field.replace("_", "-"), option.flag.removeprefix("--"))}


def _update(args: argparse.Namespace) -> int:
    unset = []
    for text in args.unset:
        field = _UNSETTABLE.get(text.removeprefix("--"))
        if field is None:
            raise common.UsageError(f"argument --unset: {text!r} is not an option that "
                                    "has a default")
        unset.append(field)
    for cleared in OPTIONS:
        if getattr(args, _clear_dest(cleared.field), False):
            if getattr(args, cleared.field) is not None:
                raise common.UsageError(f"argument {cleared.clear_flag}: not allowed "
                                        f"with {cleared.flag}")
            unset.append(cleared.field)
    try:
        options = _given_options(args)
        check_tenant(options.get("tenant"))  # before the database, as add checks it
        with common.connect(args) as conn:
            changed = store.update_endpoint(conn, args.name, options, unset=unset)
            if _TLS_OPTIONS & set(options):
                _warn_about_files(store.spec_of(conn, args.name), cli=True)
    except InvalidEndpoint as exc:
        raise _usage(exc) from None
    if changed:
        print(f"updated endpoint {args.name}: {', '.join(changed)}")
    else:
        print(f"endpoint {args.name} unchanged: its options were already so")
    return common.EXIT_OK


def _warn_about_files(spec: EndpointSpec, *, cli: bool) -> None:
    """Say so when the TLS files the endpoint names cannot be used as read from here; the
    options named as the command line spells them (``cli``) or as the sync file does."""
    warning = file_warning(spec)
    if warning is not None:
        if cli:
            warning = _OPTION_WORD.sub(lambda m: "--" + m.group(0).replace("_", "-"), warning)
        print(warning, file=sys.stderr)


def _enable(args: argparse.Namespace) -> int:
    with common.connect(args) as conn:
        late = store.set_enabled(conn, args.name, enabled=True)
    suffix = (f"; discarded {counted(late, 'delivery', 'deliveries')} made while it was "
              "disabled with --drop" if late else "")
    print(f"enabled endpoint {args.name}{suffix}")
    return common.EXIT_OK


def _disable(args: argparse.Namespace) -> int:
    reason = "disabled by an operator" + (", dropping what is published for it"
                                          if args.drop else "")
    with common.connect(args) as conn:
        discarded = store.set_enabled(conn, args.name, enabled=False, reason=reason,
                                      by="operator", drop=args.drop)
    if not args.drop:
        print(f"disabled endpoint {args.name}; its deliveries wait until it is enabled again")
        return common.EXIT_OK
    # The number alone on stdout, for scripts, as retry-now prints its own.
    print(discarded)
    print(f"disabled endpoint {args.name} and discarded its "
          f"{counted(discarded, 'pending delivery', 'pending deliveries')}; "
          "requests in flight finish, and what is published for it is discarded until it is "
          "enabled", file=sys.stderr)
    return common.EXIT_OK


def _retry_now(args: argparse.Namespace) -> int:
    try:
        tenant = check_tenant(args.tenant)
    except InvalidEndpoint as exc:
        raise _usage(exc) from None
    try:
        with common.connect(args) as conn:
            done = store.retry_endpoint_now(conn, args.name, tenant=tenant,
                                            dry_run=args.dry_run)
            if args.dry_run:
                conn.rollback()
    except psycopg.errors.InsufficientPrivilege as exc:
        raise common.CommandFailed(
            f"retry-now needs a role that may change deliveries (the operator's): "
            f"{first_line(exc)}") from None
    print(f"{done.due}")
    print(retry_now_said(done, args.name, tenant=tenant, dry_run=args.dry_run),
          file=sys.stderr)
    return common.EXIT_OK


def _busy(exc: EndpointBusy) -> common.CommandFailed:
    """The refusal, with the command line's remedy (the functions name ``force=True``)."""
    return common.CommandFailed(f"{exc.refusal}; use --force to make them dead letters and "
                                "remove anyway")


def _remove(args: argparse.Namespace) -> int:
    try:
        with common.connect(args) as conn:
            dead = store.remove_endpoint(conn, args.name, force=args.force)
    except EndpointBusy as exc:
        raise _busy(exc) from None
    suffix = (f"; {counted(dead, 'undelivered delivery', 'undelivered deliveries')} "
              f"became {'a dead letter' if dead == 1 else 'dead letters'}" if dead else "")
    print(f"removed endpoint {args.name}{suffix}")
    return common.EXIT_OK


def _rotate(args: argparse.Namespace) -> int:
    try:
        overlap = parse_duration(args.overlap)
    except ValueError as exc:
        raise common.UsageError(f"--overlap: {exc}") from None
    if overlap > _MAX_OVERLAP:
        raise common.UsageError("--overlap must not be longer than 365d")
    generated = args.secret is None
    secret = generate_secret() if generated else args.secret
    try:
        check_secret(secret)
    except InvalidEndpoint as exc:
        raise _usage(exc) from None
    with common.connect(args) as conn:
        rotation = store.rotate_endpoint_secret(conn, args.name, secret, overlap)
    note = f"rotated the secret of endpoint {args.name}"
    retired, older = rotation.retired_until, rotation.signs_until
    if retired is not None:
        note += ("; the previous one keeps signing too until "
                 f"{retired.isoformat(timespec='seconds')}")
    if older is not None and (retired is None or older > retired):
        note += (f"; {'older ones' if retired is not None else 'earlier secrets'} keep signing "
                 f"until {older.isoformat(timespec='seconds')}")
    if generated:
        # The secret alone on stdout, once, for the operator to hand to the receiver.
        print(f"{note}; the new secret follows, give it to the receiver:", file=sys.stderr)
        print(secret)
    else:
        print(note)
    return common.EXIT_OK


def _sync(args: argparse.Namespace) -> int:
    try:
        specs = load_sync_file(args.file)
    except InvalidEndpoint as exc:
        raise common.UsageError(str(exc)) from None
    if args.dry_run:
        with common.connect(args) as conn:
            report = store.plan_endpoints_sync(conn, specs)
            conn.rollback()
        return endpoints_view.print_plan(report, force=args.force)
    try:
        with common.connect(args) as conn:
            report = store.sync_endpoints(conn, specs, force=args.force)
    except EndpointBusy as exc:
        raise _busy(exc) from None
    named = set(report.added) | {name for name, options in report.changed.items()
                                 if _TLS_OPTIONS & set(options)}
    for spec in specs:
        if spec.name in named:
            _warn_about_files(spec, cli=False)
    for name in report.added:
        common.print_line(f"added {name}")
    for name, options in report.changed.items():
        common.print_line(f"changed {name}: {', '.join(options)}")
    for name, dead in report.removed.items():
        them = counted(dead, "undelivered delivery", "undelivered deliveries")
        common.print_line(f"removed {name}" + (f" ({them} dead-lettered)" if dead else ""))
    print(f"sync: {len(report.added)} added, {len(report.changed)} changed, "
          f"{len(report.removed)} removed, {len(report.unchanged)} unchanged")
    return common.EXIT_OK

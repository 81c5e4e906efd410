"""Pure pieces of the operator's view: trace ids, usage lines, argument checks, counted nouns,
printable text."""

from __future__ import annotations

import argparse
from datetime import timedelta

import pytest

from dispatcher.cli import unknown_variables
from outbox._present.args import MAX_COUNT, moment, positive_int, type_pattern
from outbox._shared.dsn import InvalidDsn, check_dsn, nothing_configured
from outbox._shared.text import counted, printable
from outbox._shared.usage import undecodable, usage_line
from outbox.history import trace_id


def test_trace_id_of_a_traceparent() -> None:
    """The 32-hex-digit trace id of a valid traceparent; None for anything else."""
    trace = "4bf92f3577b34da6a3ce929d0e0e4736"
    assert trace_id(f"00-{trace}-00f067aa0ba902b7-01") == trace
    assert trace_id(f"00-{trace.upper()}-00f067aa0ba902b7-01") == trace
    for bad in (None, "", "00-xyz-00f067aa0ba902b7-01", f"00-{'0' * 32}-00f067aa0ba902b7-01",
                f"00-{trace}"):
        assert trace_id(bad) is None


def test_usage_line_is_one_line_with_a_hint() -> None:
    """prog: error: message (see `prog --help`), and a hint for a value starting with '-'."""
    assert usage_line("outbox purge", "argument --x: bad") == (
        "outbox purge: error: argument --x: bad (see `outbox purge --help`)\n")
    assert "--older-than=-1d" in usage_line("outbox purge",
                                            "argument --older-than: expected one argument")


def test_undecodable_arguments_are_found() -> None:
    """Bytes that are not UTF-8 come as surrogates; they are found and shown escaped."""
    assert undecodable(["status", "café"]) is None
    assert undecodable(["remove", b"caf\xe9".decode("utf-8", "surrogateescape")]) == "caf\\xe9"


def test_argument_checks_keep_values_in_range() -> None:
    """Counts at most MAX_COUNT, times no earlier than year 1, patterns as --events takes."""
    assert positive_int(str(MAX_COUNT)) == MAX_COUNT
    with pytest.raises(argparse.ArgumentTypeError, match="at most"):
        positive_int(str(MAX_COUNT + 1))
    assert moment("10m") == timedelta(minutes=10)
    with pytest.raises(argparse.ArgumentTypeError, match="before year 1"):
        moment("99999999d")
    assert type_pattern("mail.*") == "mail.*"
    with pytest.raises(argparse.ArgumentTypeError, match="invalid pattern"):
        type_pattern("mail..x")


def test_dsn_hints() -> None:
    """A foreign scheme is refused; no database anywhere gets a hint, one named none."""
    with pytest.raises(InvalidDsn, match="PostgreSQL"):
        check_dsn("mysql://u@h/db")
    check_dsn("postgresql://u@h/db")
    assert nothing_configured("", {}) is not None
    assert nothing_configured("", {"PGHOST": "db"}) is None
    assert nothing_configured("host=db", {}) is None


def test_unknown_variables_and_their_likely_names() -> None:
    """A misspelt option variable is found with the name meant; secrets' names are not."""
    found = unknown_variables({"OUTBOX_CONCURENCY": "8", "OUTBOX_SECRET_X": "s",
                               "OUTBOX_DSN": "x", "OUTBOX_LOG_LEVEL": "info", "HOME": "/"})
    assert found == [("OUTBOX_CONCURENCY", "OUTBOX_CONCURRENCY")]


def test_counted_nouns() -> None:
    """1 attempt, 2 attempts; 1 delivery, 0 deliveries."""
    assert [counted(n, "attempt") for n in (1, 2)] == ["1 attempt", "2 attempts"]
    assert [counted(n, "delivery", "deliveries") for n in (0, 1)] == [
        "0 deliveries", "1 delivery"]


def test_printable_escapes_controls_and_bidi_marks_visibly() -> None:
    """C0 (tab and newline too), DEL, C1 and the bidi controls become escapes; the rest stays."""
    assert printable("a\x1b[31mb\tc\nd\x7fe\x9bf") == "a\\x1b[31mb\\x09c\\x0ad\\x7fe\\x9bf"
    for mark in ("\u061c", "\u200e", "\u200f", *map(chr, range(0x202A, 0x202F)),
                 *map(chr, range(0x2066, 0x206A))):
        assert printable(f"x{mark}y") == f"x\\u{ord(mark):04x}y"
    assert printable("café ok ✓ \u200b") == "café ok ✓ \u200b"

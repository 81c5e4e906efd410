"""Pure pieces of the operator commands: id floors, --since, ages, event ids."""

from __future__ import annotations

import argparse
import uuid
from datetime import UTC, datetime, timedelta, timezone

import pytest

from outbox._cli.dead_cmd import event_id, positive_int, rfc3339
from outbox._cli.replay_cmd import since
from outbox._event import uuid7
from outbox._present.words import format_age
from outbox.retention import uuid7_floor


def test_uuid7_floor_sorts_below_ids_made_at_or_after_its_moment() -> None:
    """The floor of a moment is below every UUIDv7 made then or later, above earlier ones."""
    before = uuid7()
    moment = datetime.now(UTC)
    after = uuid7()
    floor = uuid7_floor(moment)
    assert after >= floor
    assert uuid7_floor(moment - timedelta(seconds=1)) <= before
    assert uuid7_floor(datetime(1, 1, 1, tzinfo=UTC)) == uuid.UUID(int=0)


def test_since_accepts_timestamps_with_or_without_zone_and_durations() -> None:
    """--since: ISO 8601 (no zone means UTC) or a duration ago; anything else is a usage error."""
    assert since("2024-05-01T12:00:00") == datetime(2024, 5, 1, 12, tzinfo=UTC)
    assert since("2024-05-01T12:00:00Z") == datetime(2024, 5, 1, 12, tzinfo=UTC)
    east = since("2024-05-01 14:00:00+02:00")
    assert east == datetime(2024, 5, 1, 12, tzinfo=UTC)
    assert isinstance(east, datetime)
    assert east.utcoffset() == timezone(timedelta(hours=2)).utcoffset(None)
    assert since("2h") == timedelta(hours=2)
    with pytest.raises(argparse.ArgumentTypeError, match="ISO 8601"):
        since("last tuesday")
    with pytest.raises(argparse.ArgumentTypeError):
        since("1e300")  # a number of seconds beyond any timedelta


def test_argument_types_reject_malformed_values() -> None:
    """Event ids must be UUIDs and limits whole numbers of at least one."""
    assert event_id(" 00000000-0000-0000-0000-000000000001 ") == uuid.UUID(int=1)
    for bad in ("42", "", "not-a-uuid"):
        with pytest.raises(argparse.ArgumentTypeError):
            event_id(bad)
    assert positive_int("5") == 5
    for bad in ("0", "-1", "x", "1.5"):
        with pytest.raises(argparse.ArgumentTypeError):
            positive_int(bad)


def test_human_formats() -> None:
    """Ages read at a glance; failure times are RFC 3339 in UTC."""
    assert [format_age(s) for s in (0, 59.9, 61, 3725, 180000)] == [
        "0s", "59s", "1m01s", "1h02m", "2d02h"]
    moment = datetime(2024, 5, 1, 14, 0, 0, 5, tzinfo=timezone(timedelta(hours=2)))
    assert rfc3339(moment) == "2024-05-01T12:00:00.000005Z"
    assert rfc3339(moment, seconds=True) == "2024-05-01T12:00:00Z"
    assert rfc3339(None) is None


def test_both_commands_refuse_a_bad_duration_in_the_same_words() -> None:
    """`outbox purge --older-than` and the dispatcher's duration options say the same."""
    from dispatcher.cli import build_parser
    from outbox._cli.purge_cmd import duration

    with pytest.raises(argparse.ArgumentTypeError) as purge:
        duration("7 days")
    for option in ("--retention", "--lease"):
        action = next(a for a in build_parser()._actions if option in a.option_strings)
        assert callable(action.type)
        with pytest.raises(argparse.ArgumentTypeError) as dispatcher:
            action.type("7 days")
        assert str(dispatcher.value) == str(purge.value)


def test_the_envelope_and_the_command_write_a_moment_alike() -> None:
    """A moment the dispatcher sends and one `outbox dead list --json` prints are one text."""
    import json
    import uuid

    from dispatcher.policy.envelope import encode
    from dispatcher.policy.model import Endpoint, EventData

    moment = datetime(2024, 5, 1, 14, 0, 0, 5, tzinfo=timezone(timedelta(hours=2)))
    event = EventData(id=uuid.uuid4(), type="t", key=None, payload="{}", headers={},
                      created_at=moment)
    _, body = encode(Endpoint(id=1, name="e", url="http://127.0.0.1:9/"), [event], moment)
    on_the_wire = json.loads(body)["timestamp"]
    assert on_the_wire == rfc3339(moment) == "2024-05-01T12:00:00.000005Z"

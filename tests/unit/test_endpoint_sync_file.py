"""Sync files and sync plans: the TOML reading and the add/change/remove diff, no database."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from outbox.endpoints import EndpointSpec
from outbox.endpoints._store import StoredEndpoint
from outbox.endpoints._sync import load_sync_file, plan_sync
from outbox.errors import InvalidEndpoint

URL = "https://hooks.example.com/events"


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "endpoints.toml"
    path.write_text(text)
    return path


def stored(spec: EndpointSpec, endpoint_id: int = 1) -> StoredEndpoint:
    now = datetime.now(UTC)
    return StoredEndpoint(id=endpoint_id, enabled=True, disabled_reason=None, created_at=now,
                          updated_at=now, columns=spec.columns())


def test_file_with_every_option(tmp_path: Path) -> None:
    """Every option is read under its underscore spelling, headers as a table."""
    path = write(tmp_path, f"""
[endpoints.workflow]
url = "{URL}"
events = ["mail.*", "order.created"]
secret = "env:OUTBOX_SECRET_WORKFLOW"
max_attempts = 12
timeout = 5
min_backoff = 0.5
max_backoff = "10m"
max_in_flight = 4
rate_limit = 20
max_batch = 50
format = "cloudevents"
headers = {{ Authorization = "Bearer t", x-tenant = "acme" }}
breaker_failures = 0
breaker_cooldown = "2m"
breaker_window = "1m"
breaker_rate = 20
max_pending = 10000
max_pending_per_tenant = 500

[endpoints.audit]
url = "http://audit.internal/"
""")
    workflow, audit = load_sync_file(path)
    assert workflow == EndpointSpec(
        name="workflow", url=URL, events=("mail.*", "order.created"),
        secret="env:OUTBOX_SECRET_WORKFLOW", max_attempts=12, timeout=5.0, min_backoff=0.5,
        max_backoff=600.0, max_in_flight=4, rate_limit=20.0, max_batch=50,
        format="cloudevents", headers={"authorization": "Bearer t", "x-tenant": "acme"},
        breaker_failures=0, breaker_cooldown=120.0, breaker_window=60.0, breaker_rate=20.0,
        max_pending=10000,
        max_pending_per_tenant=500)
    assert audit == EndpointSpec(name="audit", url="http://audit.internal/")


@pytest.mark.parametrize(("text", "message"), [
    ('[endpoints.a]\nurl = "http://x/"\nretries = 3\n', r"endpoints\.a\.retries is not a known"),
    ('[endpoint.a]\nurl = "http://x/"\n', "unknown key 'endpoint'"),
    ('title = "x"\n', "unknown key 'title'"),
    ("", "no \\[endpoints.NAME\\] tables"),
    ('[endpoints.a]\nurl = "ftp://x/"\n', r"endpoints\.a\.url .*http://"),
    ('[endpoints.a]\nurl = "http://x/"\nevents = []\n', r"endpoints\.a\.events"),
    ('[endpoints."bad name"]\nurl = "http://x/"\n', "not a valid endpoint name"),
    ('[endpoints.a]\nurl = "http://x/"\nheaders = { Host = "y" }\n', "headers 'Host'"),
    ('[endpoints.a]\nurl = "http://x/"\nsecret = "env:OUTBOX_DSN"\n',
     r"endpoints\.a\.secret env:OUTBOX_DSN is not allowed"),
    ('[endpoints.a]\nurl = "http://x/"\nmax_attempts = 0\n', r"endpoints\.a\.max_attempts"),
    ('[endpoints.a]\nurl = "http://x/"\nmax_attempts = true\n', r"endpoints\.a\.max_attempts"),
    ("endpoints = 3\n", "must be a table"),
    ("endpoints.a = 3\n", r"endpoints\.a must be a table"),
    ('[endpoints.a]\nurl = "http://x/\n', "not valid TOML"),
    ('[endpoints.a]\nevents = ["*"]\n', r"endpoints\.a\.url is required"),
    ('[endpoints.a]\nurl = "http://x/"\nmax_pending_per_tenant = 0\n',
     r"endpoints\.a\.max_pending_per_tenant must be"),
    ('[endpoints.a]\nurl = "http://x/"\nmax_pending_per_tenant = "x"\n',
     r"endpoints\.a\.max_pending_per_tenant must be a whole number"),
])
def test_bad_files_are_refused(tmp_path: Path, text: str, message: str) -> None:
    """Unknown keys, bad values and TOML syntax errors are refused, naming the file and key."""
    path = write(tmp_path, text)
    with pytest.raises(InvalidEndpoint, match=message) as info:
        load_sync_file(path)
    assert str(path) in str(info.value)


@pytest.mark.parametrize(("content", "message"), [
    ('[endpoints.caf\u00e9]\nurl = "https://x/"\n'.encode("latin-1"), "not UTF-8"),
    (b"endpoints = {}\nx = " + b"[" * 5000 + b"]" * 5000 + b"\n", "too deeply"),
    (b"endpoints = {}\nx = " + b"{a = " * 5000 + b"1" + b"}" * 5000 + b"\n",
     "too deeply"),
])
def test_files_the_toml_parser_chokes_on_are_refused(tmp_path: Path, content: bytes,
                                                     message: str) -> None:
    """Another encoding, or nesting past the parser's recursion, is refused, not a crash."""
    path = tmp_path / "endpoints.toml"
    path.write_bytes(content)
    with pytest.raises(InvalidEndpoint, match=message) as info:
        load_sync_file(path)
    assert str(path) in str(info.value)


def test_missing_file(tmp_path: Path) -> None:
    """A missing file is refused with its name."""
    with pytest.raises(InvalidEndpoint, match=r"cannot read .*nope\.toml"):
        load_sync_file(tmp_path / "nope.toml")


def test_empty_endpoints_table_means_none(tmp_path: Path) -> None:
    """`endpoints = {}` says on purpose that there are no endpoints."""
    assert load_sync_file(write(tmp_path, "endpoints = {}\n")) == []


def test_plan_adds_changes_removes_and_keeps() -> None:
    """The plan adds new names, replaces differing ones, removes absent ones, keeps equal ones."""
    same = EndpointSpec(name="same", url=URL, max_attempts=3)
    old = EndpointSpec(name="moved", url=URL, events=("a.*",), timeout=5)
    gone = EndpointSpec(name="gone", url=URL)
    new_moved = EndpointSpec(name="moved", url="https://other.example/", events=("b.*",))
    fresh = EndpointSpec(name="fresh", url=URL)
    plan = plan_sync([stored(same, 1), stored(old, 2), stored(gone, 3)],
                     [same, new_moved, fresh])
    assert plan.add == [fresh]
    assert plan.change == {"moved": ["url", "events", "timeout"]}
    assert plan.remove == ["gone"]
    assert plan.unchanged == ["same"]


def test_plan_reports_a_secret_change_without_its_value() -> None:
    """A changed secret is reported as the option name only."""
    before = EndpointSpec(name="a", url=URL, secret="env:OUTBOX_SECRET_ONE")
    after = EndpointSpec(name="a", url=URL, secret="env:OUTBOX_SECRET_TWO")
    assert plan_sync([stored(before)], [after]).change == {"a": ["secret"]}


def test_plan_names_a_changed_or_dropped_per_tenant_bound() -> None:
    """Setting, changing or leaving out max_pending_per_tenant is a change of that option."""
    unbounded = EndpointSpec(name="a", url=URL)
    bounded = EndpointSpec(name="a", url=URL, max_pending_per_tenant=100)
    wider = EndpointSpec(name="a", url=URL, max_pending_per_tenant=200)
    assert plan_sync([stored(unbounded)], [bounded]).change == {"a": ["max_pending_per_tenant"]}
    assert plan_sync([stored(bounded)], [wider]).change == {"a": ["max_pending_per_tenant"]}
    assert plan_sync([stored(bounded)], [unbounded]).change == {"a": ["max_pending_per_tenant"]}
    assert plan_sync([stored(bounded)], [bounded]).unchanged == ["a"]

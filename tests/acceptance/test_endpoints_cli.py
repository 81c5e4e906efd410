"""`outbox endpoints ...` run as a real command against a real database."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import psycopg
import pytest

import outbox
from outbox.endpoints import EndpointSpec
from outbox.endpoints import _store as store
from tests.support.cli import run_outbox

SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
URL = "https://hooks.example.com/events"


def outbox_cmd(dsn: str | None, *args: str, env: dict[str, str] | None = None,
               ) -> subprocess.CompletedProcess[str]:
    return run_outbox(dsn, "endpoints", *args, env=env)


def snapshot(dsn: str) -> list[tuple[Any, ...]]:
    with psycopg.connect(dsn) as conn:
        return conn.execute("SELECT * FROM outbox.endpoints ORDER BY id").fetchall()


def endpoint(dsn: str, name: str) -> dict[str, Any]:
    with psycopg.connect(dsn, row_factory=psycopg.rows.dict_row) as conn:
        row = conn.execute("SELECT * FROM outbox.endpoints WHERE name = %s "
                           "AND removed_at IS NULL", (name,)).fetchone()
    assert row is not None
    return row


def add(dsn: str, name: str, **options: Any) -> None:
    """Set-up by the library, sparing a subprocess where the command is not under test."""
    options.setdefault("url", URL)
    with psycopg.connect(dsn) as conn:
        store.add_endpoint(conn, EndpointSpec(name=name, **options))


def publish(dsn: str, count: int) -> None:
    with psycopg.connect(dsn) as conn:
        for n in range(count):
            outbox.publish(conn, "mail.received", {"n": n})


def ok(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_add_and_list(dsn: str) -> None:
    """add stores the options; list shows them in a table and as JSON."""
    ok(outbox_cmd(dsn, "add", "workflow", "--url", URL, "--events", "mail.*",
                  "--events", "order.created", "--secret", "env:OUTBOX_SECRET_WF",
                  "--max-attempts", "12", "--timeout", "30s", "--rate-limit", "5",
                  "--format", "cloudevents", "--header", "X-Tenant: acme",
                  "--breaker-failures", "5", "--breaker-cooldown", "1m", "--max-pending", "500",
                  "--breaker-window", "2m", "--breaker-rate", "25"))
    table = ok(outbox_cmd(dsn, "list"))
    assert "workflow" in table
    assert "mail.*,order.created" in table
    assert "env:OUTBOX_SECRET_WF" in table
    [listed] = json.loads(ok(outbox_cmd(dsn, "list", "--json")))
    assert listed["events"] == ["mail.*", "order.created"]
    assert (listed["max_attempts"], listed["timeout"], listed["rate_limit"]) == (12, 30.0, 5.0)
    assert (listed["format"], listed["signing"]) == ("cloudevents", "env:OUTBOX_SECRET_WF")
    assert (listed["enabled"], listed["disabled_reason"]) == (True, None)
    assert (listed["max_batch"], listed["max_in_flight"]) == (1, 16)
    assert (listed["breaker_failures"], listed["breaker_cooldown"]) == (5, 60.0)
    assert (listed["breaker_window"], listed["breaker_rate"]) == (120.0, 25.0)
    assert listed["max_pending"] == 500
    assert list(listed["headers"]) == ["x-tenant"]


@pytest.mark.parametrize("args", [
    ["--url", "ftp://hooks.example.com/"],
    ["--url", "hooks.example.com/events"],
    ["--url", "https://user:pw@hooks.example.com/"],
    ["--url", "https://hooks.example.com/#frag"],
    ["--url", URL, "--events", "mail..x"],
    ["--url", URL, "--secret", "hunter2"],
    ["--url", URL, "--secret", "whsec_c2hvcnQ="],
    ["--url", URL, "--secret", "env:OUTBOX_DSN"],
    ["--url", URL, "--secret", "env:DATABASE_URL"],
    ["--url", URL, "--max-attempts", "0"],
    ["--url", URL, "--timeout", "301"],
    ["--url", URL, "--min-backoff", "60", "--max-backoff", "5"],
    ["--url", URL, "--max-in-flight", "0"],
    ["--url", URL, "--rate-limit", "-1"],
    ["--url", URL, "--max-batch", "1001"],
    ["--url", URL, "--format", "json"],
    ["--url", URL, "--breaker-failures", "-1"],
    ["--url", URL, "--breaker-failures", "many"],
    ["--url", URL, "--breaker-cooldown", "0"],
    ["--url", URL, "--breaker-window", "0"],
    ["--url", URL, "--breaker-window", "-5s"],
    ["--url", URL, "--breaker-window", "soon"],
    ["--url", URL, "--breaker-rate", "0"],
    ["--url", URL, "--breaker-rate", "101"],
    ["--url", URL, "--breaker-rate", "half"],
    ["--url", URL, "--max-pending", "0"],
    ["--url", URL, "--max-pending", "lots"],
    ["--url", URL, "--max-pending-per-tenant", "0"],
    ["--url", URL, "--max-pending-per-tenant", "-1"],
    ["--url", URL, "--max-pending-per-tenant", "x"],
    ["--url", URL, "--max-pending-per-tenant", "1000000001"],
    ["--url", URL, "--header", "Content-Type: text/plain"],
    ["--url", URL, "--header", "X-A: 1", "--header", "x-a: 2"],
    ["--url", URL, "--header", "X-Api-Key: clé-secrète"],
    ["--url", URL, "--header", "X-Note: a\u00a0b"],
])
def test_bad_add_is_refused_with_exit_2_and_nothing_written(dsn: str, args: list[str]) -> None:
    """Each bad URL, pattern or option: exit 2, one line on stderr, the table unchanged."""
    add(dsn, "existing")
    before = snapshot(dsn)
    result = outbox_cmd(dsn, "add", "hooks", *args)
    assert result.returncode == 2, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert "Traceback" not in result.stderr
    assert result.stdout == ""
    assert snapshot(dsn) == before


@pytest.mark.parametrize(("value", "message"), [
    ("0", "--max-pending-per-tenant must be"), ("-1", "--max-pending-per-tenant must be"),
    ("x", "--max-pending-per-tenant must be a whole number, not 'x'"),
])
def test_bad_per_tenant_bound_is_refused_by_add_and_update(dsn: str, value: str,
                                                           message: str) -> None:
    """add and update refuse a per-tenant bound that is not 1 or more: exit 2, one line, no
    traceback, naming the option as typed, nothing written."""
    add(dsn, "hooks", max_pending_per_tenant=5)
    before = snapshot(dsn)
    for args in (["add", "other", "--url", URL], ["update", "hooks"]):
        result = outbox_cmd(dsn, *args, "--max-pending-per-tenant", value)
        assert result.returncode == 2, result.stderr
        [line] = result.stderr.strip().splitlines()
        assert message in line
        assert "Traceback" not in result.stderr
        assert snapshot(dsn) == before


def test_bad_name_and_existing_name_refused(dsn: str) -> None:
    """A malformed name, or a name already in use, is exit 2 with a clear message."""
    add(dsn, "hooks")
    before = snapshot(dsn)
    bad = outbox_cmd(dsn, "add", "bad name", "--url", URL)
    assert bad.returncode == 2
    assert "not a valid endpoint name" in bad.stderr
    dup = outbox_cmd(dsn, "add", "hooks", "--url", "https://other.example.com/")
    assert dup.returncode == 2
    assert "already exists" in dup.stderr
    assert snapshot(dsn) == before


@pytest.mark.parametrize("args", [["enable", "nope"], ["disable", "nope"], ["remove", "nope"],
                                  ["rotate-secret", "nope"]])
def test_unknown_endpoint_is_exit_1(dsn: str, args: list[str]) -> None:
    """enable, disable, remove and rotate-secret of an unknown name: exit 1, 'no endpoint named'."""
    result = outbox_cmd(dsn, *args)
    assert result.returncode == 1
    assert "no endpoint named nope" in result.stderr


def test_disable_then_enable_clears_the_reason(dsn: str) -> None:
    """disable records a reason shown by list; enable clears it."""
    add(dsn, "hooks")
    ok(outbox_cmd(dsn, "disable", "hooks"))
    [listed] = json.loads(ok(outbox_cmd(dsn, "list", "--json")))
    assert listed["enabled"] is False
    assert listed["disabled_reason"]
    ok(outbox_cmd(dsn, "enable", "hooks"))
    [listed] = json.loads(ok(outbox_cmd(dsn, "list", "--json")))
    assert (listed["enabled"], listed["disabled_reason"]) == (True, None)


def test_list_never_prints_a_secret(dsn: str) -> None:
    """list and list --json show that signing is on, never the secret or a header value."""
    ok(outbox_cmd(dsn, "add", "hooks", "--url", URL, "--secret", SECRET,
                  "--header", "Authorization: Bearer sesame-token"))
    ok(outbox_cmd(dsn, "rotate-secret", "hooks"))
    for args in (["list"], ["list", "--json"]):
        out = ok(outbox_cmd(dsn, *args))
        assert SECRET[6:] not in out
        assert "sesame-token" not in out
        assert "whsec_" not in out
    [listed] = json.loads(ok(outbox_cmd(dsn, "list", "--json")))
    assert listed["signing"] == "whsec"


def test_query_values_are_masked_wherever_the_url_is_shown(dsn: str) -> None:
    """A token in the URL's query is stored as given and shown as *** by add and list."""
    url = "https://hooks.example.com/in?token=q-secret-1&v=2"
    added = ok(outbox_cmd(dsn, "add", "hooks", "--url", url))
    assert endpoint(dsn, "hooks")["url"] == url
    table = ok(outbox_cmd(dsn, "list"))
    [listed] = json.loads(ok(outbox_cmd(dsn, "list", "--json")))
    for out in (added, table, json.dumps(listed)):
        assert "q-secret-1" not in out
    assert listed["url"] == "https://hooks.example.com/in?token=***&v=***"
    assert "https://hooks.example.com/in?token=***&v=***" in table


def test_a_token_in_the_url_path_is_masked_wherever_the_url_is_shown(dsn: str) -> None:
    """A Slack-style hook's path token is stored as given; add, show and list (table and
    --json) show its first 4 characters and ***, and the ordinary segments as they are."""
    token = "aB3dE6gH9jK2mN5pQ8sT1vW4"
    url = f"https://hooks.example.com/services/T0001/B0001/{token}"
    added = ok(outbox_cmd(dsn, "add", "slack", "--url", url))
    ok(outbox_cmd(dsn, "add", "words", "--url",
                  "https://hooks.example.com/api/order-created-events/v1"))
    assert endpoint(dsn, "slack")["url"] == url
    outputs = [added, ok(outbox_cmd(dsn, "show", "slack")),
               ok(outbox_cmd(dsn, "show", "slack", "--json")), ok(outbox_cmd(dsn, "list")),
               ok(outbox_cmd(dsn, "list", "--json"))]
    shown = "https://hooks.example.com/services/T0001/B0001/aB3d***"
    for out in outputs:
        assert token[4:] not in out, out
        assert shown in out, out
    assert "https://hooks.example.com/api/order-created-events/v1" in outputs[3]


@pytest.mark.parametrize("url", ["ftp://user:PASSW0RD@hooks.example.com/",
                                 "http://admin:PASSW0RD/", "http://xn--/",
                                 "http://" + "a" * 64 + ".example/"])
def test_add_refuses_credentials_and_unsendable_hosts_without_echoing(
        dsn: str, url: str) -> None:
    """Credentials (whatever else is wrong) and hosts the IDNA codec refuses: exit 2, unechoed."""
    result = outbox_cmd(dsn, "add", "hooks", "--url", url)
    assert result.returncode == 2, result.stderr
    assert "PASSW0RD" not in result.stderr + result.stdout
    assert snapshot(dsn) == []


def test_rotate_secret_generates_prints_once_and_keeps_the_old(dsn: str) -> None:
    """A generated secret is printed once on stdout; the old one stays in previous_secrets."""
    add(dsn, "hooks", secret=SECRET)
    printed = ok(outbox_cmd(dsn, "rotate-secret", "hooks", "--overlap", "2h")).strip()
    assert printed.startswith("whsec_")
    assert printed != SECRET
    row = endpoint(dsn, "hooks")
    assert row["secret"] == printed
    assert [p["secret"] for p in row["previous_secrets"]] == [SECRET]
    out = ok(outbox_cmd(dsn, "rotate-secret", "hooks", "--secret", "env:OUTBOX_SECRET_HOOK",
                        "--overlap", "10m"))
    assert "whsec_" not in out
    row = endpoint(dsn, "hooks")
    assert row["secret"] == "env:OUTBOX_SECRET_HOOK"
    assert [p["secret"] for p in row["previous_secrets"]] == [printed, SECRET]
    # The secret just retired signs for its 10 minutes; the first one for its 2 hours.
    ends = {p["secret"]: p["expires_at"][:19] for p in row["previous_secrets"]}
    assert f"the previous one keeps signing too until {ends[printed]}" in out, out
    assert f"; older ones keep signing until {ends[SECRET]}" in out, out


@pytest.mark.parametrize("args", [["--secret", "nope"], ["--overlap", "soon"],
                                  ["--secret", "env:OUTBOX_DSN"], ["--secret", "env:PGPASSWORD"]])
def test_rotate_secret_bad_input(dsn: str, args: list[str]) -> None:
    """A bad --secret (an env: name of the configuration too) or --overlap: exit 2, no change."""
    add(dsn, "hooks", secret=SECRET)
    before = snapshot(dsn)
    result = outbox_cmd(dsn, "rotate-secret", "hooks", *args)
    assert result.returncode == 2
    assert len(result.stderr.strip().splitlines()) == 1
    assert snapshot(dsn) == before


def test_remove_refused_then_forced(dsn: str) -> None:
    """remove with pending deliveries is exit 1 naming the count; --force dead-letters them."""
    add(dsn, "hooks")
    publish(dsn, 3)
    before = snapshot(dsn)
    refused = outbox_cmd(dsn, "remove", "hooks")
    assert refused.returncode == 1
    assert "3 undelivered" in refused.stderr
    assert "--force" in refused.stderr
    assert snapshot(dsn) == before
    ok(outbox_cmd(dsn, "remove", "hooks", "--force"))
    with psycopg.connect(dsn) as conn:
        rows = conn.execute("SELECT state, last_error, finished_at IS NOT NULL "
                            "FROM outbox.deliveries").fetchall()
        live = conn.execute("SELECT count(*) FROM outbox.endpoints "
                            "WHERE removed_at IS NULL").fetchone()
    assert len(rows) == 3
    assert live == (0,)
    assert all(s == "dead" and "removed" in e and done for s, e, done in rows)
    ok(outbox_cmd(dsn, "add", "hooks", "--url", URL))  # the name is free again


def test_sync_adds_changes_removes(dsn: str, tmp_path: Path) -> None:
    """sync makes the endpoints exactly the file's and prints what it did."""
    add(dsn, "billing", max_attempts=3)
    add(dsn, "legacy")
    add(dsn, "audit", url="http://audit.internal/")
    path = tmp_path / "endpoints.toml"
    path.write_text(f"""
[endpoints.workflow]
url = "https://workflow.internal/api/events"
events = ["mail.*", "order.created"]
secret = "env:OUTBOX_SECRET_WORKFLOW"
max_attempts = 12

[endpoints.billing]
url = "{URL}"
timeout = 5

[endpoints.audit]
url = "http://audit.internal/"
""")
    out = ok(outbox_cmd(dsn, "sync", str(path)))
    assert "added workflow" in out
    assert "changed billing: max_attempts, timeout" in out
    assert "removed legacy" in out
    assert "audit" not in out.replace("unchanged", "")
    assert {r["name"] for r in json.loads(ok(outbox_cmd(dsn, "list", "--json")))} == \
        {"workflow", "billing", "audit"}
    billing = endpoint(dsn, "billing")
    assert (billing["max_attempts"], billing["timeout_seconds"]) == (42, 5)  # back to defaults
    assert endpoint(dsn, "workflow")["events_like"] == ["mail.%", "order.created"]
    again = ok(outbox_cmd(dsn, "sync", str(path)))
    assert "0 added, 0 changed, 0 removed, 3 unchanged" in again


def test_sync_refuses_busy_removal_and_bad_files(dsn: str, tmp_path: Path) -> None:
    """A busy removal is exit 1; bad keys, syntax and missing files are exit 2; nothing changes."""
    add(dsn, "busy")
    publish(dsn, 2)
    before = snapshot(dsn)
    files = {
        "removal.toml": ('[endpoints.new]\nurl = "http://new.internal/"\n', 1, "--force"),
        "key.toml": ('[endpoints.busy]\nurl = "http://x/"\nretries = 3\n', 2, "retries"),
        "syntax.toml": ('[endpoints.busy\nurl = "http://x/"\n', 2, "not valid TOML"),
        "env.toml": ('[endpoints.busy]\nurl = "http://x/"\nsecret = "env:DATABASE_URL"\n',
                     2, "is not allowed"),
        "header.toml": ('[endpoints.busy]\nurl = "http://x/"\nheaders = { x-key = "clé" }\n',
                        2, "printable ASCII"),
    }
    for name, (text, code, message) in files.items():
        (tmp_path / name).write_text(text)
        result = outbox_cmd(dsn, "sync", str(tmp_path / name))
        assert (result.returncode, message in result.stderr) == (code, True), result.stderr
        assert snapshot(dsn) == before
    missing = outbox_cmd(dsn, "sync", str(tmp_path / "missing.toml"))
    assert missing.returncode == 2
    assert "missing.toml" in missing.stderr
    forced = ok(outbox_cmd(dsn, "sync", str(tmp_path / "removal.toml"), "--force"))
    assert "removed busy (2 undelivered deliveries dead-lettered)" in forced


def test_dsn_option_on_the_subcommand(dsn: str) -> None:
    """Every subcommand takes --dsn, with no environment variable set."""
    ok(outbox_cmd(None, "add", "hooks", "--url", URL, "--dsn", dsn))
    assert "hooks" in ok(outbox_cmd(None, "list", "--dsn", dsn))


def test_an_endpoint_may_leave_tracestate_out(dsn: str, tmp_path: Path) -> None:
    """--no-tracestate / --send-tracestate, TOML send_tracestate: stored, shown, changed."""
    ok(outbox_cmd(dsn, "add", "bare", "--url", URL, "--no-tracestate"))
    ok(outbox_cmd(dsn, "add", "full", "--url", URL))
    assert (endpoint(dsn, "bare")["send_tracestate"], endpoint(dsn, "full")["send_tracestate"]) \
        == (False, True)
    shown = ok(outbox_cmd(dsn, "show", "bare"))
    assert re.search(r"^send tracestate +no$", shown, re.M)
    # As `list` spells them: yes/no, and durations with their unit.
    assert re.search(r"^enabled +yes$", shown, re.M)
    assert re.search(r"^timeout +10s$", shown, re.M), shown
    assert re.search(r"^max backoff +\d+s$", shown, re.M), shown
    assert json.loads(ok(outbox_cmd(dsn, "show", "full", "--json")))["send_tracestate"] is True
    listed = {e["name"]: e["send_tracestate"] for e in json.loads(ok(outbox_cmd(
        dsn, "list", "--json")))}
    assert listed == {"bare": False, "full": True}
    assert "unchanged" in ok(outbox_cmd(dsn, "update", "bare", "--no-tracestate"))
    assert "send_tracestate" in ok(outbox_cmd(dsn, "update", "bare", "--send-tracestate"))
    assert endpoint(dsn, "bare")["send_tracestate"] is True
    ok(outbox_cmd(dsn, "update", "full", "--no-tracestate", "--max-attempts", "3"))
    ok(outbox_cmd(dsn, "update", "full", "--unset", "send-tracestate"))
    assert endpoint(dsn, "full")["send_tracestate"] is True
    both = outbox_cmd(dsn, "update", "full", "--no-tracestate", "--send-tracestate")
    assert both.returncode == 2, both.stderr
    path = tmp_path / "endpoints.toml"
    path.write_text(f'[endpoints.bare]\nurl = "{URL}"\nsend_tracestate = false\n'
                    f'[endpoints.full]\nurl = "{URL}"\n')
    assert "changed bare: send_tracestate" in ok(outbox_cmd(dsn, "sync", str(path)))
    assert endpoint(dsn, "bare")["send_tracestate"] is False
    path.write_text(f'[endpoints.bare]\nurl = "{URL}"\nsend_tracestate = "no"\n')
    refused = outbox_cmd(dsn, "sync", str(path))
    assert refused.returncode == 2
    assert "endpoints.bare.send_tracestate must be true or false" in refused.stderr


def test_max_pending_per_tenant_is_managed_like_max_pending(dsn: str, tmp_path: Path) -> None:
    """--max-pending-per-tenant / TOML max_pending_per_tenant: added, listed, shown, updated,
    unset back to no bound, and synced, beside --max-pending."""
    ok(outbox_cmd(dsn, "add", "hooks", "--url", URL, "--max-pending", "1000",
                  "--max-pending-per-tenant", "50"))
    ok(outbox_cmd(dsn, "add", "plain", "--url", URL))
    assert (endpoint(dsn, "hooks")["max_pending"],
            endpoint(dsn, "hooks")["max_pending_per_tenant"]) == (1000, 50)
    listed = {e["name"]: e["max_pending_per_tenant"]
              for e in json.loads(ok(outbox_cmd(dsn, "list", "--json")))}
    assert listed == {"hooks": 50, "plain": None}
    header = ok(outbox_cmd(dsn, "list")).splitlines()[0]
    assert "MAX PENDING" in header
    assert "PER TENANT" in header
    assert json.loads(ok(outbox_cmd(dsn, "show", "hooks", "--json")))[
        "max_pending_per_tenant"] == 50
    assert json.loads(ok(outbox_cmd(dsn, "show", "plain", "--json")))[
        "max_pending_per_tenant"] is None
    assert re.search(r"^max pending per tenant +50$", ok(outbox_cmd(dsn, "show", "hooks")), re.M)
    assert re.search(r"^max pending per tenant +-$", ok(outbox_cmd(dsn, "show", "plain")), re.M)

    assert ok(outbox_cmd(dsn, "update", "hooks", "--max-pending-per-tenant", "80")) == \
        "updated endpoint hooks: max_pending_per_tenant\n"
    assert endpoint(dsn, "hooks")["max_pending_per_tenant"] == 80
    assert ok(outbox_cmd(dsn, "update", "hooks", "--unset", "max-pending-per-tenant")) == \
        "updated endpoint hooks: max_pending_per_tenant\n"
    assert (endpoint(dsn, "hooks")["max_pending"],
            endpoint(dsn, "hooks")["max_pending_per_tenant"]) == (1000, None)

    path = tmp_path / "endpoints.toml"
    path.write_text(f'[endpoints.hooks]\nurl = "{URL}"\nmax_pending = 1000\n'
                    f'max_pending_per_tenant = 20\n[endpoints.plain]\nurl = "{URL}"\n')
    assert "changed hooks: max_pending_per_tenant" in ok(outbox_cmd(dsn, "sync", str(path)))
    assert endpoint(dsn, "hooks")["max_pending_per_tenant"] == 20
    assert "0 to change" in ok(outbox_cmd(dsn, "sync", str(path), "--dry-run"))
    path.write_text(f'[endpoints.hooks]\nurl = "{URL}"\nmax_pending = 1000\n'
                    f'[endpoints.plain]\nurl = "{URL}"\n')
    assert "changed hooks: max_pending_per_tenant" in ok(outbox_cmd(dsn, "sync", str(path)))
    assert endpoint(dsn, "hooks")["max_pending_per_tenant"] is None


def test_the_breaker_window_and_rate_by_update_and_sync(dsn: str, tmp_path: Path) -> None:
    """--breaker-window and --breaker-rate, TOML breaker_window and breaker_rate: stored and
    listed; a bad one refuses the update (exit 2, one line) or the whole file, nothing
    changed."""
    add(dsn, "hooks")
    [listed] = json.loads(ok(outbox_cmd(dsn, "list", "--json")))
    assert (listed["breaker_window"], listed["breaker_rate"]) == (30.0, 50.0)
    ok(outbox_cmd(dsn, "update", "hooks", "--breaker-window", "45s", "--breaker-rate", "80"))
    [listed] = json.loads(ok(outbox_cmd(dsn, "list", "--json")))
    assert (listed["breaker_window"], listed["breaker_rate"]) == (45.0, 80.0)
    before = snapshot(dsn)
    for args in (["--breaker-window", "0"], ["--breaker-rate", "0"], ["--breaker-rate", "150"]):
        result = outbox_cmd(dsn, "update", "hooks", *args)
        assert result.returncode == 2, result.stderr
        [line] = result.stderr.strip().splitlines()
        assert args[0] in line
        assert snapshot(dsn) == before
    good = '[endpoints.hooks]\nurl = "http://127.0.0.1:9/"\nbreaker_window = 20\n'
    for bad in ("breaker_rate = 0", "breaker_rate = 101", 'breaker_window = "0s"',
                "breaker_window = -3"):
        path = tmp_path / "bad.toml"
        path.write_text(good + '[endpoints.other]\nurl = "http://127.0.0.1:9/"\n' + bad + "\n")
        result = outbox_cmd(dsn, "sync", str(path))
        assert result.returncode == 2, result.stderr
        assert len(result.stderr.strip().splitlines()) == 1, result.stderr
        assert snapshot(dsn) == before
    (tmp_path / "good.toml").write_text(good + "breaker_rate = 10\n")
    ok(outbox_cmd(dsn, "sync", str(tmp_path / "good.toml")))
    [listed] = json.loads(ok(outbox_cmd(dsn, "list", "--json")))
    assert (listed["breaker_window"], listed["breaker_rate"]) == (20.0, 10.0)


def test_add_names_the_tenant_whose_events_it_receives(dsn: str) -> None:
    """add says the endpoint's tenant with its patterns; one without a tenant names none."""
    acme = ok(outbox_cmd(dsn, "add", "acme-hooks", "--url", URL, "--events", "order.*",
                         "--tenant", "acme"))
    plain = ok(outbox_cmd(dsn, "add", "audit", "--url", URL))
    assert acme.startswith("added endpoint acme-hooks: ")
    assert " for order.* of tenant acme (" in acme
    assert "tenant" not in plain


def test_one_delivery_is_said_in_the_singular(dsn: str, tmp_path: Path) -> None:
    """A count of one reads "1 undelivered delivery" (not "deliveries") in remove's refusal
    and its --force, sync's removal, disable --drop, retry-now and publish's BacklogFull."""
    add(dsn, "hooks")
    publish(dsn, 1)
    refused = outbox_cmd(dsn, "remove", "hooks")
    assert "(1 undelivered delivery)" in refused.stderr, refused.stderr
    forced = ok(outbox_cmd(dsn, "remove", "hooks", "--force"))
    assert forced.strip() == ("removed endpoint hooks; 1 undelivered delivery became a dead "
                              "letter")
    add(dsn, "synced")
    publish(dsn, 1)
    (tmp_path / "empty.toml").write_text("endpoints = {}\n")
    synced = ok(outbox_cmd(dsn, "sync", str(tmp_path / "empty.toml"), "--force"))
    assert "removed synced (1 undelivered delivery dead-lettered)" in synced
    add(dsn, "dropped")
    publish(dsn, 1)
    dropped = outbox_cmd(dsn, "disable", "dropped", "--drop")
    assert "discarded its 1 pending delivery;" in dropped.stderr, dropped.stderr
    add(dsn, "bounded", max_pending=1)
    publish(dsn, 1)
    with psycopg.connect(dsn) as conn:
        conn.execute("UPDATE outbox.deliveries SET next_attempt_at = now() + interval '1h' "
                     "WHERE state = 'pending'")
        conn.commit()
        with pytest.raises(outbox.BacklogFull, match="holds 1 undelivered delivery,"):
            outbox.publish(conn, "mail.received", {})
    retried = outbox_cmd(dsn, "retry-now", "bounded")
    assert "made 1 pending delivery of endpoint bounded due now" in retried.stderr, \
        retried.stderr

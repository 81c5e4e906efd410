"""The viewer role of `outbox grants --viewer`: enough for the web view and the reading
commands, and nothing more: no secret, URL or header value, no write."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from outbox.testing import Receiver
from tests.conftest import Cluster
from tests.support.cli import run_outbox
from tests.support.roles import Roles, login_role, ok, setup
from tests.support.web import dead_scene, web_client


@pytest.fixture
def viewer(cluster: Cluster) -> Any:
    """A login role of its own; asked for before ``roles``, so that it is dropped after the
    database its grants are in."""
    with login_role(cluster, "viewer") as name:
        yield name


def test_the_viewer_reads_every_page_and_nothing_secret(viewer: str, roles: Roles,
                                                      receiver: Receiver) -> None:
    """Applied with --apply, the viewer serves every page and runs the reading commands,
    and may read no endpoint secret, URL or header, no event header, and write nothing."""
    setup(roles, receiver)
    op = roles.dsn(roles.operator)
    applied = ok(run_outbox(op, "grants", "--application", roles.application,
                            "--dispatcher", roles.dispatcher, "--viewer", viewer, "--apply"))
    assert f"viewer {viewer}" in applied
    with roles.connect(roles.operator) as conn:
        scene = dead_scene(conn)
    dsn = roles.dsn(viewer)
    event = scene["dead"]
    with web_client(dsn) as client:
        for path in ("/", "/dead", "/dead?endpoint=billing", f"/events/{event}",
                     f"/events/{event}?payload=1", "/search?q=customer-7",
                     "/search?q=order-1234", "/endpoints/billing", "/tenants",
                     "/tenants?format=json"):
            response = client.get(path)
            assert response.status_code in (200, 303), (path, response.text)
        for path in ("/", "/endpoints/mail"):  # the last hour's chart, as the viewer
            assert '<polyline class="pending"' in client.get(path).text, path
        shown = client.get("/endpoints/billing?format=json").json()
        assert shown["circuit"] == "closed"
        assert shown["max_attempts"] >= 1
        assert (shown["url"], shown["signing"], shown["headers"]) == (None, None, None)
    for args in (("status",), ("dead", "list"), ("show", str(event)),
                 ("events", "list", "--key", "customer-7")):
        ok(run_outbox(dsn, *args))
    with psycopg.connect(dsn, autocommit=True) as conn:
        for statement in ("SELECT secret FROM outbox.endpoints",
                          "SELECT url FROM outbox.endpoints",
                          "SELECT headers FROM outbox.endpoints",
                          "SELECT headers FROM outbox.events",
                          "UPDATE outbox.deliveries SET attempts = 0",
                          "DELETE FROM outbox.attempts"):
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                conn.execute(statement)


def test_the_viewer_meets_a_refused_command_as_one_line(viewer: str, roles: Roles,
                                                       receiver: Receiver) -> None:
    """A command beyond the viewer's grants exits 1 with one line naming the role, what was
    refused and `outbox grants`; no traceback, and nothing changes."""
    setup(roles, receiver)
    op = roles.dsn(roles.operator)
    ok(run_outbox(op, "grants", "--application", roles.application,
                  "--dispatcher", roles.dispatcher, "--viewer", viewer, "--apply"))
    dsn = roles.dsn(viewer)
    for args in (("endpoints", "list"), ("endpoints", "disable", "rx"),
                 ("dead", "retry", "--all")):
        result = run_outbox(dsn, *args)
        assert result.returncode == 1, (args, result.stdout, result.stderr)
        lines = result.stderr.splitlines()
        assert len(lines) == 1, (args, result.stderr)
        assert lines[0].startswith(f"outbox: role {viewer} lacks a privilege"), lines
        assert "permission denied for" in lines[0], lines
        assert "`outbox grants`" in lines[0], lines
    assert "rx" in ok(run_outbox(op, "endpoints", "list"))
    assert "disabled" not in ok(run_outbox(op, "endpoints", "list")).split("rx", 1)[1] \
        .split("\n", 1)[0]

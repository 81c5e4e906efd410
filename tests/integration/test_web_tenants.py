"""The web view by tenant on a real PostgreSQL, for support's path from a customer to its
endpoints: the endpoints page's tenant column and `?tenant=`, a search that names a tenant,
`/tenants` (every tenant, largest backlog first, paged) and names shown whole."""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import parse_qs, urlsplit

import psycopg
import pytest

from outbox import endpoints
from outbox._shared.databases import Database
from tests.support.dispatcher import publish
from tests.support.web import command, plans, tenants_history, web_client

Conn = psycopg.Connection[Any]

LONG = "customer-acme-corporation-order-webhooks"
"""An endpoint name of the kind a customer's gets, longer than a column's usual room."""
TENANT_KEYS = ["tenant", "endpoints", "pending", "in_flight", "oldest_pending_seconds"]


@pytest.fixture
def scene(conn: Conn) -> None:
    """acme owns two endpoints, globex and initech one each, crm belongs to nobody (it
    receives every tenant's events); umbrella owns none but waits at crm. acme's events
    wait at its endpoint and at crm (one in flight there), globex's likewise, umbrella's
    at crm only; initech has nothing waiting; one event has no tenant."""
    owned = [(LONG, "acme", "order.*"), ("acme-audit", "acme", "audit.*"),
             ("globex-hooks", "globex", "order.*"), ("initech-hooks", "initech", "order.*")]
    for name, tenant, pattern in owned:
        endpoints.add(conn, name, url=f"http://127.0.0.1:9/{name}", events=(pattern,),
                      tenant=tenant)
    endpoints.add(conn, "crm", url="http://127.0.0.1:9/crm", events=("order.*",))
    for tenant in ("acme", "acme", "acme", "globex", "umbrella", "umbrella", None):
        publish(conn, "order.placed", {"n": 1}, tenant=tenant)
    conn.execute(
        "UPDATE outbox.deliveries SET state = 'in_flight', lease_token = gen_random_uuid(), "
        "lease_expires_at = now() + interval '1 hour' WHERE id = (SELECT min(d.id) "
        "FROM outbox.deliveries d JOIN outbox.endpoints e ON e.id = d.endpoint_id "
        "WHERE e.name = 'crm' AND d.tenant = 'acme')")
    conn.commit()


def names(page_text: str, table: str) -> list[str]:
    """The names in the first column of the page's table of that class, in order."""
    body = page_text.split(f'<table class="{table}">', 1)[1].split("</table>", 1)[0]
    return re.findall(r'<tr[^>]*>\s*<td class="name"><a href="[^"]*">([^<]*)</a>', body)


def test_the_endpoints_page_names_each_endpoints_tenant(dsn: str, scene: None) -> None:
    """`/` has a tenant column, each tenant linking to `/?tenant=T`; an endpoint without
    one says so."""
    with web_client(dsn) as client:
        page = client.get("/")
    assert page.status_code == 200
    assert "<th>tenant</th>" in page.text
    row = page.text.split(f">{LONG}</a>", 1)[1].split("</tr>", 1)[0]
    assert '<a href="/?tenant=acme">acme</a>' in row
    crm = page.text.split(">crm</a>", 1)[1].split("</tr>", 1)[0]
    assert '<span class="note">-</span>' in crm


def test_tenant_lists_only_its_endpoints_and_where_it_waits(dsn: str, scene: None) -> None:
    """`/?tenant=acme` lists acme's endpoints only (its JSON too, as `status --json` with
    the others left out) and where acme's deliveries wait, its own and crm's; a tenant
    with none says so; a tenant no event could carry is a 400."""
    with web_client(dsn) as client:
        page = client.get("/?tenant=acme")
        doc = client.get("/?tenant=acme&format=json").json()
        umbrella = client.get("/?tenant=umbrella")
        nobody = client.get("/?tenant=nobody")
        bad = client.get("/?tenant=a%C3%A9&format=json")
    assert page.status_code == 200
    assert "Endpoints of tenant" in page.text
    assert sorted(names(page.text, "endpoints")) == ["acme-audit", LONG]
    assert names(page.text, "waits") == ["crm", LONG]  # 3 each, then by name
    assert 'href="/dead?tenant=acme"' in page.text
    everything = command(dsn, "status")
    assert [e["name"] for e in doc["endpoints"]] == sorted(["acme-audit", LONG])
    assert set(doc) == set(everything)
    assert all("tenant" not in e for e in doc["endpoints"])
    assert "owns no live endpoint" in umbrella.text
    assert names(umbrella.text, "waits") == ["crm"]
    assert "owns no live endpoint" in nobody.text
    assert "None of its deliveries waits" in nobody.text
    assert bad.status_code == 400
    assert "tenant" in bad.json()["error"]


def test_tenant_page_charts_its_endpoints_only(dsn: str, conn: Conn, scene: None) -> None:
    """`/?tenant=acme` charts acme's endpoints' last hour together: the backlog it draws is
    theirs (3 pending), not every endpoint's."""
    with web_client(dsn) as client:
        page = client.get("/?tenant=acme")
        every = client.get("/")
    assert "Its endpoints, per minute" in page.text
    assert "pending 3 now" in page.text
    assert "pending 11 now" in every.text


def test_a_search_naming_only_a_tenant_leads_to_its_endpoints(dsn: str, conn: Conn,
                                                               scene: None) -> None:
    """`/search?q=T` for a tenant that owns an endpoint, or only waits, redirects to
    `/?tenant=T` (keeping `?db=`); its JSON stays the events list; a tenant that is also
    an ordering key lists the events and links to the tenant; other text finds nothing."""
    publish(conn, "order.placed", {"n": 2}, key="globex")
    with web_client(dsn) as client:
        acme = client.get("/search?q=acme")
        umbrella = client.get("/search?q=umbrella")
        as_json = client.get("/search?q=acme&format=json")
        both = client.get("/search?q=globex")
        nothing = client.get("/search?q=nobody")
        unprintable = client.get("/search?q=caf%C3%A9")
    with web_client("", databases=(Database("one", dsn),)) as client:
        kept = client.get("/search?q=acme&db=one")
    assert (acme.status_code, acme.headers["location"]) == (303, "/?tenant=acme")
    assert umbrella.headers["location"] == "/?tenant=umbrella"
    assert as_json.status_code == 200
    assert as_json.json() == []
    assert both.status_code == 200
    assert "It names a tenant too" in both.text
    assert 'href="/?tenant=globex"' in both.text
    assert "No event has the id" in nothing.text
    assert unprintable.status_code == 200  # no tenant could be named so: not looked for
    assert kept.headers["location"] == "/?tenant=acme&db=one"


def test_tenants_lists_every_tenant_largest_backlog_first(dsn: str, scene: None) -> None:
    """`/tenants` lists every tenant that owns a live endpoint or waits, with its
    endpoints, pending and in flight everywhere, largest backlog first (then by name);
    its JSON is `{"tenants": [...]}` with exactly the documented keys; each tenant links
    to its endpoints and its dead letters."""
    with web_client(dsn) as client:
        page = client.get("/tenants")
        doc = client.get("/tenants?format=json")
    assert page.status_code == doc.status_code == 200
    assert "link" not in doc.headers
    rows = doc.json()["tenants"]
    assert list(doc.json()) == ["tenants"]
    assert all(list(row) == TENANT_KEYS for row in rows)
    assert [(r["tenant"], r["endpoints"], r["pending"], r["in_flight"]) for r in rows] == [
        ("acme", 2, 5, 1), ("globex", 1, 2, 0), ("umbrella", 0, 2, 0), ("initech", 1, 0, 0)]
    assert rows[0]["oldest_pending_seconds"] > 0
    assert rows[-1]["oldest_pending_seconds"] == 0
    assert names(page.text, "tenants") == ["acme", "globex", "umbrella", "initech"]
    assert 'href="/?tenant=acme"' in page.text
    assert 'href="/dead?tenant=acme"' in page.text


def test_tenants_pages_by_a_hundred_with_a_link_header(dsn: str, conn: Conn) -> None:
    """250 tenants: three pages of 100, 100 and 50, each but the last naming the next in
    `Link: <...>; rel="next"` and in a link on the page, together every tenant once, in
    the order of the backlogs; `?db=` is kept in the links; a forged place is a 400."""
    for i in range(250):
        endpoints.add(conn, f"hooks-{i:03d}", url="http://127.0.0.1:9/",
                      tenant=f"tenant-{i:03d}")
    conn.commit()
    for tenant, count in (("tenant-200", 3), ("tenant-100", 2), ("tenant-150", 2)):
        for _ in range(count):
            publish(conn, "order.placed", {}, tenant=tenant)
    seen: list[str] = []
    pages = 0
    with web_client("", databases=(Database("one", dsn),)) as client:
        url: str | None = "/tenants?db=one&format=json"
        while url is not None:
            answer = client.get(url)
            assert answer.status_code == 200
            seen += [row["tenant"] for row in answer.json()["tenants"]]
            pages += 1
            link = answer.headers.get("link")
            url = None
            if link is not None:
                found = re.fullmatch(r'<([^>]+)>; rel="next"', link)
                assert found, link
                assert parse_qs(urlsplit(found.group(1)).query)["db"] == ["one"]
                url = found.group(1) + "&format=json"
        first = client.get("/tenants?db=one")
        forged = client.get("/tenants?db=one&after=x,acme")
    assert pages == 3
    assert len(seen) == len(set(seen)) == 250
    assert seen[:3] == ["tenant-200", "tenant-100", "tenant-150"]
    assert seen[3:] == sorted(seen[3:])
    assert '<a rel="next" href="/tenants?after=' in first.text
    assert first.headers["link"].startswith("</tenants?after=")
    assert names(first.text, "tenants") == seen[:100]
    assert forged.status_code == 400


def test_names_are_shown_whole(dsn: str, conn: Conn, scene: None) -> None:
    """Long endpoint names are never cut: whole on the endpoints page, the tenant's, the
    tenants' and in the dead letters (no ellipsis cell), linked to the endpoint's page."""
    conn.execute("UPDATE outbox.deliveries SET state = 'dead', attempts = 1, "
                 "last_error = 'HTTP 410', finished_at = now() WHERE endpoint_id = "
                 "(SELECT id FROM outbox.endpoints WHERE name = %s)", (LONG,))
    conn.commit()
    with web_client(dsn) as client:
        dead = client.get("/dead?tenant=acme")
        home = client.get("/?tenant=acme")
    row = dead.text.split("<tbody>", 1)[1].split("</tr>", 1)[0]
    assert f'<td class="name"><a href="/endpoints/{LONG}">{LONG}</a></td>' in row
    assert '<a href="/?tenant=acme">acme</a>' in row
    assert 'class="clip" title="' + LONG not in dead.text
    assert f">{LONG}</a>" in home.text


def test_the_tenants_reads_follow_the_backlog_not_the_table(conn: Conn) -> None:
    """On 60,000 finished deliveries of 40 endpoints with a few tenants' rows waiting, the
    statements behind `/tenants`, `?tenant=` and the search's tenant probe read the
    undelivered rows through their partial indexes: no plan scans the deliveries table."""
    tenants_history(conn)
    found = plans(conn, {"web_tenants": {}, "web_tenant_waits": {"tenant": "tenant-3"},
                         "web_is_tenant": {"tenant": "nobody"}})
    for name, plan in found.items():
        assert "Seq Scan on deliveries" not in plan, (name, plan)

"""Endpoint definitions over generated options, stored and read back on a real PostgreSQL.

The promise (docs/concepts.md, "Endpoints"): a bad URL, pattern or option is
refused with a clear message (``InvalidEndpoint``, exit 2 on the command
line) and nothing is changed. So ``EndpointSpec.from_options`` either
refuses with ``InvalidEndpoint`` or returns a spec the database takes as it
is: ``add_endpoint`` stores it and ``list_endpoints`` reads back the same
values. Anything else (an ``OverflowError``, a driver error) would be a
traceback where the operator was promised a message.
"""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from outbox.endpoints import EndpointSpec, add_endpoint, list_endpoints, signing_label
from outbox.errors import InvalidEndpoint
from tests.support.endpoint_options import (
    ENDPOINT_NAMES,
    OPTION_NAMES,
    Options,
    good_endpoint_name,
    options,
)
from tests.support.strategies import any_text

Conn = psycopg.Connection[Any]

# A few statements per example on a real database.
DATABASE = settings(max_examples=150, deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture,
                                           HealthCheck.too_slow])

NAMES = st.one_of(
    ENDPOINT_NAMES, ENDPOINT_NAMES, ENDPOINT_NAMES,
    any_text(max_size=70),
    st.sampled_from(["", "-x", ".x", "a" * 64, "a b", "é"]))


def _refused_or_stored(conn: Conn, name: str, drawn: Options) -> None:
    """The property: a refusal (never of good options), or a spec stored and read back equal."""
    conn.rollback()  # whatever an earlier, failed example left open
    try:
        spec = EndpointSpec.from_options(name, drawn.values)
    except InvalidEndpoint as refused:
        event(f"refused: {refused.field}")
        assert not (drawn.good and good_endpoint_name(name)), "good options were refused"
        return
    event("stored")
    try:
        endpoint_id = add_endpoint(conn, spec)
        (stored,) = list_endpoints(conn)
        assert stored.id == endpoint_id
        assert stored.name == name
        wanted = spec.columns()
        # Shown without its secret and header values: by kind and by name.
        assert stored.columns == {k: v for k, v in wanted.items()
                                  if k not in ("secret", "headers")}
        assert stored.signing == signing_label(spec.secret)
        assert sorted(stored.header_names) == sorted(spec.headers)
    finally:
        conn.rollback()


@DATABASE
@given(name=NAMES, drawn=options())
def test_options_are_refused_or_stored_as_given(conn: Conn, name: str, drawn: Options) -> None:
    """from_options() raises InvalidEndpoint, or add/list store and read back the same spec."""
    _refused_or_stored(conn, name, drawn)


@pytest.mark.parametrize("option", OPTION_NAMES)
@settings(DATABASE, max_examples=25)
@given(data=st.data())
def test_each_option_is_checked_before_the_database_sees_it(
        conn: Conn, option: str, data: st.DataObject) -> None:
    """One option at a time drawn odd (near misses mostly): refused, or stored as given."""
    drawn = data.draw(options(odd_option=option))
    _refused_or_stored(conn, data.draw(ENDPOINT_NAMES), drawn)


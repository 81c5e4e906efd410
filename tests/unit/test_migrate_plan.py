"""outbox.migrate.plan: what brings a schema state up to date, judged without a database."""

from __future__ import annotations

from outbox._shared.schema import SchemaState
from outbox.migrate import plan
from outbox.sql import SCHEMA_VERSION, steps

INBOX_STEPS = [step.version for step in steps() if step.inbox]
INBOX = set(INBOX_STEPS)


def _inbox_only(versions: set[int]) -> SchemaState:
    """A receiver's database: the version table and the inbox, no outbox."""
    return SchemaState(versions_table=True, outbox=False, inbox=True,
                       versions=frozenset(versions))


def test_check_judges_a_receivers_database_by_its_inbox() -> None:
    """--check's plan of an inbox-only database is its inbox steps alone: none once made."""
    made = plan(_inbox_only(INBOX), check=True)
    assert made.inbox_only
    assert not made.pending


def test_check_of_an_older_inbox_lists_only_the_inbox_steps() -> None:
    """An inbox-only database missing its inbox step is pending that step, not schema.sql."""
    todo = plan(_inbox_only(set()), check=True)
    assert todo.inbox_only
    assert not todo.create
    assert [step.version for step in todo.steps] == INBOX_STEPS


def test_without_check_an_inbox_only_database_gets_the_whole_outbox() -> None:
    """A plain plan (migrate, --dry-run) of a receiver's database creates the outbox."""
    todo = plan(_inbox_only(INBOX))
    assert todo.create
    assert not todo.inbox_only


def test_check_changes_nothing_where_the_outbox_is() -> None:
    """With the outbox there, check=True plans what a plain plan does."""
    state = SchemaState(versions_table=True, outbox=True, inbox=True,
                        versions=frozenset(range(1, SCHEMA_VERSION)))
    assert plan(state, check=True) == plan(state)
    empty = SchemaState(versions_table=False, outbox=False, inbox=False, versions=frozenset())
    assert plan(empty, check=True) == plan(empty)

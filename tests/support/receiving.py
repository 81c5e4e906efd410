"""The receiving side under real servers: the documented examples, served on 127.0.0.1.

- ``load_example``: a module of ``docs/examples/`` imported afresh with its
  environment (secrets, database URL), so tests run the very code the docs show;
- ``serve_asgi`` / ``serve_wsgi``: an app under uvicorn or Werkzeug's server,
  each on its own thread, for the length of a block;
- ``receiver_db``: a receiver's own database holding only the inbox and the
  example's business tables (``mail_notices``, ``mail_archive``: no unique key, so a
  duplicate effect would show as a second row).
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import sys
import threading
from collections.abc import Iterator, Mapping
from pathlib import Path
from types import ModuleType
from typing import Any

import psycopg
import pytest

from outbox._postgres.cluster import free_port
from outbox.migrate import migrate
from tests.support.dispatcher import wait_until

EXAMPLES = Path(__file__).resolve().parents[2] / "docs" / "examples"

BUSINESS = """
CREATE TABLE mail_notices (message_id int NOT NULL, event_id text NOT NULL);
CREATE TABLE mail_archive (message_id int NOT NULL, event_id text NOT NULL);
"""


def load_example(name: str, env: Mapping[str, str]) -> ModuleType:
    """``docs/examples/NAME.py`` imported under a fresh name with ``env`` set meanwhile."""
    path = EXAMPLES / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"example_{name}_{id(env)}", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    saved = {key: os.environ.get(key) for key in env}
    os.environ.update(env)
    try:
        spec.loader.exec_module(module)
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    sys.modules.pop(spec.name, None)
    return module


@contextlib.contextmanager
def serve_asgi(app: Any) -> Iterator[str]:
    """``app`` under uvicorn on 127.0.0.1; yields its base URL."""
    import uvicorn

    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port,
                                           log_level="warning", lifespan="off"))
    thread = threading.Thread(target=server.run, name="uvicorn", daemon=True)
    thread.start()
    try:
        wait_until(lambda: server.started, 10, "uvicorn to start")
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(10)


@contextlib.contextmanager
def serve_wsgi(app: Any) -> Iterator[str]:
    """``app`` under Werkzeug's threaded server on 127.0.0.1; yields its base URL."""
    from werkzeug.serving import make_server

    server = make_server("127.0.0.1", 0, app, threaded=True)
    thread = threading.Thread(target=server.serve_forever, name="werkzeug", daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        thread.join(10)


def effects(dsn: str, table: str) -> list[tuple[int, str]]:
    """(message_id, event_id) of every row of ``mail_notices`` or ``mail_archive``."""
    assert table in {"mail_notices", "mail_archive"}
    with psycopg.connect(dsn, autocommit=True) as conn:
        query = {
            "mail_notices": "SELECT message_id, event_id FROM mail_notices ORDER BY 1, 2",
            "mail_archive": "SELECT message_id, event_id FROM mail_archive ORDER BY 1, 2",
        }[table]
        return [(int(o), str(e)) for o, e in conn.execute(query)]


@pytest.fixture
def receiver_db(empty_dsn: str) -> str:
    """A receiver's own database: the inbox and its business tables, no outbox tables."""
    inbox_only(empty_dsn)
    with psycopg.connect(empty_dsn, autocommit=True) as conn:
        conn.execute(BUSINESS)
    return empty_dsn


def inbox_only(dsn: str) -> None:
    """Make ``dsn`` a receiver's own database, as `outbox migrate --inbox-only` does."""
    with psycopg.connect(dsn) as conn:
        migrate(conn, inbox_only=True)

"""Log setup: plain text for people, one JSON object per line for collectors.

Nothing the dispatcher logs contains a secret: endpoints are named, never
printed with their secrets, and payload bodies appear only at DEBUG.
"""

from __future__ import annotations

import json
import logging
import sys
from contextvars import ContextVar
from datetime import UTC, datetime

_STANDARD = set(logging.LogRecord("", 0, "", 0, "", (), None).__dict__) | {"message", "asctime"}


DATABASE: ContextVar[str | None] = ContextVar("database", default=None)
"""The database the running task serves, when the process serves several: its parts'
log lines name it (:class:`DatabaseTag`). Tasks inherit it from the task that made them."""


class DatabaseTag(logging.Filter):
    """Names the database in each line logged on its behalf: ``database NAME: ...`` in
    the text, and a ``database`` field in JSON."""

    def filter(self, record: logging.LogRecord) -> bool:
        name = DATABASE.get()
        if name is not None and not hasattr(record, "database"):
            record.database = name
            record.msg = f"database {name}: {record.msg}"
        return True


def tag_databases() -> None:
    """From now on, lines logged for one database name it (see :class:`DatabaseTag`)."""
    for handler in logging.getLogger().handlers:
        handler.addFilter(DatabaseTag())


class JsonFormatter(logging.Formatter):
    """One JSON object per record, with any ``extra=`` fields as keys."""

    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key, value in record.__dict__.items():
            if key not in _STANDARD and not key.startswith("_"):
                entry[key] = value
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str)


def setup_logging(fmt: str, level: str) -> None:
    handler = logging.StreamHandler(sys.stderr)
    if fmt == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    # httpx/httpcore log every request at INFO/DEBUG with URLs; keep them quiet.
    for noisy in ("httpx", "httpcore", "psycopg"):
        logging.getLogger(noisy).setLevel(max(logging.WARNING, root.level))

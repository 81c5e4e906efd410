"""Earlier releases of this project, kept as sources so that tests can run them.

``tests/fixtures/releases/v<schema version>-<commit>.tar.xz`` is ``git archive``
of ``outbox/ dispatcher/ schema.sql pyproject.toml`` at the commit that
released that schema version (docs/upgrading.md, "Upgrading", says how to add one).
They live in the repository rather than being rebuilt from its history so
that a shallow clone (CI) runs the same tests. An old release runs from its
extracted sources on this interpreter (``PYTHONPATH`` first on the path,
ahead of the installed package), its dependencies being ours.
"""

from __future__ import annotations

import json
import lzma
import re
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from tests.support.cli import clean_environment
from tests.support.dispatcher import Dispatcher

FOLDER = Path(__file__).resolve().parents[1] / "fixtures" / "releases"
_NAME = re.compile(r"^v(\d+)-([0-9a-f]{7,40})\.tar\.xz$")
_ROOT = Path(tempfile.mkdtemp(prefix="outbox-releases-"))


@dataclass(frozen=True)
class Release:
    """One earlier release: the schema version it made, its commit, its archive."""

    version: int
    commit: str
    archive: Path

    def __str__(self) -> str:
        return f"v{self.version}-{self.commit}"

    def schema_sql(self) -> str:
        """Its schema.sql, as it made databases."""
        return (self.sources() / "schema.sql").read_text("utf-8")

    def sources(self) -> Path:
        """The extracted sources (once per test session)."""
        return _extract(self.archive)

    def environment(self, extra: Mapping[str, str] | None = None) -> dict[str, str]:
        env = clean_environment(extra)
        env["PYTHONPATH"] = str(self.sources())
        return env

    def command(self, module: str, *args: str) -> list[str]:
        return [sys.executable, "-m", module, *args]

    def run(self, module: str, *args: str, dsn: str | None = None,
            timeout: float = 120) -> subprocess.CompletedProcess[str]:
        """``python -m MODULE ARGS`` of this release (``outbox``, ``dispatcher``)."""
        env = self.environment({"OUTBOX_DSN": dsn} if dsn else None)
        return subprocess.run(self.command(module, *args), cwd=self.sources(), env=env,
                              capture_output=True, text=True, timeout=timeout, check=False)

    def dispatcher(self, dsn: str, *args: str, once: bool = False) -> Dispatcher:
        """This release's dispatcher (not started), with the tests' quick options."""
        return Dispatcher(dsn, *args, env={"PYTHONPATH": str(self.sources())}, once=once,
                          cwd=self.sources())

    def publish(self, dsn: str, events: list[tuple[str, str | None, int]]) -> None:
        """Publish ``(type, key, n)`` events, payload ``{"n": n}``, one transaction each,
        through this release's ``outbox.publish``."""
        result = self.python(_PUBLISH, dsn, json.dumps(events))
        assert result.returncode == 0, result.stderr
        assert result.stdout.strip().startswith(str(self.sources())), result.stdout

    def python(self, code: str, *args: str, timeout: float = 120,
               ) -> subprocess.CompletedProcess[str]:
        """Run ``code`` with this release's ``outbox`` package importable."""
        return subprocess.run([sys.executable, "-c", code, *args], cwd=self.sources(),
                              env=self.environment(), capture_output=True, text=True,
                              timeout=timeout, check=False)


_PUBLISH = """
import json, sys
import psycopg, outbox
with psycopg.connect(sys.argv[1]) as conn:
    for event_type, key, n in json.loads(sys.argv[2]):
        outbox.publish(conn, event_type, {"n": n}, key=key)
        conn.commit()
print(outbox.__file__)
"""


@cache
def _extract(archive: Path) -> Path:
    target = _ROOT / archive.name.removesuffix(".tar.xz")
    with lzma.open(archive) as raw, tarfile.open(fileobj=raw) as tar:
        tar.extractall(target, filter="data")
    return target


def releases() -> list[Release]:
    """Every release kept, oldest first."""
    found = []
    for path in FOLDER.iterdir():
        match = _NAME.match(path.name)
        if match:
            found.append(Release(int(match.group(1)), match.group(2), path))
    return sorted(found, key=lambda r: r.version)


def previous() -> Release:
    """The release before this tree: what a rolling deploy runs beside the new code."""
    return releases()[-1]

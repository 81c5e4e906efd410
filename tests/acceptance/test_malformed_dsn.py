"""Both commands refuse a malformed DSN that carries a password: exit 2, the password unsaid."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.support.cli import clean_environment, run_outbox

PASSWORD = "Hunter2-Xq7"
MALFORMED = [
    f"postgresql://app:{PASSWORD}@db.internal:notaport/app",
    f"host=db.internal password={PASSWORD} port=x",
    f"postgresql://app:{PASSWORD[:5]}%zz{PASSWORD[5:]}@db.internal/app",
    f"postgresql://app:{PASSWORD}@[::1/app",
    f"password=my {PASSWORD}=x host=db.internal",
]


def dispatcher(*args: str, env: dict[str, str] | None = None,
               ) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "dispatcher", *args], capture_output=True,
                          text=True, timeout=30, check=False, env=clean_environment(env))


def assert_refused_quietly(result: subprocess.CompletedProcess[str]) -> None:
    """Exit 2, one line naming the problem, and no trace of the password anywhere."""
    assert result.returncode == 2, result.stderr
    assert "invalid database URL or DSN" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    output = result.stdout + result.stderr
    assert "Traceback" not in output
    for piece in (PASSWORD, PASSWORD[:5], PASSWORD[5:]):
        assert piece not in output, output


@pytest.mark.parametrize("dsn", MALFORMED)
def test_outbox_command(dsn: str) -> None:
    """`outbox status` with the DSN in --dsn and in OUTBOX_DSN."""
    assert_refused_quietly(run_outbox(None, "status", "--dsn", dsn))
    assert_refused_quietly(run_outbox(dsn, "status"))


@pytest.mark.parametrize("dsn", MALFORMED)
def test_dispatcher(dsn: str) -> None:
    """`outbox-dispatcher` with the DSN in --dsn and in OUTBOX_DSN (DATABASE_URL too)."""
    assert_refused_quietly(dispatcher("--dsn", dsn))
    assert_refused_quietly(dispatcher(env={"OUTBOX_DSN": dsn}))
    assert_refused_quietly(dispatcher(env={"DATABASE_URL": dsn}))

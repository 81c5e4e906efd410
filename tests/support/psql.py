"""psql, as users run the schema's SQL with it: the one beside the suite's server, else PATH's."""

from __future__ import annotations

import shutil
import subprocess

from tests.conftest import Cluster


def find_psql(cluster: Cluster) -> str | None:
    """A psql that runs: the one beside the suite's server binaries, else the one on PATH."""
    beside = [str(cluster.server.bindir / "psql")] if cluster.server else []
    for candidate in (*beside, shutil.which("psql")):
        if candidate and subprocess.run([candidate, "--version"], capture_output=True,
                                        check=False, timeout=30).returncode == 0:
            return candidate
    return None

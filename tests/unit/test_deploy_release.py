"""deploy/: every manifest, the unit, the Dockerfile and the README name the release this
tree becomes (pyproject's version without its ``.devN``), so that an operator copying
them runs the image of the code they read."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
# A release named in deploy/: an image tag, the migration Job's name, a runbook URL's tag.
_VERSION = r"\d+\.\d+\.\d+(?:\.?dev\d+|\.?rc\d+|-[\w.]+)?"
NAMED = re.compile(rf"outbox-dispatcher:(?P<tag>{_VERSION})"
                   r"|outbox-migrate-(?P<job>\d+-\d+-\d+)"
                   rf"|/blob/v(?P<ref>{_VERSION})/")


def release() -> str:
    """pyproject's version without a development suffix: 0.3.0.dev0 is to be 0.3.0."""
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    return re.sub(r"\.dev\d+$", "", version)


def named() -> dict[str, set[str]]:
    """Each release deploy/ names, with the files that name it."""
    found: dict[str, set[str]] = {}
    for path in sorted(DEPLOY.rglob("*")):
        if not path.is_file():
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        for match in NAMED.finditer(text):
            version = match["tag"] or match["ref"] or match["job"].replace("-", ".")
            found.setdefault(version, set()).add(str(path.relative_to(DEPLOY)))
    return found


def test_deploy_names_the_coming_release_only() -> None:
    """The image tags, the migration Job's name and the runbooks' tag in deploy/ all name
    pyproject's version without `.devN`, in the manifests and the README alike."""
    releases = named()
    assert set(releases) == {release()}, releases
    files = releases[release()]
    assert "README.md" in files
    assert {"kubernetes/sidecar.yaml", "kubernetes/standalone.yaml", "kubernetes/web.yaml",
            "kubernetes/migrate-job.yaml", "docker/Dockerfile"} <= files


def test_the_release_drops_only_a_development_suffix() -> None:
    """0.3.0.dev0 is released as 0.3.0; a version without a suffix is its own release."""
    assert re.sub(r"\.dev\d+$", "", "0.3.0.dev0") == "0.3.0"
    assert re.fullmatch(r"\d+\.\d+\.\d+", release())

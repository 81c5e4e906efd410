"""The version the code says it is: pyproject's, and the commit when run from a git checkout."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from outbox._shared.version import TREE, checkout_commit, current

VERSION = tomllib.loads((TREE / "pyproject.toml").read_text())["project"]["version"]
SHA = "0123456789abcdef0123456789abcdef01234567"
OTHER = "fedcba9876543210fedcba9876543210fedcba98"


def _expected() -> str:
    commit = checkout_commit(TREE)
    return VERSION if commit is None else f"{VERSION}+g{commit[:7]}"


@pytest.mark.skipif(not (TREE / ".git").exists() or shutil.which("git") is None,
                    reason="not run from a git checkout")
def test_from_a_checkout_the_version_names_its_commit() -> None:
    """In this checkout: the installed version, then +g and the first 7 digits of HEAD."""
    head = subprocess.run(["git", "-C", str(TREE), "rev-parse", "HEAD"], capture_output=True,
                          text=True, check=True, timeout=30).stdout.strip()
    assert checkout_commit(TREE) == head
    assert current() == f"{VERSION}+g{head[:7]}"


@pytest.mark.parametrize(("command", "name"), [("outbox", "outbox"),
                                               ("dispatcher", "outbox-dispatcher")])
def test_both_commands_show_the_version(command: str, name: str) -> None:
    """`outbox --version` and `outbox-dispatcher --version` print the same version."""
    done = subprocess.run([sys.executable, "-m", command, "--version"], capture_output=True,
                          text=True, cwd=TREE, timeout=60, check=True)
    assert done.stdout == f"{name} {_expected()}\n"


def test_importing_outbox_reads_no_version() -> None:
    """`import outbox` leaves the version unread (no metadata, no git files): it is read on
    first use of ``outbox.__version__``."""
    probe = ("import sys, outbox; print('outbox._shared.version' in sys.modules); "
             "outbox.__version__; print('outbox._shared.version' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          cwd=TREE, timeout=60, check=True)
    assert done.stdout.split() == ["False", "True"]


def _repository(root: Path, head: str, refs: dict[str, str], packed: str = "") -> Path:
    git = root / ".git"
    (git / "refs" / "heads").mkdir(parents=True)
    (git / "HEAD").write_text(head + "\n")
    for name, sha in refs.items():
        (git / name).write_text(sha + "\n")
    if packed:
        (git / "packed-refs").write_text("# pack-refs with: peeled fully-peeled sorted\n"
                                         + packed)
    return git


def test_the_commit_is_read_from_a_loose_a_packed_or_a_detached_head(tmp_path: Path) -> None:
    """A branch's loose ref wins over the packed one; packed refs serve when it has none;
    a detached HEAD names its commit; no repository, or an unreadable one, gives None."""
    loose = tmp_path / "loose"
    _repository(loose, "ref: refs/heads/main", {"refs/heads/main": SHA},
                packed=f"{OTHER} refs/heads/main\n")
    assert checkout_commit(loose) == SHA
    packed = tmp_path / "packed"
    _repository(packed, "ref: refs/heads/main", {}, packed=f"{OTHER} refs/heads/other\n"
                f"{SHA} refs/heads/main\n^{OTHER}\n")
    assert checkout_commit(packed) == SHA
    detached = tmp_path / "detached"
    _repository(detached, SHA, {})
    assert checkout_commit(detached) == SHA
    assert checkout_commit(tmp_path / "none") is None
    broken = tmp_path / "broken"
    _repository(broken, "ref: refs/heads/gone", {})
    assert checkout_commit(broken) is None


def test_a_worktree_reads_its_head_and_the_shared_refs(tmp_path: Path) -> None:
    """A worktree's ``.git`` file points to its own HEAD; its branch is among the main
    repository's refs (``commondir``)."""
    main = _repository(tmp_path / "main", "ref: refs/heads/main", {"refs/heads/main": OTHER})
    (main / "refs" / "heads" / "lean").write_text(SHA + "\n")
    own = main / "worktrees" / "lean"
    own.mkdir(parents=True)
    (own / "HEAD").write_text("ref: refs/heads/lean\n")
    (own / "commondir").write_text("../..\n")
    tree = tmp_path / "wt-lean"
    tree.mkdir()
    (tree / ".git").write_text(f"gitdir: {own}\n")
    assert checkout_commit(tree) == SHA

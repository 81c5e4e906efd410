"""The transport's TLS contexts: the default one, and one per set of an endpoint's own files.

Endpoints without files of their own share one context trusting certifi's
bundle (as httpx does: ``SSL_CERT_FILE`` and friends in the environment do
not change whom we trust). An endpoint with a CA bundle or a client
certificate gets the context of its set of files, made once and shared by
every connection and every endpoint that names the same set.

The files live on this process's filesystem, usually a mounted Secret, and
rotate: before a new connection uses a set's context, its files are looked
at again (``os.stat``: device, inode, size, modification time, at most once
a second per set), and a set whose files changed is read again. Connections
already open keep the context they were made with until they close (idle
ones after the pool's keep-alive expiry).

A set that cannot serve (a file missing or unreadable, not PEM, a key that
does not belong to its certificate, a client certificate outside its
validity) raises :class:`TlsFileError`, a ``ConnectError``: the endpoint's
delivery fails as a connection would, retried, its ``last_error`` naming
the file and why; no other endpoint notices. :meth:`TlsContexts.problems`
gives the sets failing now, for the dispatcher's heartbeat.
"""

from __future__ import annotations

import logging
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass

import certifi
import httpx

from dispatcher.policy.model import TlsFiles
from outbox._shared.tls_files import (
    Loaded,
    Signature,
    TlsFileProblem,
    expired,
    load,
    loose_key,
    signature,
)

log = logging.getLogger("dispatcher.tls")

RECHECK_SECONDS = 1.0
"""How often, at most, a set's files are looked at again (on a new connection)."""


class TlsFileError(httpx.ConnectError):
    """An endpoint's TLS files cannot be used: the message names the file and why."""


@dataclass(slots=True)
class _Set:
    signature: Signature
    checked: float
    loaded: Loaded | None = None
    problem: str | None = None


class TlsContexts:
    """Client contexts by set of files, read again when the files change."""

    def __init__(self, default: ssl.SSLContext | None = None, *,
                 clock: Callable[[], float] = time.monotonic,
                 wall: Callable[[], float] = time.time) -> None:
        """``default`` replaces the certifi context of endpoints without files (tests)."""
        self._default = default
        self._sets: dict[TlsFiles, _Set] = {}
        self._reported: dict[TlsFiles, str] = {}  # the problem last logged, per set
        self._clock = clock
        self._wall = wall

    def context(self, files: TlsFiles | None) -> ssl.SSLContext:
        """The context a new connection to an endpoint with these files (None: none) uses."""
        if files is None:
            return self._default_context()
        now = self._clock()
        entry = self._sets.get(files)
        if entry is None or now - entry.checked >= RECHECK_SECONDS:
            current = signature(*files)
            if entry is None or current != entry.signature:
                entry = self._read(files, current, now)
            entry.checked = now
        loaded = entry.loaded
        if loaded is not None and loaded.not_after is not None and self._wall() >= loaded.not_after:
            assert files.client_cert is not None
            self._fail(files, entry, str(expired(files.client_cert, loaded.not_after)))
        if entry.problem is not None:
            raise TlsFileError(entry.problem)
        assert loaded is not None
        return loaded.context

    def problems(self) -> dict[TlsFiles, str]:
        """The sets whose files could not be used when last tried, and why."""
        return {files: entry.problem for files, entry in self._sets.items()
                if entry.problem is not None}

    def _read(self, files: TlsFiles, current: Signature, now: float) -> _Set:
        changed = files in self._sets
        entry = self._sets[files] = _Set(current, now)
        try:
            entry.loaded = load(*files, default_cafile=certifi.where(), now=self._wall)
        except TlsFileProblem as exc:
            self._fail(files, entry, str(exc))
            return entry
        loose = None if files.client_key is None else loose_key(files.client_key)
        if loose is not None:  # said at each reading: at start and after each change
            log.warning("%s", loose)
        if self._reported.pop(files, None) is not None:
            log.warning("TLS files usable again: %s", _named(files))
        elif changed:
            log.info("TLS files read again after a change: %s", _named(files))
        return entry

    def _fail(self, files: TlsFiles, entry: _Set, problem: str) -> None:
        """Mark the set failing; said once in the log for each new problem."""
        if self._reported.get(files) != problem:
            self._reported[files] = problem
            log.error("TLS files cannot be used, deliveries to the endpoints naming them "
                      "fail until they are fixed: %s", problem)
        entry.problem = problem
        entry.loaded = None

    def _default_context(self) -> ssl.SSLContext:
        if self._default is None:
            self._default = ssl.create_default_context(cafile=certifi.where())
            self._default.set_alpn_protocols(["http/1.1"])
        return self._default


def _named(files: TlsFiles) -> str:
    return ", ".join(f"{option} {path}" for option, path in zip(files._fields, files, strict=True)
                     if path is not None)

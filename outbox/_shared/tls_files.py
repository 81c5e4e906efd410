"""An endpoint's TLS files (its CA bundle, its client certificate and key) made into a context.

The one reading of those files, so that ``outbox endpoints add``, ``update``
and ``sync`` (which warn about what they find where they run) and the
dispatcher (which fails the endpoint's deliveries with it) judge them alike.
Whatever is wrong becomes a :class:`TlsFileProblem` naming the option, the
path and why, in words an operator can act on: a file that is missing or
unreadable, not a regular file or far too large to be one, holds no
certificate or key, a key that does not belong to its certificate or that
is encrypted (the dispatcher has no passphrase to give, and OpenSSL would
otherwise ask for one on the terminal), a client certificate outside its
validity, a CA bundle whose every certificate has expired.

:func:`signature` is what the dispatcher compares to notice a change:
each file's device, inode, size and modification time, as ``os.stat``
reports them through symbolic links, so that a Kubernetes Secret's atomic
swap of its ``..data`` link counts as a change.
"""

from __future__ import annotations

import os
import ssl
import stat
import time
from collections.abc import Callable
from typing import NamedTuple

MAX_FILE_BYTES = 4 * 2**20
"""A CA bundle or certificate file larger than this is refused before it is read: the
system's whole bundle is a fraction of it, and a device (``/dev/zero``) would be read
until memory ran out."""


HEARTBEAT_PREFIX = "TLS files: "
"""How a dispatcher's report of an endpoint's unusable TLS files starts (``outbox.dispatchers
.problems``), so that ``outbox status`` tells it from a secret it cannot use, which earlier
releases report without a prefix."""

OPTIONS = ("ca_file", "client_cert", "client_key")
"""The files' options (and columns, and sync file keys), in the order they are read."""


def paths(ca_file: str | None, client_cert: str | None,
          client_key: str | None) -> list[tuple[str, str]]:
    """(option, path) of each file given, in the order they are read."""
    return [(option, path) for option, path in zip(OPTIONS, (ca_file, client_cert, client_key),
                                                   strict=True) if path is not None]


class TlsFileProblem(ValueError):
    """One of an endpoint's TLS files cannot be used; ``str()`` names it and says why."""

    def __init__(self, option: str, path: str, why: str) -> None:
        super().__init__(f"{option} {path}: {why}")
        self.option = option
        self.path = path
        self.why = why


class Loaded(NamedTuple):
    """A context made from an endpoint's files, and when its client certificate expires."""

    context: ssl.SSLContext
    not_after: float | None
    """Unix time at which the client certificate stops being valid (None: no client
    certificate, or its dates could not be read)."""


Signature = tuple[tuple[int, int, int, int] | str, ...]


def signature(ca_file: str | None, client_cert: str | None,
              client_key: str | None) -> Signature:
    """Per file, (device, inode, size, mtime) or the reason it cannot be looked at."""
    found: list[tuple[int, int, int, int] | str] = []
    for _, path in paths(ca_file, client_cert, client_key):
        try:
            info = os.stat(path)
        except OSError as exc:
            found.append(exc.strerror or str(exc))
        else:
            found.append((info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns))
    return tuple(found)


def load(ca_file: str | None, client_cert: str | None, client_key: str | None, *,
         default_cafile: str | None, now: Callable[[], float] = time.time) -> Loaded:
    """A client context trusting ``ca_file`` (else ``default_cafile``; None: the system's
    authorities), presenting the client certificate if one is given; TlsFileProblem for the
    first file that cannot serve."""
    if (client_cert is None) != (client_key is None):
        given, missing = (("client_cert", "client_key") if client_key is None
                          else ("client_key", "client_cert"))
        path = client_cert or client_key or ""
        raise TlsFileProblem(given, path, f"is given without {missing}: they go together")
    for option, path in paths(ca_file, client_cert, client_key):
        _check_file(option, path)
    if ca_file is None:
        context = ssl.create_default_context(cafile=default_cafile)
    else:
        context = _trusting(ca_file, now())
    context.set_alpn_protocols(["http/1.1"])
    not_after = None
    if client_cert is not None and client_key is not None:
        not_after = _present(context, client_cert, client_key, now())
    return Loaded(context, not_after)


def loose_key(client_key: str) -> str | None:
    """Why a client key's file mode lets other users at it, or None: readable or writable
    by others, or writable by its group. Said, never refused: a container's only user may
    be its owner whatever the bits say (a Kubernetes Secret mounts 0644 by default)."""
    try:
        mode = stat.S_IMODE(os.stat(client_key).st_mode)
    except OSError:
        return None  # told as a TlsFileProblem where it matters
    if not mode & (stat.S_IRWXO | stat.S_IWGRP):
        return None
    return (f"client_key {client_key}: mode {mode:04o} lets other users read or change the "
            "private key: chmod 600 it (a Kubernetes Secret: defaultMode: 0400)")


def expired(client_cert: str, not_after: float) -> TlsFileProblem:
    """The problem of a client certificate whose validity has ended."""
    return TlsFileProblem("client_cert", client_cert,
                          f"the certificate expired at {_moment(not_after)}")


def _check_file(option: str, path: str) -> None:
    """The file can be opened for reading, is a regular file, and is not huge."""
    try:
        info = os.stat(path)
        if not stat.S_ISREG(info.st_mode):
            raise TlsFileProblem(option, path, "is not a regular file")
        if info.st_size > MAX_FILE_BYTES:
            raise TlsFileProblem(option, path, f"is larger than {MAX_FILE_BYTES // 2**20} MiB: "
                                               "not a certificate file")
        with open(path, "rb"):
            pass
    except OSError as exc:
        raise TlsFileProblem(option, path, f"cannot be read: {exc.strerror or exc}") from None


def _trusting(ca_file: str, now: float) -> ssl.SSLContext:
    try:
        context = ssl.create_default_context(cafile=ca_file)
    except ssl.SSLError as exc:
        raise TlsFileProblem("ca_file", ca_file,
                             f"holds no PEM certificate that can be read ({_reason(exc)})"
                             ) from None
    except OSError as exc:
        raise TlsFileProblem("ca_file", ca_file,
                             f"cannot be read: {exc.strerror or exc}") from None
    ends = [ssl.cert_time_to_seconds(str(cert["notAfter"]))
            for cert in context.get_ca_certs() if "notAfter" in cert]
    if ends and max(ends) < now:
        raise TlsFileProblem("ca_file", ca_file, "every certificate in it has expired, the "
                                                 f"last at {_moment(max(ends))}")
    return context


def _present(context: ssl.SSLContext, cert: str, key: str, now: float) -> float | None:
    """Load the client certificate and key into ``context``; when the certificate expires."""

    def no_passphrase() -> str:
        raise TlsFileProblem("client_key", key, "is encrypted; give the dispatcher an "
                                                "unencrypted key (a Secret keeps it safe)")

    try:
        context.load_cert_chain(cert, key, password=no_passphrase)
    except ssl.SSLError as exc:
        if "KEY_VALUES_MISMATCH" in str(exc):
            raise TlsFileProblem("client_key", key,
                                 f"does not belong to the certificate in {cert}") from None
        raise TlsFileProblem("client_cert", cert,
                             "with its key, is not a PEM certificate and private key "
                             f"that can be read ({_reason(exc)})") from None
    except OSError as exc:
        raise TlsFileProblem("client_cert", cert,
                             f"cannot be read: {exc.strerror or exc}") from None
    dates = _dates(cert)
    if dates is None:
        return None
    not_before, not_after = dates
    if now < not_before:
        raise TlsFileProblem("client_cert", cert,
                             f"the certificate is valid only from {_moment(not_before)}")
    if now >= not_after:
        raise expired(cert, not_after)
    return not_after


def _dates(cert: str) -> tuple[float, float] | None:
    """The first certificate's notBefore and notAfter, as Unix times; None if unknown.

    Read by OpenSSL through CPython's ``_ssl._test_decode_cert``, the one
    reader of a certificate file's fields that the standard library has (no
    public function gives a client certificate's dates); where it is
    missing, the receiver's refusal of the certificate is what tells.
    """
    decode = getattr(getattr(ssl, "_ssl", None), "_test_decode_cert", None)
    if decode is None:
        return None
    try:
        fields = decode(cert)
        return (ssl.cert_time_to_seconds(fields["notBefore"]),
                ssl.cert_time_to_seconds(fields["notAfter"]))
    except (ssl.SSLError, OSError, KeyError, ValueError, TypeError):
        return None


def _reason(exc: ssl.SSLError) -> str:
    """OpenSSL's words without the file and line of CPython's C source."""
    text = str(exc.reason or exc.strerror or exc).replace("_", " ").lower()
    return text


def _moment(unix: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(unix))

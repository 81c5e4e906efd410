"""What ``endpoints add``, ``update`` and ``sync`` can tell of an endpoint's TLS files here.

The files are the dispatcher's, on its own filesystem (a mounted Secret):
the command may well run where they do not exist, so what it finds is a
warning, never a refusal. Where they can be read, they are judged as the
dispatcher judges them (``outbox._shared.tls_files``), so a key that does
not belong to its certificate is told before the first delivery fails.
Without a CA bundle of the endpoint's own, the context trusts the system's
(the dispatcher trusts certifi's): which authorities are trusted changes no
judgement made here, and the command needs nothing of the dispatcher's.
"""

from __future__ import annotations

from outbox._shared.tls_files import TlsFileProblem, load, loose_key
from outbox.endpoints._spec import EndpointSpec


def local_file_problem(spec: EndpointSpec) -> str | None:
    """Why the spec's TLS files cannot serve as read from here; None if they can (or none)."""
    if spec.ca_file is None and spec.client_cert is None:
        return None
    try:
        load(spec.ca_file, spec.client_cert, spec.client_key, default_cafile=None)
    except TlsFileProblem as exc:
        return str(exc)
    return None


def file_warning(spec: EndpointSpec) -> str | None:
    """The warning to print for the spec's files, or None."""
    problem = local_file_problem(spec)
    if problem is None and spec.client_key is not None:
        problem = loose_key(spec.client_key)
    if problem is None:
        return None
    return (f"warning: endpoint {spec.name}: {problem} (here); the dispatcher reads its TLS "
            "files on its own filesystem, and only there do they count")

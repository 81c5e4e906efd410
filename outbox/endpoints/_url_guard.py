"""``check_url``: a URL a customer typed, judged before the endpoint is saved.

The settings page wants its answer at once, not from a dead letter a day
later: a URL the endpoint options refuse, a host that names this machine
(``localhost``), or an address inside the network, in any spelling a
resolver reads (``127.1``, ``2130706433``, ``0x7f000001``, ``017700000001``,
``[::ffff:127.0.0.1]``, NAT64 and 6to4 forms), is refused with
``InvalidEndpoint`` naming ``url``. The ranges are those the dispatcher's
``--block-private-networks`` refuses (one list, ``outbox._shared.addresses``).

Nothing is resolved: a name is judged by what it says, and a name whose
addresses are inside (``internal.example``, or one that changes its answer
later) passes here. That is why an endpoint saved with ``check_url=True`` is
*guarded*: the dispatcher applies the private-network guard to every address
it connects to for it, whatever its own flags.

Names under ``localhost`` (``api.localhost``) are refused too: RFC 6761 lets
resolvers answer them with the loopback address, and common ones do.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from outbox._shared.addresses import (
    is_blocked_address,
    literal_address,
    normalise_host,
    unreadable_address,
)
from outbox._shared.urls import shown_url
from outbox.endpoints import _checks
from outbox.errors import InvalidEndpoint


def check_url(url: object) -> str:
    """The URL, if an endpoint may be saved with it for a customer; else InvalidEndpoint.

    Refused: what the endpoint options refuse (not http(s), credentials, a
    fragment...), a host that is ``localhost`` or a name under it, and an
    address in the ranges ``--block-private-networks`` refuses, however it is
    written. No name is resolved.
    """
    url = _checks.check_url(url)
    host = urlsplit(url).hostname or ""
    shown = repr(shown_url(url))
    name = normalise_host(host)
    if name == "localhost" or name.endswith(".localhost"):
        raise InvalidEndpoint(f"{shown} names this machine (localhost): an endpoint must be "
                              "reachable from the internet", "url")
    if unreadable_address(host):
        raise InvalidEndpoint(f"{shown} has a host that looks like an address but is none "
                              "that can be checked", "url")
    address = literal_address(host)
    if address is not None and is_blocked_address(address):
        raise InvalidEndpoint(f"{shown} is a private or internal address: an endpoint must "
                              "be reachable from the internet", "url")
    return url

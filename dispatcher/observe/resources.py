"""The process's file descriptors: as many as allowed, and a quiet log when they run out.

Every connection (to endpoints, to PostgreSQL, to the metrics server) takes
a descriptor, and the usual soft limit (1,024) is far below what the hard
limit allows. :func:`raise_open_files_limit` lifts the soft limit to the hard
one at start, as servers such as nginx and PostgreSQL offer to; where the
system refuses (a container runtime may), it says so and runs with what it
has.

When descriptors do run out, asyncio reports every failed ``accept`` of a
listening socket through the loop's exception handler (``socket.accept()
out of system resource``): thousands of lines a second. The handler
installed by :func:`quiet_resource_errors` logs those once a minute, with a
count, and passes everything else to asyncio's default handler.
"""

from __future__ import annotations

import asyncio
import logging
import resource
from typing import Any

from dispatcher.observe.throttle import Throttled

log = logging.getLogger("dispatcher")
_RESOURCE_MESSAGES = ("out of system resource",)
_INFINITY_CAP = 1 << 20  # "unlimited" is not a number the kernel takes for NOFILE


def raise_open_files_limit() -> tuple[int, int]:
    """Set the soft RLIMIT_NOFILE to the hard one; the (soft, hard) limits in force after."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = _INFINITY_CAP if hard == resource.RLIM_INFINITY else hard
    if soft != resource.RLIM_INFINITY and soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        except (OSError, ValueError) as exc:
            log.warning("could not raise the open files limit from %d to %d (%s); "
                        "running with %d", soft, target, exc, soft)
        else:
            soft = target
    return soft, hard


def quiet_resource_errors(loop: asyncio.AbstractEventLoop, interval: float = 60.0) -> Throttled:
    """Install the loop exception handler that throttles "out of system resource" reports."""
    throttle = Throttled(interval)

    def handler(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        message = str(context.get("message", ""))
        if not any(text in message for text in _RESOURCE_MESSAGES):
            loop.default_exception_handler(context)
            return
        exc = context.get("exception")
        throttle.warning(log, "%s: %s (the process has no file descriptor left; "
                              "accepting again shortly)", message, exc)

    loop.set_exception_handler(handler)
    return throttle

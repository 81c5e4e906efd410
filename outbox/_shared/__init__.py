"""What the producer library, the ``outbox`` command and the dispatcher must agree on.

The one private package of ``outbox`` that the sidecar may import (an import
contract in pyproject.toml keeps it so): rules that must be the same on both
sides of the database, and nothing else. Each module stands alone, so the
dispatcher's pure policy can take the header rules without a database driver.

- ``headers``: valid custom headers, and the names only the dispatcher writes;
- ``endpoint_defaults``: the defaults of every endpoint option;
- ``dsn``: finding the database, and refusing a malformed connection string;
- ``text``: the first line of an exception, for one-line messages;
- ``wire``: the request format (envelope and Standard Webhooks signing, the
  signed prefix and the reading of ``whsec_`` secrets), which the dispatcher
  sends and ``outbox.receive`` / ``outbox.testing`` read and build.
- ``urls``: an endpoint URL as it may be shown (query values masked);
- ``schema``: a database's schema state, read and judged, and a missing schema told;
- ``argtypes``: the argument types both commands take (durations);
- ``times``: moments written as RFC 3339 in UTC with ``Z``;
- ``secrets``: an endpoint secret's forms (``whsec_...``, ``env:NAME``),
  checked as the commands write them and decoded as the dispatcher signs;
- ``version``: the running version, with the commit from a git checkout;
- ``extras``: the optional parts of the install, and the line that adds one;
- ``tls_files``: an endpoint's TLS files read and judged, by the commands
  (a warning) and the dispatcher (its context);
- ``usage``: the one-line usage errors of both commands.
"""

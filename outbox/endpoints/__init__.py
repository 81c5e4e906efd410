"""Endpoint management: the definitions operators write, and the changes they make.

What ``outbox endpoints`` does, callable from Python with a psycopg connection:

- ``_spec``: :class:`EndpointSpec`, one endpoint's whole definition, checked
  on construction, and new secrets made;
- ``_checks``: one checker per option;
- the secrets' forms (``whsec_...``, ``env:NAME``) and the keys they give live
  in ``outbox._shared.secrets``, which the dispatcher reads them with too;
- ``_sync``: a TOML sync file read into specs, and the plan to apply it;
- ``_files``: the TLS files a spec names, judged where the command runs (a warning);
- ``_store``: the changes in the database, in the caller's transaction.
"""

from outbox._shared.endpoint_defaults import (
    DEFAULT_MAX_ATTEMPTS,
    DEFAULT_MAX_BACKOFF,
    DEFAULT_MAX_BATCH,
    DEFAULT_MAX_IN_FLIGHT,
    DEFAULT_MIN_BACKOFF,
    DEFAULT_TIMEOUT,
    FORMATS,
    Format,
)
from outbox._shared.secrets import (
    ENV_SECRET_PREFIX,
    check_secret,
    decode_secret,
    env_name_allowed,
)
from outbox.endpoints._checks import check_patterns, check_tenant, glob_to_like
from outbox.endpoints._files import file_warning
from outbox.endpoints._spec import (
    EndpointSpec,
    generate_secret,
    parse_header,
    signing_label,
)
from outbox.endpoints._store import (
    StoredEndpoint,
    SyncReport,
    add_endpoint,
    list_endpoints,
    plan_endpoints_sync,
    remove_endpoint,
    rotate_secret,
    set_enabled,
    spec_of,
    sync_endpoints,
    update_endpoint,
)
from outbox.endpoints._sync import load_sync_file

__all__ = [
    "DEFAULT_MAX_ATTEMPTS",
    "DEFAULT_MAX_BACKOFF",
    "DEFAULT_MAX_BATCH",
    "DEFAULT_MAX_IN_FLIGHT",
    "DEFAULT_MIN_BACKOFF",
    "DEFAULT_TIMEOUT",
    "ENV_SECRET_PREFIX",
    "FORMATS",
    "EndpointSpec",
    "Format",
    "StoredEndpoint",
    "SyncReport",
    "add_endpoint",
    "check_patterns",
    "check_secret",
    "check_tenant",
    "decode_secret",
    "env_name_allowed",
    "file_warning",
    "generate_secret",
    "glob_to_like",
    "list_endpoints",
    "load_sync_file",
    "parse_header",
    "plan_endpoints_sync",
    "remove_endpoint",
    "rotate_secret",
    "set_enabled",
    "signing_label",
    "spec_of",
    "sync_endpoints",
    "update_endpoint",
]

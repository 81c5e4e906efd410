"""Endpoints managed from the application, in its own transaction, and their definitions.

The public functions run on the caller's psycopg 3 connection, in its
transaction, and never commit: :func:`add` (returns the signing secret),
:func:`update`, :func:`remove`, :func:`enable`, :func:`disable`,
:func:`rotate_secret` (returns the new secret), :func:`retry_now` (returns the
number of deliveries made due), :func:`get` and :func:`list` (what ``outbox
endpoints list --json`` shows) in ``_api``; the delivery log,
:func:`deliveries` and :func:`attempts`, in ``_log``; :func:`replay`,
:func:`retry_dead` and :func:`send_test` in ``_resend``; each with an async
twin (``aadd``, ``aupdate`` ...) for an ``AsyncConnection``. Each takes
``as_tenant=T``, the tenant guard: T's endpoints only, another's not found.
:func:`check_url` judges a URL a customer typed (``_url_guard``). Options are
keyword arguments named as the sync file's keys. Errors, each changing
nothing: :class:`InvalidEndpoint` (a ``ValueError``) names a bad option or
argument, :class:`EndpointExists` an existing name on ``add``,
:class:`EndpointNotFound` an unknown one, :class:`EndpointBusy` a removal with
undelivered deliveries without ``force``.

Underneath, what ``outbox endpoints`` and those functions share:

- ``_options``: the table of options, one row each: field, column, flags, parser,
  check, default, how it is shown; the rest reads it;
- ``_spec``: :class:`EndpointSpec`, one endpoint's whole definition, checked
  on construction, and new secrets made;
- ``_checks``: the checkers the table's rows use; ``_args``: those of the functions'
  other arguments;
- the secrets' forms (``whsec_...``, ``env:NAME``) and the keys they give live
  in ``outbox._shared.secrets``, which the dispatcher reads them with too;
- ``_sync``: a TOML sync file read into specs, and the plan to apply it;
- ``_files``: the TLS files a spec names, judged where the command runs (a warning);
- ``_store``: the changes in the database, in the caller's transaction, as
  plans that a blocking and an async shell carry out alike;
- ``_shown``: an endpoint as ``list --json`` shows it.
"""

from outbox._shared.endpoint_defaults import DEFAULT_MAX_ATTEMPTS as DEFAULT_MAX_ATTEMPTS
from outbox._shared.endpoint_defaults import DEFAULT_MAX_BACKOFF as DEFAULT_MAX_BACKOFF
from outbox._shared.endpoint_defaults import DEFAULT_MAX_BATCH as DEFAULT_MAX_BATCH
from outbox._shared.endpoint_defaults import DEFAULT_MAX_IN_FLIGHT as DEFAULT_MAX_IN_FLIGHT
from outbox._shared.endpoint_defaults import DEFAULT_MIN_BACKOFF as DEFAULT_MIN_BACKOFF
from outbox._shared.endpoint_defaults import DEFAULT_TIMEOUT as DEFAULT_TIMEOUT
from outbox._shared.endpoint_defaults import FORMATS as FORMATS
from outbox._shared.endpoint_defaults import Format as Format
from outbox._shared.secrets import ENV_SECRET_PREFIX as ENV_SECRET_PREFIX
from outbox._shared.secrets import check_secret as check_secret
from outbox._shared.secrets import decode_secret as decode_secret
from outbox._shared.secrets import env_name_allowed as env_name_allowed
from outbox.endpoints._api import (
    aadd,
    add,
    adisable,
    aenable,
    aget,
    alist,
    aremove,
    aretry_now,
    arotate_secret,
    aupdate,
    disable,
    enable,
    get,
    list,
    remove,
    retry_now,
    rotate_secret,
    update,
)
from outbox.endpoints._checks import check_patterns as check_patterns
from outbox.endpoints._checks import check_tenant as check_tenant
from outbox.endpoints._checks import glob_to_like as glob_to_like
from outbox.endpoints._checks import parse_header as parse_header
from outbox.endpoints._files import file_warning as file_warning
from outbox.endpoints._log import aattempts, adeliveries, attempts, deliveries
from outbox.endpoints._options import BY_FIELD as BY_FIELD
from outbox.endpoints._options import OPTIONS as OPTIONS
from outbox.endpoints._options import REQUIRED as REQUIRED
from outbox.endpoints._options import Flag as Flag
from outbox.endpoints._options import Option as Option
from outbox.endpoints._options import Switch as Switch
from outbox.endpoints._resend import (
    areplay,
    aretry_dead,
    asend_test,
    replay,
    retry_dead,
    send_test,
)
from outbox.endpoints._shown import as_json as as_json
from outbox.endpoints._shown import as_viewer_json as as_viewer_json
from outbox.endpoints._spec import EndpointSpec as EndpointSpec
from outbox.endpoints._spec import generate_secret as generate_secret
from outbox.endpoints._spec import signing_label as signing_label
from outbox.endpoints._store import RetryNow as RetryNow
from outbox.endpoints._store import StoredEndpoint as StoredEndpoint
from outbox.endpoints._store import SyncReport as SyncReport
from outbox.endpoints._store import add_endpoint as add_endpoint
from outbox.endpoints._store import list_endpoints as list_endpoints
from outbox.endpoints._store import plan_endpoints_sync as plan_endpoints_sync
from outbox.endpoints._store import remove_endpoint as remove_endpoint
from outbox.endpoints._store import retry_endpoint_now as retry_endpoint_now
from outbox.endpoints._store import rotate_endpoint_secret as rotate_endpoint_secret
from outbox.endpoints._store import set_enabled as set_enabled
from outbox.endpoints._store import spec_of as spec_of
from outbox.endpoints._store import sync_endpoints as sync_endpoints
from outbox.endpoints._store import update_endpoint as update_endpoint
from outbox.endpoints._sync import load_sync_file as load_sync_file
from outbox.endpoints._url_guard import check_url
from outbox.errors import EndpointBusy, EndpointExists, EndpointNotFound, InvalidEndpoint

# The public API: what docs/api.md documents. The names imported "as" themselves above
# serve the ``outbox`` command and may change between minor versions.
__all__ = [
    "EndpointBusy",
    "EndpointExists",
    "EndpointNotFound",
    "InvalidEndpoint",
    "aadd",
    "aattempts",
    "add",
    "adeliveries",
    "adisable",
    "aenable",
    "aget",
    "alist",
    "aremove",
    "areplay",
    "aretry_dead",
    "aretry_now",
    "arotate_secret",
    "asend_test",
    "attempts",
    "aupdate",
    "check_url",
    "deliveries",
    "disable",
    "enable",
    "get",
    "list",
    "remove",
    "replay",
    "retry_dead",
    "retry_now",
    "rotate_secret",
    "send_test",
    "update",
]

"""Names the documentation fixes, as data the tests check against (docs/production.md, metrics)."""

from __future__ import annotations

# name -> (type, labels)
METRICS = {
    "outbox_delivered_total": ("counter", {"endpoint"}),
    "outbox_delivery_failures_total": ("counter", {"endpoint", "reason"}),
    "outbox_dead_letters_total": ("counter", {"endpoint"}),
    "outbox_pending": ("gauge", {"endpoint"}),
    "outbox_oldest_pending_seconds": ("gauge", {"endpoint"}),
    "outbox_circuit_open": ("gauge", {"endpoint"}),
    "outbox_endpoint_enabled": ("gauge", {"endpoint"}),
    "outbox_delivery_duration_seconds": ("histogram", {"endpoint"}),
    "outbox_delivery_lag_seconds": ("histogram", {"endpoint"}),
    "outbox_dropped_total": ("counter", {"endpoint", "reason"}),
    "outbox_endpoint_info": ("gauge", {"endpoint", "tenant", "disabled_by"}),
}
DISABLED_BY = ("", "operator", "application", "gone")
"""The values of outbox_endpoint_info's disabled_by ("" while enabled)."""
HISTOGRAM_MODES = ("endpoint", "fleet")
"""--histograms: the two histograms per endpoint (their label), or one of each for all."""
# Metrics the project adds beside the documented ones (docs/production.md, "Metrics and health").
PROJECT_METRICS = {
    "outbox_max_pending": ("gauge", {"endpoint"}),
    "outbox_tenants_due": ("gauge", {"endpoint"}),
    "outbox_tenant_pending_max": ("gauge", {"endpoint"}),
    "outbox_requests_resent_total": ("counter", {"endpoint"}),
    "outbox_build_info": ("gauge", {"version", "schema_version"}),
    "outbox_db_horizon_age_xids": ("gauge", set()),
    "outbox_db_horizon_held_seconds": ("gauge", set()),
    "outbox_event_loop_lag_seconds": ("gauge", set()),
}
# With --databases only (docs/scaling.md): which databases the dispatcher serves, and which
# its list holds (added by this project).
MANY_METRICS = {
    "outbox_database_up": ("gauge", {"database"}),
    "outbox_database_listed": ("gauge", {"database"}),
}
# The standard collectors' series every Python exporter has (names' prefixes).
STANDARD_PREFIXES = ("process_", "python_")
FAILURE_REASONS = ("timeout", "connect", "http_4xx", "http_5xx", "other")
DROP_REASONS = ("backlog-full", "disabled", "dead-expired")

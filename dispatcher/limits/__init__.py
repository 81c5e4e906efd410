"""The fleet's rules, one room each: what every dispatcher sharing an endpoint obeys.

Each rule is enforced where the whole fleet meets, in the statements of
``outbox/sql/queries/dispatch.sql``; its room here holds the rule's Python
half and names the statements that hold the other:

- ``slots``: ``--max-in-flight``, request slots leased from ``endpoint_slots``
  (the slots one dispatcher holds, a slot kept between requests, its passes,
  its lingering);
- ``rate``: ``--rate-limit``, turns from the shared clock (the pace, the horizon);
- ``circuit``: ``--breaker-failures``, the breaker's verdicts, their folding,
  and whether a slot passes on after a failure;
- ``keys``: per-key order, and parking the rows that wait behind their key;
- ``walk``: which endpoints a claim looks at (the walk for due work, its
  runs, laps and cursor, and how long its findings serve);
- ``quota``: what one claim asks each endpoint for (slots dealt in turns
  between the endpoints with due work, prefetch, rows), within what the
  rules above grant;
- ``ring``: fair rounds between the tenants of one endpoint (the cursor of
  the claim's walk round their ring, and a waiting group's place among the
  tenants' rounds).

``policy`` keeps what is decided per attempt (envelope, outcome, backoff,
redaction); these are decided per endpoint, for the fleet. Every room is pure
(no I/O, no clock of its own: the callers pass the time) but ``keys``, which
runs the parking statement.
"""

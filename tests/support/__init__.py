"""Helpers the tests share: real processes, receivers and databases, never mocks.

- ``dispatcher``: the dispatcher as a subprocess, endpoints by SQL, polling with deadlines;
- ``resilience``: dispatchers to kill and freeze, scripted receivers, their fixtures;
- ``faults``: faults at chosen moments (signals, killed backends, expired leases, a
  PostgreSQL crash, a clock off) and what to check after them;
- ``proxy``: a TCP fault proxy (latency, blackhole, reset, close after N bytes);
- ``hostile``: a scriptable receiver that hangs, drips, floods, resets and echoes;
- ``publishing``: committed and uncommitted publishing, and what the database holds;
- ``admin``: operator-command scenarios (dead letters, replays) built in SQL;
- ``cli``: the ``outbox`` command as a subprocess, with a clean environment;
- ``contract``: the documented metric table, in one place;
- ``claiming``: the claim and complete statements run by hand, as a dispatcher runs them;
- ``loop_server``: a TCP server on an event loop of its own (the proxy's, the hostile's);
- ``catalogue``: the ``outbox`` schema's whole catalogue, to compare two databases on;
- ``releases``: earlier releases' sources, run beside this one (upgrades, rolling deploys);
- ``receiving``: the receiving examples of ``docs/`` served for real, a receiver's database;
- ``roles``: the operator, application and dispatcher roles of docs/upgrading.md, for real;
- ``pgbouncer``: Debian's PgBouncer in transaction mode in front of the test cluster;
- ``prometheus``: a real Prometheus with our alert rules' waits shortened, for the live alerts;
- ``tracing``: a tracer of the test's own, and the spans a dispatcher printed;
- ``markdown``: the documentation as GitHub reads it (headings' anchors, link targets);
- ``endpoint_options``, ``strategies``: generated inputs for the property tests.
"""

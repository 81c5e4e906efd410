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
- ``contract``: the contract's metric table, in one place.
"""

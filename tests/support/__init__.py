"""Helpers the tests share: real processes, receivers and databases, never mocks.

- ``dispatcher``: the dispatcher as a subprocess, endpoints by SQL, polling with deadlines;
- ``resilience``: dispatchers to kill and freeze, scripted receivers, their fixtures;
- ``publishing``: committed and uncommitted publishing, and what the database holds;
- ``admin``: operator-command scenarios (dead letters, replays) built in SQL;
- ``cli``: the ``outbox`` command as a subprocess, with a clean environment;
- ``contract``: the contract's metric table, in one place.
"""

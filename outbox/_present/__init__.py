"""What the ``outbox`` command and the web view both present, in one place.

``outbox status``, ``dead list``, ``show`` and ``events list`` and the web
view's pages (``outbox web``) show the same rows: they read the same
arguments, refuse the same values, and say the same things in the same
words. Both import this package and nothing of each other (an import
rule in pyproject.toml keeps it so):

- ``shapes``: the documented ``--json`` documents, which the pages answer at
  ``?format=json``; RFC 3339 times;
- ``args``: the argument types and filters (event ids, counts, times,
  type patterns, tenants) and the check of a time window;
- ``words``: ages (``12m05s``), the line naming who holds the horizon back, and what
  a retry-now did.
"""

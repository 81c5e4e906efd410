"""The wire: one HTTP attempt per request, and the network policy it obeys.

- ``sender``: ``HttpSender``, one attempt under one deadline, never an exception;
- ``transport``: the HTTP/1.1 client, ``post``: a request's bytes in, the answer out;
- ``connection``, ``parse``, ``pool``: a keep-alive connection, its response
  parser (llhttp through httptools, with our limits), and the pool that
  hands connections out;
- ``dial``: DNS, the SSRF check of every resolved address, TCP and TLS;
- ``resolve``: host name lookups on threads of their own, one per name at a time;
- ``netguard``: which addresses ``--block-private-networks`` refuses.

Nothing here knows the database or the delivery loop.
"""

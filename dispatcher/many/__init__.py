"""Many databases, one fleet: ``outbox-dispatcher --databases FILE``.

``supervisor`` runs the process: it reads the list (the file and its catalog),
finds the fleet's members (``membership``), keeps the databases this member
owns (``ownership``, rendezvous hashing), looks at those without a pinned
connection (``probe``, hinted by ``activity``), and starts and stops one
``site`` per database it serves, within the connection ``budget``.
"""

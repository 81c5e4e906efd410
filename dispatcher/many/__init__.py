"""Many databases, one fleet: ``outbox-dispatcher --databases FILE``.

``supervisor`` runs the process. The ``roster`` reads the list (the file and
its catalog) and the fleet's members (``membership``), and gives the
databases this member owns (``ownership``, rendezvous hashing). The
supervisor looks at those without pinned connections (``probe``, hinted by
``activity``), and starts and stops one ``site`` per database it serves,
within the connection ``budget``.
"""

"""``outbox demo``: the whole path, end to end, on a throwaway cluster.

Loaded only by the ``outbox demo`` command (an import contract keeps the
producer library from importing it):

- ``runner``: start everything, publish, wait, check, clean up;
- ``publisher``: events in real transactions, a few rolled back on purpose;
- ``receiver``: the flaky downstream service, checking every promise;
- ``process``: the real dispatcher (``python -m dispatcher``) as a child process.
"""

from outbox.demo.runner import DemoFailed, Interrupted, Progress, Summary, run_demo

__all__ = ["DemoFailed", "Interrupted", "Progress", "Summary", "run_demo"]

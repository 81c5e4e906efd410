"""``python -m outbox`` is the ``outbox`` command."""

import sys

from outbox.cli import main

sys.exit(main())

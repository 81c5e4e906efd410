"""``python -m dispatcher`` is ``outbox-dispatcher``."""

import sys

from dispatcher.cli import main

sys.exit(main())

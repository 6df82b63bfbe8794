"""``python -m as2rank`` is the ``as2rank`` command."""

import sys

from .app.cli import main

sys.exit(main())

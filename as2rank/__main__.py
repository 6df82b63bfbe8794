"""``python -m as2rank`` is the ``as2rank`` command."""

import sys

from .cli import main

sys.exit(main())

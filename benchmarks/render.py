"""Render the benchmark and study pages again from their saved results, without running anything.

Every ``benchmarks/results/<name>.json`` and ``benchmarks/studies/results/<name>.json`` names its template
(``"template"``) and the tag of the machine that ran it (``"tag"``); this writes ``docs/benchmarks/<name>.md``
from them, or ``docs/studies/<name>.md`` for a study (a template in ``benchmarks/studies/pages/``). With
``--check`` it writes nothing and exits 1 when a page differs from what its results render to (a page edited
by hand, or a template changed without re-rendering).

    python benchmarks/render.py              # every page
    python benchmarks/render.py cascade      # one page
    python benchmarks/render.py cpu_bounds   # a study's page, by the same kind of name
    python benchmarks/render.py --check
"""

import sys

from harness.pages import render_main

if __name__ == "__main__":
    sys.exit(render_main(description=__doc__.splitlines()[0]))

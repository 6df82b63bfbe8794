"""Render the benchmark pages again from their saved results, without running anything.

Every ``benchmarks/results/<name>.json`` names its template (``"template"``) and the tag of the machine that
ran it (``"tag"``); this writes ``docs/benchmarks/<name>.md`` from them. With ``--check`` it writes nothing
and exits 1 when a page differs from what its results render to (a page edited by hand, or a template
changed without re-rendering).

    python benchmarks/render.py            # every page
    python benchmarks/render.py cascade    # one page
    python benchmarks/render.py --check
"""

from __future__ import annotations

import argparse
import json
import sys

from _common import DOCS, RESULTS, render_page


def pages(names=()) -> dict:
    """``{name: results}`` of the saved results (all, or the ``names`` given)."""
    paths = sorted(RESULTS.glob("*.json")) if not names else [RESULTS / f"{n}.json" for n in names]
    missing = [p.name for p in paths if not p.exists()]
    if missing:
        raise SystemExit(f"No results named {', '.join(missing)} in {RESULTS}.")
    return {p.stem: json.loads(p.read_text()) for p in paths}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", help="result names (default: all)")
    parser.add_argument("--check", action="store_true", help="compare instead of writing; exit 1 on a difference")
    args = parser.parse_args(argv)
    stale = []
    for name, res in pages(args.names).items():
        text = render_page(res)
        page = DOCS / f"{name}.md"
        if args.check:
            if not page.exists() or page.read_text() != text:
                stale.append(name)
        else:
            page.write_text(text)
            print(f"rendered {page}")
    if stale:
        print(f"pages that differ from their results: {', '.join(stale)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

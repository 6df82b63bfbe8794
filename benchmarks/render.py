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

from __future__ import annotations

import argparse
import json
import sys

import _common
from _common import render_page


def pages(names=()) -> dict:
    """``{name: results}`` of the saved results, benchmarks' and studies' (all, or the ``names`` given)."""
    found = {}
    for folder in (_common.RESULTS, _common.STUDY_RESULTS):
        for path in sorted(folder.glob("*.json")):
            if path.stem in found:
                raise SystemExit(f"Results named {path.stem} in both {found[path.stem].parent} and {folder}.")
            found[path.stem] = path
    missing = [n for n in names if n not in found]
    if missing:
        raise SystemExit(f"No results named {', '.join(missing)} in {_common.RESULTS} or {_common.STUDY_RESULTS}.")
    return {n: json.loads(found[n].read_text()) for n in (names or found)}


def page_path(name: str, res: dict):
    """Where the page of the results ``name`` goes: ``docs/benchmarks/``, or ``docs/studies/`` for a study."""
    return _common.folders(res["template"])[1] / f"{name}.md"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", help="result names (default: all)")
    parser.add_argument("--check", action="store_true", help="compare instead of writing; exit 1 on a difference")
    args = parser.parse_args(argv)
    stale = []
    for name, res in pages(args.names).items():
        text = render_page(res)
        page = page_path(name, res)
        if args.check:
            if not page.exists() or page.read_text() != text:
                stale.append(name)
        else:
            _common.write_text(page, text)
            print(f"rendered {page}")
    if stale:
        print(f"pages that differ from their results: {', '.join(stale)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

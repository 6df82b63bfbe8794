"""The pages: a run saves its results (``benchmarks/results/<name>.json``) and renders them through its template
(``benchmarks/pages/<template>.md.j2``) to ``docs/benchmarks/<name>.md``; a study's template, in
``benchmarks/studies/pages/``, puts its results in ``benchmarks/studies/results/`` and its page (and figures) in
``docs/studies/``. :func:`render_main` (``python benchmarks/render.py``) renders every page again from the
saved results, or checks that the committed pages are what they render to."""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from pathlib import Path

from harness.machine import load_average, log
from harness.paths import DOCS, PAGES, RESULTS, ROOT, STUDY_DOCS, STUDY_PAGES, STUDY_RESULTS, TAG, tagged
from harness.store import jsonable, write_text


def pct(value, digits: int = 2) -> str:
    """A fraction as a percentage with ``digits`` decimals; ``–`` for a missing value."""
    if value is None or value != value:
        return "–"
    return f"{100 * value:.{digits}f}"


def pval(p, alpha: float = 0.05) -> str:
    """A p-value with three decimals, ``*`` when below ``alpha``; ``–`` for a missing one."""
    if p is None or p != p:
        return "–"
    return f"{p:.3f}" + ("*" if p < alpha else "")


def num(value, spec: str = ".2f") -> str:
    """``format(value, spec)``; ``–`` for a missing value."""
    if value is None or value != value:
        return "–"
    return format(value, spec)


def user_paths(text: str) -> str:
    """``text`` with the temporary folders a run wrote its user's files to shown as ``path/to/``."""
    return re.sub(r"/tmp/[^/\s]+/", "path/to/", text)


def environment():
    """The Jinja environment of the pages (and of the acceptance checks, :mod:`harness.checks`)."""
    import jinja2

    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader([PAGES, STUDY_PAGES]),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        autoescape=False,
    )
    env.filters.update(pct=pct, pval=pval, num=num, user_paths=user_paths)
    return env


def is_study(template: str) -> bool:
    """Whether the pages of ``template`` are a study's (its template is in ``benchmarks/studies/pages/``)."""
    return (STUDY_PAGES / f"{template}.md.j2").exists()


def folders(template: str) -> tuple[Path, Path]:
    """Where the results and the pages (and figures) of ``template`` go: ``(RESULTS, DOCS)``, or
    ``(STUDY_RESULTS, STUDY_DOCS)`` for a study."""
    return (STUDY_RESULTS, STUDY_DOCS) if is_study(template) else (RESULTS, DOCS)


def render_page(res: dict) -> str:
    """The Markdown page of ``res``: its template (``res["template"]``) rendered with ``res`` as ``res``.

    A result that a later run replaced carries ``"stale"``: a sentence saying what it predates and which page
    holds the current results, shown under the page's title."""
    env = environment()
    env.globals.update(tagged=lambda name: tagged(name, res.get("tag", "")))
    text = env.get_template(f"{res['template']}.md.j2").render(res=res)
    if res.get("stale"):
        title, _, body = text.partition("\n")
        text = f"{title}\n\n> **An earlier run, kept for reference.** {res['stale']}\n\n" + body.lstrip("\n")
    return text


def publish(res: dict, name: str, template: str | None = None) -> Path:
    """Save ``res`` as ``benchmarks/results/<name>.json`` and render it to ``docs/benchmarks/<name>.md``
    (``name`` with the run's tag), through ``benchmarks/pages/<template>.md.j2`` (default: ``name``); a study's
    template puts them in the studies' folders instead (:func:`folders`). Returns the page's path."""
    res = jsonable({**res, "template": template or res.get("template") or name, "tag": TAG})
    stem = tagged(name + ".json")[: -len(".json")]
    results, docs = folders(res["template"])
    results.mkdir(parents=True, exist_ok=True)
    write_text(results / f"{stem}.json", json.dumps(res, indent=2) + "\n")
    docs.mkdir(parents=True, exist_ok=True)
    page = docs / f"{stem}.md"
    write_text(page, render_page(res))
    log(f"wrote {page.relative_to(ROOT)}")
    return page


def figure_path(template: str, name: str) -> Path:
    """Where a page's figure ``name`` goes (beside the page, with the run's tag)."""
    docs = folders(template)[1]
    docs.mkdir(parents=True, exist_ok=True)
    return docs / tagged(name)


def save_figure(fig, path, *, dpi: int = 120, legend_axes=None) -> None:
    """Write a page's figure: the legend of ``legend_axes`` (if given) in its lower right corner, a light grid on
    it, the layout tightened; the figure is closed afterwards."""
    import matplotlib.pyplot as plt

    if legend_axes is not None:
        legend_axes.legend(fontsize=7, loc="lower right")
        legend_axes.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=dpi)
    plt.close(fig)


def pyplot():
    """matplotlib's pyplot on the Agg backend (no display)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def log_checks(checks) -> None:
    """Print each acceptance check's verdict as the run ends."""
    for c in checks:
        log(f"[check] {'PASS' if c['pass'] else 'FAIL'}: {c['check']}: {c['measured']}")


def conclude(res: dict, name: str, start: float, checks: list | None = None) -> Path:
    """End a run: record and print its acceptance ``checks`` (if any), the load average and the wall time since
    ``start`` (``time.perf_counter()``), then :func:`publish` it as ``name``. Returns the page's path."""
    if checks is not None:
        res["acceptance"] = checks
        log_checks(checks)
    res["load_average_end"] = load_average()
    res["wall_seconds"] = time.perf_counter() - start
    page = publish(res, name)
    log(f"done in {res['wall_seconds'] / 60:.1f} min")
    return page


# ----------------------------------------------------------------------------------------------- render.py
def saved_results(names=()) -> dict:
    """``{name: results}`` of the saved results, benchmarks' and studies' (all, or the ``names`` given)."""
    found = {}
    for folder in (RESULTS, STUDY_RESULTS):
        for path in sorted(folder.glob("*.json")):
            if path.stem in found:
                raise SystemExit(f"Results named {path.stem} in both {found[path.stem].parent} and {folder}.")
            found[path.stem] = path
    missing = [n for n in names if n not in found]
    if missing:
        raise SystemExit(f"No results named {', '.join(missing)} in {RESULTS} or {STUDY_RESULTS}.")
    return {n: json.loads(found[n].read_text()) for n in (names or found)}


def page_path(name: str, res: dict) -> Path:
    """Where the page of the results ``name`` goes: ``docs/benchmarks/``, or ``docs/studies/`` for a study."""
    return folders(res["template"])[1] / f"{name}.md"


def render_main(argv=None, description: str = "Render the pages again from their saved results.") -> int:
    """``python benchmarks/render.py [names] [--check]``: write every page (or those named) from its saved
    results, or with ``--check`` write nothing and return 1 when a committed page differs from them."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("names", nargs="*", help="result names (default: all)")
    parser.add_argument("--check", action="store_true", help="compare instead of writing; exit 1 on a difference")
    args = parser.parse_args(argv)
    stale = []
    for name, res in saved_results(args.names).items():
        text = render_page(res)
        page = page_path(name, res)
        if args.check:
            if not page.exists() or page.read_text() != text:
                stale.append(name)
        else:
            write_text(page, text)
            print(f"rendered {page}")
    if stale:
        print(f"pages that differ from their results: {', '.join(stale)}", file=sys.stderr)
        return 1
    return 0

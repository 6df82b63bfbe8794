"""The committed benchmark and study pages are what their saved results render to (``benchmarks/render.py
--check``): a page edited by hand, or a template changed without re-rendering, fails here. The pages a user
reads (``docs/benchmarks/``) carry no acceptance checks, and no page names an issue or a path of the machine
that ran it."""

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("jinja2")

ROOT = Path(__file__).resolve().parents[1]
BENCHMARK_PAGES = sorted((ROOT / "docs" / "benchmarks").glob("*.md"))
STUDY_PAGES = sorted((ROOT / "docs" / "studies").glob("*.md"))


def test_every_page_renders_from_its_results():
    out = subprocess.run([sys.executable, "benchmarks/render.py", "--check"], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr


@pytest.mark.parametrize("name", ["cosinet", "cosinet_selection"])
def test_check_reports_a_page_that_differs(tmp_path, name):
    # A stale page is caught, a benchmark's or a study's: render one page's results to a copy of the page
    # folders, change it, check.
    code = (
        "import sys; sys.path.insert(0, 'benchmarks'); import pathlib; from harness import pages; "
        f"pages.DOCS = pages.STUDY_DOCS = pathlib.Path({str(tmp_path)!r}); "
        f"res = pages.saved_results([{name!r}])[{name!r}]; "
        f"pages.page_path({name!r}, res).write_text(pages.render_page(res) + 'edited by hand\\n'); "
        f"sys.exit(pages.render_main(['--check', {name!r}]))"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 1 and name in out.stderr, out.stderr


def test_studies_render_to_their_own_section():
    # A study's results (benchmarks/studies/results/) render to docs/studies/, the others' to docs/benchmarks/.
    code = (
        "import json, sys; sys.path.insert(0, 'benchmarks'); from harness import pages; "
        "print(json.dumps({n: pages.page_path(n, r).parent.name for n, r in pages.saved_results().items()}))"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    sections = json.loads(out.stdout)
    studies = {p.stem for p in (ROOT / "benchmarks" / "studies" / "results").glob("*.json")}
    assert studies and {n for n, s in sections.items() if s == "studies"} == studies
    assert {s for n, s in sections.items() if n not in studies} == {"benchmarks"}


@pytest.mark.parametrize("page", BENCHMARK_PAGES, ids=lambda p: p.name)
def test_benchmark_pages_carry_no_acceptance_checks(page):
    assert "acceptance check" not in page.read_text().lower()


@pytest.mark.parametrize("page", BENCHMARK_PAGES + STUDY_PAGES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_pages_name_no_issue_and_no_machine_path(page):
    text = page.read_text()
    assert not re.search(r"\bissue\s*#?\d+|(?<![\w&])#\d+\b", text, re.IGNORECASE), page.name
    assert not re.search(r"/work/|/home/|/tmp/|\.\./shared", text), page.name

"""The committed benchmark pages are what their saved results render to (``benchmarks/render.py --check``):
a page edited by hand, or a template changed without re-rendering, fails here."""

import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("jinja2")

ROOT = Path(__file__).resolve().parents[1]


def test_every_page_renders_from_its_results():
    out = subprocess.run([sys.executable, "benchmarks/render.py", "--check"], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr


def test_check_reports_a_page_that_differs(tmp_path):
    # A stale page is caught: render one page's results to a copy of the harness's page folder, change it, check.
    code = (
        "import sys; sys.path.insert(0, 'benchmarks'); import _common, render, pathlib; "
        f"_common.DOCS = render.DOCS = pathlib.Path({str(tmp_path)!r}); "
        "res = render.pages(['cosinet_selection'])['cosinet_selection']; "
        "(render.DOCS / 'cosinet_selection.md').write_text(_common.render_page(res) + 'edited by hand\\n'); "
        "sys.exit(render.main(['--check', 'cosinet_selection']))"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 1 and "cosinet_selection" in out.stderr, out.stderr

"""as2rank.metrics is one package: every name the former as2rank.metrics, as2rank.triggering and
as2rank.evaluation modules exported imports from it, and the former modules are gone (no private name crosses
into it: tests/test_private_names.py)."""

import importlib
from pathlib import Path

import pytest

import as2rank
import as2rank.metrics

PACKAGE = Path(__file__).resolve().parents[1] / "as2rank"

#: The ``__all__`` of each former module, written out.
FORMER = {
    "as2rank.metrics": ["mean_average_precision", "mean_reciprocal_rank", "precision_at_k", "ndcg_at_k",
                        "ranking_report", "get_scorer", "RankingScorer", "paired_significance", "TIE_POLICIES"],
    "as2rank.triggering": ["answer_triggering", "precision_coverage_curve", "precision_at_coverage",
                           "precision_coverage_auc", "expected_calibration_error", "brier_score", "wilson_interval"],
    "as2rank.evaluation": ["METRICS", "compare", "evaluate", "per_question"],
}
NAMES = sorted({name for names in FORMER.values() for name in names})

#: Where each concern lives inside the package.
HOME = {
    "ranking": ["mean_average_precision", "mean_reciprocal_rank", "precision_at_k", "ndcg_at_k", "ranking_report"],
    "scorers": ["get_scorer", "RankingScorer"],
    "answering": FORMER["as2rank.triggering"],
    "comparison": ["METRICS", "compare", "evaluate", "per_question", "paired_significance"],
    "runs": ["TIE_POLICIES"],
}


def test_every_former_name_imports_from_the_package():
    assert sorted(as2rank.metrics.__all__) == NAMES
    for name in NAMES:
        exec(f"from as2rank.metrics import {name}", {})


@pytest.mark.parametrize("module", sorted(HOME))
def test_the_package_names_are_its_modules_objects(module):
    sub = importlib.import_module(f"as2rank.metrics.{module}")
    for name in HOME[module]:
        assert name in sub.__all__
        assert getattr(as2rank.metrics, name) is getattr(sub, name)


def test_the_former_modules_are_gone():
    # Files, not import specs: an editable install of another checkout would still resolve the old names.
    assert [name for name in ("metrics.py", "triggering.py", "evaluation.py") if (PACKAGE / name).exists()] == []
    assert Path(as2rank.metrics.__file__) == PACKAGE / "metrics" / "__init__.py"


def test_top_level_names_resolve_to_the_package():
    assert as2rank.get_scorer is as2rank.metrics.get_scorer
    assert as2rank.ranking_report is as2rank.metrics.ranking_report

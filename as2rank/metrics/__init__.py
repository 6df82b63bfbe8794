"""The measures: ranking measures, answering measures, comparison and significance, and scorers.

One module per concern, every public name importable from ``as2rank.metrics``:

* :mod:`~as2rank.metrics.ranking`: MAP, MRR, P@k and nDCG@k over questions, and :func:`ranking_report`, all of
  them from one sort;
* :mod:`~as2rank.metrics.answering`: measures of answering or abstaining over all questions (answer
  triggering, precision against coverage, calibration error, the Wilson interval);
* :mod:`~as2rank.metrics.comparison`: the paired significance test, and scoring and comparing runs on a test
  frame question by question (what ``as2rank bench`` and the benchmarks share);
* :mod:`~as2rank.metrics.scorers`: scorers for ``GridSearchCV(scoring=...)`` by name (``"map"``, ``"p@1"``,
  ...);
* :mod:`~as2rank.metrics.runs`: what they share, a run sorted inside each question
  (:class:`~as2rank.metrics.runs.RankedRun`) and per-question inputs aligned with its questions.

Every measure sorts the rows once, inside each question, by descending score, and then works on whole arrays
(``bincount``/``reduceat``), so evaluating thousands of questions costs a few array passes. NumPy only:
importable without torch.

Tie policies (``ties=``), for candidates of one question with equal scores:

* ``"pessimistic"`` (default): less relevant candidates are ranked first among ties, so a model cannot
  gain from ties; a constant scorer gets the worst score it could get.
* ``"optimistic"``: more relevant candidates first among ties (an upper bound).
* ``"stable"``: ties keep the original order (``position``, or the row order inside the group).
* ``"trec_eval"``: ties ordered by candidate id (``docno=``) in descending string order, exactly as
  trec_eval sorts a run (score descending, then ``strcmp`` of the docnos, larger first); with
  ``no_positive="zero"`` the per-question values equal trec_eval's (and pytrec_eval's, and so ir_measures'
  for these measures). Candidate ids must be unique within a question, as trec_eval requires.

Questions with no positive candidate (``no_positive=``): ``"skip"`` (default) leaves them out of the mean
(the "clean" protocol of the AS2 literature); ``"zero"`` counts them as 0. ``ranking_report(...,
unanswered="include")`` adds answer triggering over all questions; the other measures of answering or
abstaining are in :mod:`~as2rank.metrics.answering`.
"""

from .answering import (
    answer_triggering,
    brier_score,
    expected_calibration_error,
    precision_at_coverage,
    precision_coverage_auc,
    precision_coverage_curve,
    wilson_interval,
)
from .comparison import METRICS, compare, evaluate, paired_significance, per_question
from .ranking import mean_average_precision, mean_reciprocal_rank, ndcg_at_k, precision_at_k, ranking_report
from .runs import TIE_POLICIES
from .scorers import RankingScorer, get_scorer

__all__ = [
    # ranking measures
    "mean_average_precision",
    "mean_reciprocal_rank",
    "precision_at_k",
    "ndcg_at_k",
    "ranking_report",
    "TIE_POLICIES",
    # scorers
    "get_scorer",
    "RankingScorer",
    # answering measures
    "answer_triggering",
    "precision_coverage_curve",
    "precision_at_coverage",
    "precision_coverage_auc",
    "expected_calibration_error",
    "brier_score",
    "wilson_interval",
    # comparison and significance
    "paired_significance",
    "evaluate",
    "per_question",
    "compare",
    "METRICS",
]

"""Answer or abstain: calibrated candidate probabilities, a question-level probability that the top candidate
answers the question, and a threshold chosen by measurement (:class:`~as2rank.answer.ranker.CalibratedRanker`).
NumPy, SciPy and scikit-learn only: nothing here imports torch."""

from .ranker import CalibratedRanker

__all__ = ["CalibratedRanker"]

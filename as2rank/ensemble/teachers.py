"""Teachers of a distilled student: their scores turned into calibrated logits, as the students see them.

* :func:`teacher_logits`: the teachers' scores of the training data, Platt-scaled
  (:func:`~as2rank.ensemble.calibration.platt_scaling`), optionally cross-fitted.
* :func:`check_teachers` and :data:`CV_CONSTRAINTS`: the checks of a ``teachers`` list and of ``teacher_cv``;
  :func:`is_model`: whether a teacher (or an ensemble's member) is a ranker rather than scores.
* :func:`clone_sharing`: the clone of an estimator that shares (does not refit) the fitted models it was
  given (a student's teachers, an ensemble's rankers, a calibrated ranker's prefit estimator).

**Teachers** are fitted as2rank rankers of any family (a transformer of any backbone, ``Cosinet``, a lexical
``PointwiseRanker`` pipeline, ...), the name of a column of ``X`` holding precomputed scores (it travels with
the rows through cross-validation), or an array of precomputed scores (one per row of the ``X`` given to
``fit``). Only a student's ``fit`` reads them; a fitted student predicts without them, and clones of a
student share them (they are not refitted, as with :class:`sklearn.frozen.FrozenEstimator`).

**Calibration.** A ranker's score is not a logit on a common scale (an overlap count is not a probability;
a cross-encoder's logit and a Cosinet score differ in scale), while the distillation loss (Eq. 1 of the
CERBERUS paper, :class:`~as2rank.neural.losses.HeadDistillation`) compares softened probabilities.
Each teacher's scores are mapped to logits by Platt scaling fitted on the training data, ``a · score + b``
(:mod:`as2rank.ensemble.calibration`, the calibration every estimator shares): the map is monotone (a
teacher's ranking is kept) and puts every teacher on the scale of log-odds of relevance.

**Teachers scoring their own training data.** A teacher fitted on the student's training data scores it
better than it would score new data: a cross-encoder that memorised it separates positives from negatives
almost perfectly, so its soft targets carry little more than the labels. Two things address it. Platt's
smoothed targets keep the slope finite even when a teacher separates the data perfectly. And
``teacher_cv=k`` cross-fits: clones of each teacher are fitted on ``k − 1`` question folds (``GroupKFold``)
and score the held-out fold, each fold calibrated on its own, so every training row gets the score of a
teacher that never saw it (as ``StackingClassifier(cv=...)`` does); this costs ``k`` fits per teacher. With
``teacher_cv=None`` (the default, and the paper's practice) the fitted teachers score the training data
directly. The CERBERUS benchmark (linked from :class:`~as2rank.transformer.cerberus.Cerberus`) compares both.

NumPy, SciPy and scikit-learn only: importing this module does not import torch.
"""

from __future__ import annotations

from numbers import Integral

import numpy as np
from sklearn.base import BaseEstimator, clone
from sklearn.exceptions import NotFittedError
from sklearn.utils.validation import check_is_fitted

from ..data import check_ranking_data
from ..params import HasMethods, Interval, check_param
from .calibration import platt_scaling

__all__ = ["CV_CONSTRAINTS", "check_teachers", "clone_sharing", "is_model", "teacher_logits"]

#: Accepted values of ``cv`` (the distilled students' ``teacher_cv``): ``None``, a number of folds or a splitter.
CV_CONSTRAINTS = [None, Interval(Integral, 2, None), HasMethods("split", description="a group splitter")]


def is_model(teacher) -> bool:
    """Whether ``teacher`` is an estimator (``fit`` and ``predict``) rather than precomputed scores."""
    return hasattr(teacher, "fit") and hasattr(teacher, "predict")


def check_teachers(teachers) -> None:
    """Raise ``ValueError`` unless ``teachers`` is a non-empty list of rankers, column names and 1-D score
    arrays (whether a ranker is fitted is checked when it scores)."""
    if not isinstance(teachers, (list, tuple)) or not teachers:
        raise ValueError(
            f"teachers must be a non-empty list of fitted rankers, column names of X or score arrays, got {teachers!r}."
        )
    for j, teacher in enumerate(teachers):
        if isinstance(teacher, str) or is_model(teacher):
            continue
        try:
            ok = np.asarray(teacher, dtype=np.float64).ndim == 1
        except (TypeError, ValueError):
            ok = False
        if not ok:
            raise ValueError(
                f"teachers[{j}] must be a fitted ranker, the name of a column of X or a 1-D array of scores, "
                f"got {type(teacher).__name__}."
            )


def _given_scores(j, teacher, X) -> np.ndarray:
    """Precomputed scores of teacher ``j``: a column of ``X`` or an array aligned with its rows."""
    if isinstance(teacher, str):
        if teacher not in X.columns:
            raise ValueError(f"teachers[{j}] names the column {teacher!r}, which X does not have.")
        column = X[teacher]
        if not np.issubdtype(column.dtype, np.number):
            raise ValueError(f"teachers[{j}]: column {teacher!r} of X is not numeric.")
        return column.to_numpy(dtype=np.float64)
    scores = np.asarray(teacher, dtype=np.float64)
    if len(scores) != len(X):
        raise ValueError(
            f"teachers[{j}] has {len(scores)} scores for {len(X)} rows of X; precomputed scores need one per row "
            "(under cross-validation, put them in a column of X and pass its name)."
        )
    return scores


def _fitted_scores(j, teacher, X) -> np.ndarray:
    """Scores of ``X`` by the fitted ranker ``teacher`` (``teachers[j]``); ``NotFittedError`` if it is not fitted."""
    try:
        check_is_fitted(teacher)
    except NotFittedError as exc:
        raise NotFittedError(
            f"teachers[{j}] ({type(teacher).__name__}) is not fitted: fit it first, or set teacher_cv to fit "
            "clones of it on cross-validation folds."
        ) from exc
    return np.asarray(teacher.predict(X), dtype=np.float64)


def teacher_logits(teachers, X, y, groups=None, cv=None) -> np.ndarray:
    """Each teacher's scores of ``X`` as calibrated logits (Platt scaling, see the module docstring).

    Parameters
    ----------
    teachers : list
        Fitted rankers, names of columns of ``X`` holding precomputed scores, or arrays of one score per row.
    X : pandas.DataFrame
        Grouped-candidate frame.
    y : array-like of shape (n_rows,)
        Labels, for the calibration.
    groups : array-like of shape (n_rows,), default=None
        Question ids overriding ``X["qid"]`` (teachers then see them as ``qid``).
    cv : None, int or group splitter, default=None
        ``None``: the fitted teachers score ``X``. An integer ``k`` (``GroupKFold(k)``) or a splitter whose
        ``split(X, y, groups)`` keeps questions whole: clones of each ranker teacher are fitted on the other
        folds and score each fold (cross-fitting), each fold calibrated on its own. Precomputed scores are used
        as given either way.

    Returns
    -------
    ndarray of float64 of shape (n_rows, n_teachers)
    """
    from sklearn.model_selection import GroupKFold

    X, y, index = check_ranking_data(X, y, groups)
    check_teachers(teachers)
    check_param("cv", cv, CV_CONSTRAINTS)
    if groups is not None:
        X = X.assign(qid=np.asarray(groups))
    out = np.empty((len(X), len(teachers)))
    folds = None
    for j, teacher in enumerate(teachers):
        if not is_model(teacher):
            scores = _given_scores(j, teacher, X)
        elif cv is None:
            scores = _fitted_scores(j, teacher, X)
        else:
            if folds is None:
                splitter = GroupKFold(n_splits=int(cv)) if not hasattr(cv, "split") else cv
                folds = list(splitter.split(X, y, index.codes))
            for train, test in folds:
                fold_scores = np.asarray(clone(teacher).fit(X.iloc[train], y[train]).predict(X.iloc[test]), dtype=np.float64)
                a, b = platt_scaling(fold_scores, y[test])
                out[test, j] = a * fold_scores + b
            continue
        a, b = platt_scaling(scores, y)
        out[:, j] = a * scores + b
    return out


def clone_sharing(estimator, name):
    """A clone of ``estimator`` whose parameter ``name`` (fitted models that fit only reads) is shared with
    the original instead of being replaced by unfitted copies, as :class:`sklearn.frozen.FrozenEstimator`
    would have it; every other parameter is cloned as :func:`sklearn.base.clone` does."""
    # The default clone (scikit-learn's, metadata requests included), not the class's own, which calls this.
    new = BaseEstimator.__sklearn_clone__(estimator)
    return new.set_params(**{name: estimator.get_params(deep=False)[name]})

"""The face of persistence: :func:`~as2rank.persistence.save` and :func:`~as2rank.persistence.load`
(``as2rank.save``/``as2rank.load``), the estimators' ``save_pretrained``/``from_pretrained``
(:class:`~as2rank.persistence.PersistenceMixin`), and :func:`~as2rank.persistence.write_model`, the one way a
model directory is written. The package re-exports them: import them from :mod:`as2rank.persistence`. The file
format they write and read is :mod:`as2rank.persistence.codec`.

A directory is written whole (:func:`as2rank.files.atomic_directory`): built under a temporary name, its card
added, sealed (:func:`~as2rank.persistence.trust.seal`), then put in the place of the previous model in one
step, so that a reader or a killed writer leaves the old complete model or the new one; a directory that is
not a model is never written into unless asked. Loading decides from the path what it is before reading it
(:func:`~as2rank.persistence.check_model_path`): a sealed model directory, or a pickle file the caller opted in
to; whatever a third-party loader raises on a damaged directory is one ``ValueError`` naming it
(``checks.one_line_errors``).
"""

from __future__ import annotations

from pathlib import Path

from ..files import atomic_directory
from .card import write_card
from .checks import one_line_errors
from .codec import (META_FILE, check_class, is_model_directory, open_model, read_estimator, set_nested_params,
                    write_estimator)
from .registry import LAYOUTS, class_name, resolve_class
from .trust import check_model_path, kept_entries, read_pickle, seal

__all__ = ["PersistenceMixin", "load", "save", "write_model"]


class PersistenceMixin:
    """``save_pretrained``/``from_pretrained`` of the estimators that the generic writer saves.

    The writer saves the public fitted attributes (``name_``) of the estimator's state, ``__getstate__()``
    (what pickling saves), and the loader hands them to ``__setstate__``: a class whose state holds a torch
    module gives its weights there as a dict of CPU tensors and rebuilds the module in ``__setstate__``.
    """

    def save_pretrained(self, path, *, card=None, overwrite=False) -> None:
        """Write the fitted estimator to a pickle-free directory (see :mod:`as2rank.persistence`).

        Parameters
        ----------
        path, card, overwrite
            As in :func:`~as2rank.persistence.save`.
        """
        save(self, path, card=card, overwrite=overwrite)

    @classmethod
    def from_pretrained(cls, path, **params):
        """Load an estimator written by :meth:`save_pretrained` (or :func:`as2rank.persistence.save`).

        Parameters
        ----------
        path : str or os.PathLike
        **params
            Parameters overriding the saved ones (e.g. ``device="cpu"``); a name that the class does not
            have is set on every nested estimator that has it.

        Returns
        -------
        estimator
        """
        path = Path(path)
        meta = open_model(path)
        check_class(meta, cls, path)
        return _guarded(path, lambda: read_estimator(cls, path, meta, params))


def save(estimator, path, *, card=None, overwrite=False) -> None:
    """Write a fitted estimator or pipeline to a pickle-free model directory, atomically.

    Supported: every as2rank estimator, and pipelines and allow-listed scikit-learn estimators
    (:data:`~as2rank.persistence.SKLEARN_CLASSES`) made of them. Read it back with :func:`load`.

    Parameters
    ----------
    estimator : estimator
        Fitted (estimators that need no fit, such as the rule rankers, may be saved as they are).
    path : str or os.PathLike
        The directory: new, empty, or an as2rank model directory, which the new model replaces whole (files
        of the user's beside the model are kept). Its folder must exist.
    card : as2rank.persistence.card.ModelCardData, optional
        Training data and metrics for the model card, ``README.md`` (:mod:`as2rank.persistence.card`).
    overwrite : bool, default=False
        Also write into a non-empty directory that is not an as2rank model (the files there are kept; a
        file of the user's with the name of a model's file, such as a ``README.md``, is refused, never
        replaced). Without it such a directory is refused.

    Raises
    ------
    ValueError
        If the estimator, or a value it holds, cannot be saved without pickling (the message names it), or
        ``path`` may not be written (a file, a missing folder, another directory without ``overwrite``).
    sklearn.exceptions.NotFittedError
        If the estimator is not fitted.
    """
    from sklearn.utils.validation import check_is_fitted

    if class_name(estimator) in LAYOUTS:
        # The main process writes under a distributed launcher.
        estimator.save_pretrained(path, card=card, overwrite=overwrite)
        return
    check_is_fitted(estimator)
    write_model(estimator, path, lambda folder: write_estimator(estimator, folder), card=card, overwrite=overwrite)


def write_model(estimator, path, write, *, card=None, overwrite=False) -> None:
    """The one way a model directory is written: ``write(folder)`` fills a temporary directory, the card is
    added, the directory is sealed (:func:`~as2rank.persistence.trust.seal`) and put in the place of ``path``
    (:func:`as2rank.files.atomic_directory`, which says what may be replaced)."""
    with atomic_directory(path, is_model=is_model_directory, overwrite=overwrite, keep=kept_entries) as folder:
        write(folder)
        write_card(estimator, folder, card)
        seal(folder)


def load(path, *, allow_pickle=False, **params):
    """Load any model directory written by ``save_pretrained`` or :func:`save`, whatever its class; or, when the
    caller opts in, a pickle file.

    What ``path`` is decides how it is loaded, from its own entry and before any byte of it is read
    (:func:`~as2rank.persistence.trust.check_model_path`): a directory is loaded pickle-free, after the checks of
    :mod:`~as2rank.persistence.trust` and ``as2rank.persistence.checks``; a file named ``*.joblib``,
    ``*.pkl`` or ``*.pickle`` is unpickled (:func:`joblib.load`) only with ``allow_pickle=True``; a symbolic
    link, or any other file, is refused. The command line loads every model through this function (its
    ``--allow-pickle`` flag is ``allow_pickle``).

    Parameters
    ----------
    path : str or os.PathLike
    allow_pickle : bool, default=False
        Accept a pickle file. Unpickling runs whatever code the file holds: pass True only for a file from a
        source you trust.
    **params
        Parameters overriding the saved ones (e.g. ``device="cpu"``); a name that the saved class does not
        have is set on every nested estimator that has it (the steps of a ``SequentialRanker``, ...).

    Returns
    -------
    estimator

    Raises
    ------
    FileNotFoundError
        If nothing is at ``path``.
    ValueError
        One line: ``path`` is a link, a file that is not an opted-in pickle, a directory that is not a sealed
        model directory, is damaged, names a class outside the allow-list, holds a file another library would
        follow elsewhere, or has a newer format version.

    Examples
    --------
    >>> import as2rank
    >>> model = as2rank.load("wo-rr")                  # doctest: +SKIP
    """
    path = Path(path)
    if check_model_path(path, allow_pickle=allow_pickle) == "pickle":
        return _with_params(read_pickle(path), params)
    meta = open_model(path)
    cls = resolve_class(meta["class"], path / META_FILE)
    return _guarded(path, lambda: read_estimator(cls, path, meta, params))


def _with_params(est, params: dict):
    """An unpickled estimator with ``params`` set as :func:`load` sets them (its own, then its nested ones')."""
    if params:
        if not hasattr(est, "get_params"):
            raise ValueError(f"The pickled {type(est).__name__} takes no parameters.")
        own = est.get_params(deep=False)
        est.set_params(**{k: v for k, v in params.items() if k in own})
        set_nested_params(est, {k: v for k, v in params.items() if k not in own})
    return est


def _guarded(path, load_it):
    """``load_it()``, with what a damaged directory raises deep inside a third-party loader as one ValueError
    naming the directory (:func:`~as2rank.persistence.checks.one_line_errors`)."""
    return one_line_errors(path, load_it)

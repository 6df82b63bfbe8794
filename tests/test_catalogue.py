"""The catalogue of named models: ``as2rank.get_ranker(name, **params)`` and ``as2rank.get_ranker_names()``,
the one way from a name to a fresh unfitted estimator, which the command line, RankerSelector and the benchmark
suite read."""

import subprocess
import sys

import pytest
from sklearn.base import clone
from sklearn.linear_model import LogisticRegression
from sklearn.pipeline import make_pipeline

import as2rank
from as2rank import (CascadeTransformer, Cerberus, ContextConcat, ContextEnsemble, ContextExtractor, ContextMWA,
                     Cosinet, LexicalFeatures, OverlapRankRanker, PointwiseRanker, ReciprocalRankRanker,
                     TransformerRanker, WordOverlapRanker, ZeroShotRanker)
from as2rank.app.suite import select
from as2rank.model_selection import ENTRIES, get_entry, get_ranker, get_ranker_names


def _lexical_lr():
    return make_pipeline(LexicalFeatures(), PointwiseRanker(LogisticRegression(C=1.0, max_iter=1000)))


#: What each name built before the catalogue left the benchmark suite (``ENTRIES[i].make(seed)``), written out:
#: name -> the estimator for a ``random_state``, in the catalogue's order.
EXPECTED = {
    "RR": lambda seed: ReciprocalRankRanker(),
    "WO": lambda seed: WordOverlapRanker(),
    "WO+RR": lambda seed: OverlapRankRanker(),
    "Lexical+LR": lambda seed: _lexical_lr(),
    "Cosinet+BiRNN": lambda seed: Cosinet(random_state=seed),
    "Zero-shot": lambda seed: ZeroShotRanker(),
    "Cosinet": lambda seed: Cosinet(rnn=None, random_state=seed),
    "Cosinet+BiRNN (GloVe)": lambda seed: Cosinet(embeddings="glove-6b-50d", random_state=seed),
    "Transformer": lambda seed: TransformerRanker(random_state=seed),
    "Transformer (MPNet)": lambda seed: TransformerRanker(model="mpnet-base", random_state=seed),
    "Cascade a=0": lambda seed: CascadeTransformer(alpha=0.0, random_state=seed),
    "Cascade a=0.3": lambda seed: CascadeTransformer(alpha=0.3, random_state=seed),
    "Cerberus": lambda seed: Cerberus(teachers=[Cosinet(random_state=seed), _lexical_lr()], teacher_cv=3,
                                      random_state=seed),
    "Context Concat": lambda seed: make_pipeline(ContextExtractor(global_method="ngram"),
                                                 ContextConcat(random_state=seed)),
    "Context MWA": lambda seed: make_pipeline(ContextExtractor(global_method="ngram"), ContextMWA(random_state=seed)),
    "Context Ensemble": lambda seed: make_pipeline(ContextExtractor(global_method="cosine"),
                                                   ContextEnsemble(random_state=seed)),
}

#: The names whose estimator has something random: ``random_state`` shows in their parameters.
SEEDED = {"Cosinet+BiRNN", "Cosinet", "Cosinet+BiRNN (GloVe)", "Transformer", "Transformer (MPNet)", "Cascade a=0",
          "Cascade a=0.3", "Cerberus"}
#: Pipelines whose ranker step takes the seed, by the step's parameter.
SEEDED_STEPS = {"Context Concat": "contextconcat__random_state", "Context MWA": "contextmwa__random_state",
                "Context Ensemble": "contextensemble__random_state"}


def _same(a, b) -> bool:
    """Whether ``a`` and ``b`` are the same construction: same classes, same parameters, nested estimators (a
    pipeline's steps, a Cerberus's teachers) alike."""
    if hasattr(a, "get_params"):
        pa, pb = a.get_params(deep=False), b.get_params(deep=False)
        return type(a) is type(b) and pa.keys() == pb.keys() and all(_same(pa[k], pb[k]) for k in pa)
    if isinstance(a, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return type(a) is type(b) and a == b


def test_names_are_the_catalogue_in_order():
    assert get_ranker_names() == list(EXPECTED) == [e.name for e in ENTRIES]
    assert len({name.lower() for name in get_ranker_names()}) == len(EXPECTED)
    assert as2rank.get_ranker is get_ranker and as2rank.get_ranker_names is get_ranker_names


@pytest.mark.parametrize("name", list(EXPECTED))
@pytest.mark.parametrize("seed", [0, 3, None])
def test_every_name_builds_what_the_suite_built(name, seed):
    built = get_ranker(name, random_state=seed)
    assert _same(built, EXPECTED[name](seed)), name
    assert not any(key.endswith("_") and not key.startswith("_") for key in vars(built)), "fitted state"
    assert _same(clone(built), built)
    assert get_ranker(name, random_state=seed) is not built  # a fresh one each time


def test_without_random_state_the_estimators_keep_their_default():
    for name in get_ranker_names():
        assert _same(get_ranker(name), EXPECTED[name](None)), name


def test_random_state_goes_where_the_model_takes_one():
    for name in SEEDED:
        assert get_ranker(name, random_state=3).get_params()["random_state"] == 3, name
    for name, key in SEEDED_STEPS.items():
        assert get_ranker(name, random_state=3).get_params()[key] == 3, name
    assert [t.random_state for t in get_ranker("Cerberus", random_state=3).teachers[:1]] == [3]
    # A model with nothing random takes the seed and ignores it, so that one seed serves every name.
    assert _same(get_ranker("WO", random_state=3), WordOverlapRanker())


def test_names_are_case_insensitive():
    assert type(get_ranker("wo+rr")) is OverlapRankRanker
    assert _same(get_ranker("TRANSFORMER (mpnet)", random_state=1), EXPECTED["Transformer (MPNet)"](1))
    assert get_entry("cascade A=0.3").name == "Cascade a=0.3"


def test_unknown_name_lists_the_known_ones():
    with pytest.raises(ValueError, match=r"Unknown model 'BM25'.*RR, WO, WO\+RR, Lexical\+LR") as info:
        get_ranker("BM25")
    assert all(name in str(info.value) for name in get_ranker_names())
    with pytest.raises(TypeError, match="model name is a str"):
        get_ranker(None)


def test_parameters_pass_through_and_unknown_ones_are_refused():
    est = get_ranker("Transformer (MPNet)", random_state=2, epochs=2, learning_rate=1e-5)
    assert (est.model, est.epochs, est.learning_rate, est.random_state) == ("mpnet-base", 2, 1e-5, 2)
    pipe = get_ranker("Lexical+LR", pointwiseranker__estimator__C=0.5)
    assert pipe.get_params()["pointwiseranker__estimator__C"] == 0.5
    assert _same(get_ranker("Lexical+LR"), _lexical_lr())  # the next call is fresh, not the one set above
    with pytest.raises(ValueError, match=r"WO\+RR \(OverlapRankRanker\) takes no parameter 'epochs'"):
        get_ranker("wo+rr", epochs=2)
    with pytest.raises(ValueError, match=r"takes no parameter 'C'.*pointwiseranker__estimator__C"):
        get_ranker("Lexical+LR", C=0.5)


def test_the_suite_reads_the_catalogue():
    assert select(("all",)) == ENTRIES
    assert [e.name for e in select(("default",), ["wo+rr", "RR"])] == ["WO+RR", "RR"]
    with pytest.raises(ValueError, match="Unknown model 'nope'"):
        select(("default",), ["RR", "nope"])


def test_building_every_model_imports_neither_torch_nor_transformers():
    code = ("import sys, as2rank\nfor name in as2rank.get_ranker_names(): as2rank.get_ranker(name, random_state=0)\n"
            "import as2rank.model_selection\n"
            "print(sorted({m.split('.')[0] for m in sys.modules} & {'torch', 'transformers'}))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"

"""Pickle-free model directories (as2rank.persistence): every estimator round trips exactly through
save_pretrained / as2rank.load, nothing in a directory is a pickle, and the CLI loads them and refuses damaged
model files with one line. Offline, tiny models."""

import json
import pickle
import subprocess
import sys
from pathlib import Path

import joblib
import numpy as np
import pandas as pd
import pytest
from sklearn.base import clone
from sklearn.ensemble import RandomForestClassifier
from sklearn.linear_model import LinearRegression, LogisticRegression, RidgeClassifier, SGDClassifier
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler
from sklearn.svm import LinearSVC

import as2rank
from as2rank.lexical.baselines import (
    LexicalFeatures,
    OverlapRankRanker,
    PointwiseRanker,
    ReciprocalRankRanker,
    WordOverlapRanker,
)
from as2rank.app.cli import main
from as2rank.persistence import FORMAT_VERSION
from tests.scale_helpers import asnq_rows, write_asnq
from tests.utils import reseal

ROOT = Path(__file__).resolve().parents[1]
WORDS = "who wrote hamlet capital france paris tower built river city king queen year first largest".split()


def assert_pickle_free(path):
    """Every file of a model directory is JSON, safetensors (a JSON header, then raw tensor bytes) or a
    tokenizer's text file: nothing is a pickle or a torch archive."""
    files = [f for f in Path(path).rglob("*") if f.is_file()]
    assert files
    for f in files:
        assert f.suffix in {".json", ".safetensors", ".txt", ".md"}, f
        data = f.read_bytes()
        if f.suffix == ".safetensors":
            n = int.from_bytes(data[:8], "little")
            header = json.loads(data[8 : 8 + n])
            assert all(set(v) >= {"dtype", "shape", "data_offsets"} for k, v in header.items() if k != "__metadata__"), f
        elif f.suffix == ".json":
            json.loads(data)
        else:
            data.decode("utf-8")


def round_trip(model, path, X, cls=None):
    """Save, load with as2rank.load (and the class's from_pretrained), check exactly equal scores."""
    as2rank.save(model, path)
    assert_pickle_free(path)
    loaded = as2rank.load(path)
    assert type(loaded) is type(model)
    np.testing.assert_array_equal(loaded.predict(X), model.predict(X))
    if cls is not None:
        again = cls.from_pretrained(path)
        np.testing.assert_array_equal(again.predict(X), model.predict(X))
    return loaded


@pytest.fixture
def lexical_pipeline(toy):
    X, y = toy
    return make_pipeline(LexicalFeatures(), PointwiseRanker(LogisticRegression())).fit(X, y)


# ----------------------------------------------------------------------------------------------- lexical
@pytest.mark.parametrize(
    "model", [WordOverlapRanker(), ReciprocalRankRanker(), OverlapRankRanker(lowercase=False, drop_punct=True)]
)
def test_rule_rankers_round_trip(model, toy, tmp_path):
    X, y = toy
    model.fit(X, y)
    model.save_pretrained(tmp_path / "m")
    loaded = round_trip(model, tmp_path / "m", X, type(model))
    assert loaded.get_params() == model.get_params()
    assert json.loads((tmp_path / "m" / "as2rank.json").read_text())["format_version"] == FORMAT_VERSION


def test_lexical_features_keep_their_idf(toy, tmp_path):
    X, y = toy
    features = LexicalFeatures(drop_punct=False).fit(X)
    features.save_pretrained(tmp_path / "f")
    assert_pickle_free(tmp_path / "f")
    loaded = LexicalFeatures.from_pretrained(tmp_path / "f")
    assert loaded.vocabulary_ == features.vocabulary_ and loaded.unseen_idf_ == features.unseen_idf_
    # A directory written while the attribute was private (``_unseen_idf``) reads the same.
    meta_file = tmp_path / "f" / "as2rank.json"
    meta = json.loads(meta_file.read_text())
    meta["fitted"]["_unseen_idf"] = meta["fitted"].pop("unseen_idf_")
    meta_file.write_text(json.dumps(meta))
    reseal(tmp_path / "f")
    assert LexicalFeatures.from_pretrained(tmp_path / "f").unseen_idf_ == features.unseen_idf_
    unseen = X.assign(question=X["question"] + " zebra", candidate=X["candidate"] + " zebra")
    for frame in (X, unseen):  # a token unseen in fit gets the saved largest IDF
        pd.testing.assert_frame_equal(loaded.transform(frame), features.transform(frame))


@pytest.mark.parametrize(
    "classifier",
    [
        LogisticRegression(C=0.5),
        LinearSVC(),
        SGDClassifier(loss="log_loss", random_state=0),
        RidgeClassifier(),
        LinearRegression(),
        make_pipeline(StandardScaler(), LogisticRegression(class_weight={0: 1, 1: 2})),
    ],
    ids=lambda c: type(c).__name__,
)
def test_pointwise_ranker_with_scikit_learn_models(classifier, toy, tmp_path):
    X, y = toy
    F = LexicalFeatures().fit_transform(X)
    ranker = PointwiseRanker(classifier, features=["overlap", "idf_overlap", "reciprocal_rank"]).fit(F, y)
    loaded = round_trip(ranker, tmp_path / "p", F, PointwiseRanker)
    assert repr(loaded.estimator) == repr(ranker.estimator)  # the unfitted template's parameters
    if isinstance(classifier, RidgeClassifier):
        F = F[ranker.features_].to_numpy()
        np.testing.assert_array_equal(loaded.estimator_.predict(F), ranker.estimator_.predict(F))


@pytest.mark.slow  # a process that loads spaCy
def test_lexical_pipeline_round_trip_without_torch(lexical_pipeline, toy, tmp_path):
    X, _ = toy
    round_trip(lexical_pipeline, tmp_path / "pipe", X)
    X.to_csv(tmp_path / "x.csv", index=False)
    code = (
        "import sys, as2rank, pandas as pd; "
        f"m = as2rank.load({str(tmp_path / 'pipe')!r}); loaded_torch = 'torch' in sys.modules; "
        f"print(m.predict(pd.read_csv({str(tmp_path / 'x.csv')!r})).shape, loaded_torch)"
    )  # (predicting tokenizes with spaCy, which may import torch itself)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True).stdout
    assert out.split() == [f"({len(X)},)", "False"]


def test_a_classifier_with_unsaveable_state_is_refused(toy, tmp_path):
    X, y = toy
    F = LexicalFeatures().fit_transform(X)
    ranker = PointwiseRanker(RandomForestClassifier(n_estimators=2, random_state=0)).fit(F, y)
    with pytest.raises(ValueError, match="RandomForestClassifier cannot be saved pickle-free.*joblib"):
        ranker.save_pretrained(tmp_path / "rf")


def test_unfitted_models_are_not_saved(tmp_path):
    from sklearn.exceptions import NotFittedError

    with pytest.raises(NotFittedError):
        PointwiseRanker(LogisticRegression()).save_pretrained(tmp_path / "p")


# ----------------------------------------------------------------------------------------------- format
def test_newer_format_version_is_refused(toy, tmp_path, capsys):
    X, y = toy
    WordOverlapRanker().save_pretrained(tmp_path / "m")
    meta_file = tmp_path / "m" / "as2rank.json"
    meta = json.loads(meta_file.read_text())
    meta_file.write_text(json.dumps({**meta, "format_version": FORMAT_VERSION + 1}))
    with pytest.raises(ValueError, match=f"format version {FORMAT_VERSION + 1}.*format version {FORMAT_VERSION} at most"):
        as2rank.load(tmp_path / "m")
    assert main(["predict", "--model", str(tmp_path / "m"), "--input", "x.tsv", "--output", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "upgrade as2rank" in err and str(meta_file) in err


@pytest.mark.parametrize(
    "edit, match",
    [
        (lambda meta: {**meta, "class": "os.system"}, "names the class 'os.system'.*refusing"),
        (lambda meta: {**meta, "class": "get_scorer"}, "names the class 'get_scorer'.*refusing"),
        (lambda meta: {"params": {}}, "lacks a 'class' name"),
        (lambda meta: {**meta, "class": "WordOverlapRanker", "params": {"nope": 1}}, "does not describe a WordOverlapRanker"),
    ],
)
def test_a_damaged_as2rank_json_gives_a_clear_error(edit, match, tmp_path):
    WordOverlapRanker().save_pretrained(tmp_path / "m")
    meta_file = tmp_path / "m" / "as2rank.json"
    meta_file.write_text(json.dumps(edit(json.loads(meta_file.read_text()))))
    with pytest.raises(ValueError, match="was changed after the model was saved|lacks a 'class'"):
        as2rank.load(tmp_path / "m")
    reseal(tmp_path / "m")  # as someone who rewrote the digests too: the rules below the seal still hold
    with pytest.raises(ValueError, match=match):
        as2rank.load(tmp_path / "m")


def test_nested_paths_stay_inside_the_directory(lexical_pipeline, tmp_path):
    as2rank.save(lexical_pipeline, tmp_path / "m")
    meta_file = tmp_path / "m" / "as2rank.json"
    meta_file.write_text(meta_file.read_text().replace('"params.steps.0.1"', '"../elsewhere"'))
    reseal(tmp_path / "m")
    with pytest.raises(ValueError, match="not a plain name"):
        as2rank.load(tmp_path / "m")


def test_missing_or_garbled_as2rank_json(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="as2rank.json is missing"):
        as2rank.load(tmp_path / "empty")
    (tmp_path / "empty" / "as2rank.json").write_text("{not json")
    with pytest.raises(ValueError, match="as2rank.json is not valid JSON"):
        as2rank.load(tmp_path / "empty")
    with pytest.raises(ValueError, match="holds a WordOverlapRanker, not a PointwiseRanker"):
        WordOverlapRanker().save_pretrained(tmp_path / "wo")
        PointwiseRanker.from_pretrained(tmp_path / "wo")


# ----------------------------------------------------------------------------------------------- CLI
@pytest.fixture
def input_files(tmp_path):
    from as2rank.datasets import load_asnq

    tsv = write_asnq(tmp_path / "in.tsv", asnq_rows(WORDS, 12, seed=1))
    X, _ = load_asnq(tsv)
    X.to_parquet(tmp_path / "in.parquet")
    return tsv, tmp_path / "in.parquet", X


@pytest.mark.parametrize("kind", ["tsv", "parquet"])
def test_cli_predict_scores_a_file_from_a_model_directory(kind, input_files, lexical_pipeline, tmp_path, capsys):
    tsv, parquet, X = input_files
    as2rank.save(lexical_pipeline, tmp_path / "model")
    out = tmp_path / "scores"
    source = tsv if kind == "tsv" else parquet
    assert main(["predict", "--model", str(tmp_path / "model"), "--input", str(source), "--output", str(out), "--quiet"]) == 0
    scores = pd.read_parquet(out).sort_values("row")
    # (Chunks may differ from one in-memory call in the last bit of a float.)
    np.testing.assert_allclose(scores["score"], lexical_pipeline.predict(X), rtol=0, atol=1e-12)


def test_cli_predict_does_not_resume_with_other_weights_in_the_same_directory(input_files, tmp_path, capsys):
    # The resume check reads the model's bytes: weights replaced in place (as2rank.json untouched, so its
    # name and modification time stay the same) are another model.
    import shutil

    tsv, _, X = input_files
    y = np.zeros(len(X))
    y[::3] = 1
    model_dir, other_dir, out = tmp_path / "model", tmp_path / "other", tmp_path / "scores"
    pipe = make_pipeline(LexicalFeatures(), PointwiseRanker(LogisticRegression()))
    as2rank.save(clone(pipe).fit(X, y), model_dir)
    as2rank.save(clone(pipe).fit(X, 1 - y), other_dir)
    args = ["predict", "--model", str(model_dir), "--input", str(tsv), "--output", str(out), "--quiet"]
    assert main(args) == 0
    capsys.readouterr()
    for weights in other_dir.rglob("*.safetensors"):
        shutil.copy(weights, model_dir / weights.relative_to(other_dir))
    assert main(args) == 2
    assert "is not the file that was saved" in capsys.readouterr().err  # the seal refuses the mix
    reseal(model_dir)  # a model directory that really holds other weights now
    assert main(args) == 2
    assert "different model" in capsys.readouterr().err


def _garbage(tmp_path, kind):
    path = tmp_path / f"model-{kind}.joblib"
    if kind == "random bytes":
        path.write_bytes(np.random.default_rng(0).bytes(512))
    elif kind == "truncated joblib":
        joblib.dump(make_pipeline(LexicalFeatures(), PointwiseRanker(LogisticRegression())), path)
        path.write_bytes(path.read_bytes()[:100])
    elif kind == "pickled dict":
        path.write_bytes(pickle.dumps({"coef": [1, 2]}))
    elif kind == "text file":
        path.write_text("this is not a model\nat all\n")
    elif kind == "empty file":
        path.write_bytes(b"")
    elif kind == "unfitted model":
        joblib.dump(PointwiseRanker(LogisticRegression()), path)
    elif kind == "directory without as2rank.json":
        path = tmp_path / "model-dir"
        path.mkdir()
    elif kind == "directory with garbled as2rank.json":
        path = tmp_path / "model-dir"
        path.mkdir()
        (path / "as2rank.json").write_bytes(b"\x00\xff{")
    elif kind == "directory with damaged weights":
        path = tmp_path / "model-dir"
        LexicalFeatures().fit(pd.DataFrame({"qid": [0], "question": ["a b"], "candidate": ["b c"]})).save_pretrained(path)
        (path / "arrays.safetensors").write_bytes(b"garbage")
    return path


GARBAGE = ["random bytes", "truncated joblib", "pickled dict", "text file", "empty file", "unfitted model",
           "directory without as2rank.json", "directory with garbled as2rank.json", "directory with damaged weights"]


@pytest.mark.parametrize("kind", GARBAGE)
def test_cli_refuses_a_damaged_model_file_with_one_line(kind, input_files, tmp_path, capsys):
    tsv, _, _ = input_files
    path = _garbage(tmp_path, kind)
    capsys.readouterr()
    assert main(["predict", "--model", str(path), "--allow-pickle", "--input", str(tsv), "--output", str(tmp_path / "o"),
                 "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("as2rank: error: ") and err.count("\n") == 1 and str(path) in err, err
    assert main(["evaluate", "--model", str(path), "--allow-pickle"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("as2rank: error: ") and err.count("\n") == 1 and str(path) in err, err
    if path.is_file():
        assert "is not a fitted as2rank model" in err and "expected a save_pretrained directory or a joblib" in err


def test_cli_evaluate_saves_and_loads_a_model_directory(tmp_path, capsys):
    assert main(["evaluate", "--model", "Lexical+LR", "--save", str(tmp_path / "lexical"), "--ties", "all"]) == 0
    first = capsys.readouterr().out
    assert_pickle_free(tmp_path / "lexical")
    assert main(["evaluate", "--model", str(tmp_path / "lexical"), "--ties", "all"]) == 0
    assert capsys.readouterr().out == first


def test_cli_help_warns_about_pickles(capsys):
    with pytest.raises(SystemExit):
        main(["predict", "--help"])
    assert "trusted source" in " ".join(capsys.readouterr().out.split())


# ----------------------------------------------------------------------------------------------- neural
torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from as2rank.pruning.sequential import SequentialRanker  # noqa: E402
from as2rank.transformer.cascade import CascadeTransformer  # noqa: E402
from as2rank.ensemble.linear import LinearEnsemble  # noqa: E402
from as2rank.transformer.cerberus import Cerberus, DistilledRanker  # noqa: E402
from as2rank.transformer.context.rankers import ContextConcat, ContextEnsemble, ContextExtractor, ContextMWA  # noqa: E402
from as2rank.cosinet.estimator import Cosinet  # noqa: E402
from as2rank.transformer.ranker import TransformerRanker  # noqa: E402
from tests import test_context, test_cosinet  # noqa: E402
from tests.test_cosinet import kv  # noqa: E402,F401
from tests.test_transformer import small, synthetic, tokenizer  # noqa: E402,F401


pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def data():
    X, y = synthetic(n_questions=8)
    return X.assign(teacher_score=np.random.default_rng(0).normal(size=len(X)) + 2 * y), y


def test_cosinet_round_trip(kv, tmp_path):
    X, y = test_cosinet.synthetic(8)
    model = test_cosinet.tiny(kv, epochs=1).fit(X, y)
    loaded = round_trip(model, tmp_path / "c", X, Cosinet)
    assert (tmp_path / "c" / "fitted.module_.safetensors").is_file()
    assert list(loaded.vocabulary_) == list(model.vocabulary_) and loaded.word_vectors_.dtype == np.float32
    # In-memory word vectors are saved as those of the fitted vocabulary, as pickling does.
    assert list(loaded.embeddings.index_to_key) == list(model.vocabulary_)
    on_cpu = Cosinet.from_pretrained(tmp_path / "c", device="cpu")
    assert on_cpu.device == "cpu" and next(on_cpu.module_.parameters()).device.type == "cpu"
    np.testing.assert_array_equal(on_cpu.predict(X), model.predict(X))


@pytest.mark.parametrize(
    "cls, params",
    [
        (TransformerRanker, {"pooling": "mean"}),
        (CascadeTransformer, {"alpha": 0.3}),
        (DistilledRanker, {"teachers": ["teacher_score", WordOverlapRanker()], "multi_teacher": "round_robin"}),
        (Cerberus, {"teachers": ["teacher_score", ReciprocalRankRanker()], "body_layers": 4, "head_layers": 1}),
    ],
    ids=lambda v: v.__name__ if isinstance(v, type) else "",
)
def test_transformer_family_round_trip(cls, params, data, tokenizer, tmp_path):
    X, y = data
    model = small(cls, "bert", tokenizer, **params).fit(X, y)
    model.save_pretrained(tmp_path / "t")
    meta = json.loads((tmp_path / "t" / "as2rank.json").read_text())
    assert meta["format_version"] == FORMAT_VERSION and meta["class"] == cls.__name__
    loaded = round_trip(model, tmp_path / "t", X, cls)
    assert loaded.get_params()["model"] == str(tmp_path / "t" / "encoder")
    assert cls.from_pretrained(tmp_path / "t", device="cpu").device == "cpu"


def test_unversioned_transformer_directories_load_once_sealed(data, tokenizer, tmp_path):
    """A directory written before format versions (and seals) is refused as it is, since nothing tells its files
    from edited ones; sealed by its owner, it loads and scores as before."""
    from as2rank.persistence.trust import seal

    X, y = data
    model = small(TransformerRanker, "bert", tokenizer, num_layers=2).fit(X, y)
    model.save_pretrained(tmp_path / "t")
    meta_file = tmp_path / "t" / "as2rank.json"
    meta = json.loads(meta_file.read_text())
    del meta["format_version"], meta["as2rank_version"], meta["files"], meta["sha256"]
    meta_file.write_text(json.dumps(meta))  # as written before format versions (and seals)
    with pytest.raises(ValueError, match="has no seal.*as2rank.persistence.trust.seal"):
        as2rank.load(tmp_path / "t")
    seal(tmp_path / "t")
    np.testing.assert_array_equal(as2rank.load(tmp_path / "t").predict(X), model.predict(X))


def test_sequential_ranker_saves_its_steps(data, tokenizer, tmp_path):
    X, y = data
    model = SequentialRanker([OverlapRankRanker(), small(TransformerRanker, "bert", tokenizer, num_layers=2)], keep=0.5)
    model.fit(X, y)
    loaded = round_trip(model, tmp_path / "s", X, SequentialRanker)
    # The unfitted template steps keep their parameters, a config and a tokenizer included (pickle-free).
    template = loaded.steps[1]
    assert template.get_params()["model"].to_dict() == model.steps[1].get_params()["model"].to_dict()
    assert template.tokenizer("who wrote hamlet")["input_ids"] == tokenizer("who wrote hamlet")["input_ids"]
    np.testing.assert_array_equal(clone(loaded).fit(X, y).predict(X), clone(model).fit(X, y).predict(X))
    # A parameter the SequentialRanker lacks goes to the steps that have it.
    assert as2rank.load(tmp_path / "s", device="cpu", n_threads=1).steps_[1].n_threads == 1
    with pytest.raises(ValueError, match="no parameter nope"):
        as2rank.load(tmp_path / "s", nope=1)


def test_linear_ensemble_saves_its_rankers(data, lexical_pipeline, tokenizer, tmp_path):
    X, y = data
    ranker = small(TransformerRanker, "bert", tokenizer, num_layers=2).fit(X, y)
    model = LinearEnsemble([WordOverlapRanker(), ranker], resolution=4).fit(X, y)
    loaded = round_trip(model, tmp_path / "e", X, LinearEnsemble)
    np.testing.assert_array_equal(loaded.weights_, model.weights_)
    assert isinstance(loaded.rankers[1], TransformerRanker)


def test_context_models_round_trip(tokenizer, tmp_path):
    X, y = test_context.synthetic(n_questions=6)
    pipe = make_pipeline(ContextExtractor(max_global_sentences=2), test_context.small(ContextConcat, tokenizer))
    round_trip(pipe.fit(X, y), tmp_path / "concat", X)
    extractor = ContextExtractor(max_global_sentences=2).fit(X)
    extractor.save_pretrained(tmp_path / "extractor")
    loaded = ContextExtractor.from_pretrained(tmp_path / "extractor")
    pd.testing.assert_frame_equal(loaded.transform(X), extractor.transform(X))
    X = extractor.transform(X)
    for cls in (ContextMWA, ContextEnsemble):
        round_trip(test_context.small(cls, tokenizer).fit(X, y), tmp_path / cls.__name__, X, cls)

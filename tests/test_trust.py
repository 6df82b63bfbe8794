"""A model directory from anyone (as2rank.persistence.trust, .schema): loading and predicting run no code and
read no file outside the directory, through as2rank.load and the rank, predict and evaluate commands, for every
class that saves; damaged or edited fitted state is a one-line error, never NaN or equal scores."""

import json
import pickle
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from sklearn.linear_model import LogisticRegression
from sklearn.pipeline import make_pipeline

import as2rank
from as2rank.answer import CalibratedRanker
from as2rank.app.cli import main
from as2rank.lexical.baselines import (
    LexicalFeatures,
    OverlapRankRanker,
    PointwiseRanker,
    ReciprocalRankRanker,
    WordOverlapRanker,
)
from tests.utils import Payload, no_code_runs, reseal

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from as2rank.ensemble.linear import LinearEnsemble  # noqa: E402
from as2rank.pruning.sequential import SequentialRanker  # noqa: E402
from as2rank.transformer.cascade import CascadeTransformer  # noqa: E402
from as2rank.transformer.cerberus import Cerberus, DistilledRanker  # noqa: E402
from as2rank.transformer.context.rankers import ContextConcat, ContextEnsemble, ContextExtractor, ContextMWA  # noqa: E402
from as2rank.transformer.ranker import TransformerRanker  # noqa: E402
from as2rank.transformer.zeroshot import ZeroShotRanker  # noqa: E402
from tests import test_context, test_cosinet  # noqa: E402
from tests.test_cosinet import kv  # noqa: E402,F401 (a fixture)
from tests.test_transformer import small, synthetic, tiny_config, tokenizer  # noqa: E402,F401 (a fixture)

pytestmark = pytest.mark.usefixtures("one_torch_thread")

#: Where a payload that runs writes, proving it ran.
MARKER = Path(__file__).with_name(".as2rank-trust-marker")




@pytest.fixture(autouse=True)
def no_marker():
    with no_code_runs(MARKER, "a model directory"):
        yield


@pytest.fixture(scope="module")
def table(tmp_path_factory):
    """A user's table as a CSV (with labels, for evaluate) and its frame, of words none of the models saw."""
    X, y = synthetic(n_questions=3, seed=7)
    X = X.assign(candidate=X["candidate"] + " zebra quokka")  # words unseen in fit: Cosinet looks them up
    path = tmp_path_factory.mktemp("table") / "pairs.csv"
    X.assign(label=y).drop(columns="position").to_csv(path, index=False)
    return path


@pytest.fixture(scope="module")
def saved(tmp_path_factory, kv, tokenizer):
    """A saved directory of every class that saves, fitted on tiny data: name -> path."""
    root = tmp_path_factory.mktemp("saved")
    X, y = synthetic(n_questions=6)
    X = X.assign(teacher_score=np.random.default_rng(0).normal(size=len(X)) + 2 * y)
    cx, cy = test_context.synthetic(n_questions=4)
    extractor = ContextExtractor(max_global_sentences=2).fit(cx)
    ctx = extractor.transform(cx)
    encoder = root / "checkpoint"
    transformers.AutoModel.from_config(tiny_config("bert", 2)).save_pretrained(encoder)
    tokenizer.save_pretrained(encoder)
    lexical = make_pipeline(LexicalFeatures(), PointwiseRanker(LogisticRegression())).fit(X, y)
    ranker = small(TransformerRanker, "bert", tokenizer, num_layers=2).fit(X, y)
    models = {
        "WordOverlapRanker": WordOverlapRanker(),
        "ReciprocalRankRanker": ReciprocalRankRanker(),
        "OverlapRankRanker": OverlapRankRanker(),
        "LexicalFeatures": LexicalFeatures().fit(X),
        "PointwiseRanker": lexical,
        "Cosinet": test_cosinet.tiny(kv, epochs=1).fit(*test_cosinet.synthetic(6)),
        "TransformerRanker": ranker,
        "CascadeTransformer": small(CascadeTransformer, "bert", tokenizer).fit(X, y),
        "DistilledRanker": small(DistilledRanker, "bert", tokenizer, teachers=["teacher_score"], num_layers=2).fit(X, y),
        "Cerberus": small(Cerberus, "bert", tokenizer, teachers=["teacher_score", WordOverlapRanker()], body_layers=2,
                          head_layers=1).fit(X, y),
        "SequentialRanker": SequentialRanker([OverlapRankRanker(), ranker], keep=0.5).fit(X, y),
        "LinearEnsemble": LinearEnsemble([WordOverlapRanker(), ranker], resolution=2).fit(X, y),
        "ContextExtractor": extractor,
        "ContextConcat": test_context.small(ContextConcat, tokenizer).fit(ctx, cy),
        "ContextEnsemble": test_context.small(ContextEnsemble, tokenizer).fit(ctx, cy),
        "ContextMWA": test_context.small(ContextMWA, tokenizer).fit(ctx, cy),
        "ZeroShotRanker": ZeroShotRanker(model=str(encoder), max_length=16, device="cpu", precision="fp32").fit(X),
        "CalibratedRanker": CalibratedRanker(OverlapRankRanker(), cv=3).fit(*synthetic(n_questions=12, seed=1)),
    }
    out = {}
    for name, model in models.items():
        as2rank.save(model, root / name)
        out[name] = root / name
    return out


def copy_of(saved, name, tmp_path):
    target = tmp_path / name
    shutil.copytree(saved[name], target)
    return target


def refused_everywhere(model_dir, table, tmp_path, capsys, match):
    """Every entry point refuses ``model_dir`` with one line matching ``match``: as2rank.load, and the rank,
    predict and evaluate commands."""
    with pytest.raises(ValueError, match=match):
        as2rank.load(model_dir)
    columns = ["--question", "question", "--candidate", "candidate", "--qid", "qid"]
    commands = [
        ["rank", str(model_dir), str(table), "--output", str(tmp_path / "ranked.csv"), *columns],
        ["predict", "--model", str(model_dir), "--input", str(table), "--output", str(tmp_path / "scores"), "--quiet",
         *columns],
        ["evaluate", "--model", str(model_dir), "--data", str(table), *columns],
    ]
    for command in commands:
        assert main(command) == 2, command[0]
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and err.startswith("as2rank: error:"), (command[0], err)
        assert __import__("re").search(match, err), (command[0], err)
    assert not (tmp_path / "ranked.csv").exists() and not list((tmp_path / "scores").glob("part-*"))


CLASSES = ["WordOverlapRanker", "ReciprocalRankRanker", "OverlapRankRanker", "LexicalFeatures", "PointwiseRanker",
           "Cosinet", "TransformerRanker", "CascadeTransformer", "DistilledRanker", "Cerberus", "SequentialRanker",
           "LinearEnsemble", "ContextExtractor", "ContextConcat", "ContextEnsemble", "ContextMWA", "ZeroShotRanker",
           "CalibratedRanker"]


def test_every_class_that_saves_is_covered(saved):
    from as2rank.persistence.registry import AS2RANK_CLASSES

    assert sorted(CLASSES) == sorted(AS2RANK_CLASSES) == sorted(saved)


# ----------------------------------------------------------------------------------------------- files outside
@pytest.mark.parametrize("name", CLASSES)
def test_no_entry_point_follows_a_link_out_of_the_directory(name, saved, table, tmp_path, capsys):
    """A file of the directory replaced by a link to an outside copy of itself (same bytes, so the seal holds):
    refused before anything is read, by every entry point."""
    model_dir = copy_of(saved, name, tmp_path)
    victim = max((f for f in model_dir.rglob("*") if f.is_file()), key=lambda f: f.stat().st_size)
    outside = tmp_path / "outside" / victim.name
    outside.parent.mkdir()
    shutil.move(victim, outside)
    victim.symlink_to(outside)
    refused_everywhere(model_dir, table, tmp_path, capsys, "symbolic link")


@pytest.mark.parametrize("name", ["PointwiseRanker", "TransformerRanker"])
def test_a_linked_folder_is_refused_too(name, saved, table, tmp_path, capsys):
    model_dir = copy_of(saved, name, tmp_path)
    folder = next(p for p in model_dir.iterdir() if p.is_dir())
    shutil.move(folder, tmp_path / "elsewhere")
    folder.symlink_to(tmp_path / "elsewhere", target_is_directory=True)
    refused_everywhere(model_dir, table, tmp_path, capsys, "symbolic link")


def _edit(model_dir, file, edit):
    meta_file = model_dir / file
    meta = json.loads(meta_file.read_text())
    edit(meta)
    meta_file.write_text(json.dumps(meta))
    reseal(model_dir)  # as an attacker would: the seal alone is no defence


@pytest.mark.parametrize("where", ["absolute", "relative", "parent", "hub", "gensim"])
def test_cosinet_embeddings_cannot_name_a_pickle_or_a_file_elsewhere(where, saved, table, tmp_path, capsys):
    """The reported hole: Cosinet's embeddings pointed at a gensim .kv file (a pickle), which prediction would
    load for the first word not seen in fit. Every way of naming it is refused, and the payload never runs."""
    model_dir = copy_of(saved, "Cosinet", tmp_path)
    payload = tmp_path / "vectors.kv"
    payload.write_bytes(pickle.dumps(Payload(MARKER)))
    value = {"absolute": str(payload), "relative": "vectors.txt", "parent": "../vectors.kv", "hub": "org/vectors",
             "gensim": "gensim:glove-wiki-gigaword-50"}[where]
    if where == "relative":  # a pickle shipped inside the directory under an innocent name
        (model_dir / "vectors.txt").write_bytes(payload.read_bytes())
    _edit(model_dir, "as2rank.json", lambda meta: meta["params"].update(embeddings=value))
    refused_everywhere(model_dir, table, tmp_path, capsys, "embeddings names .* neither packaged weights")


def test_a_pickle_inside_the_directory_is_refused_by_its_format(saved, table, tmp_path, capsys):
    model_dir = copy_of(saved, "TransformerRanker", tmp_path)
    (model_dir / "encoder" / "pytorch_model.bin").write_bytes(pickle.dumps(Payload(MARKER)))
    reseal(model_dir)
    refused_everywhere(model_dir, table, tmp_path, capsys, "pytorch_model.bin is in a format that runs code")


def test_an_encoder_cannot_bring_its_own_code(saved, table, tmp_path, capsys):
    """transformers' ``auto_map`` names Python files of the checkpoint; as2rank never lets them run."""
    model_dir = copy_of(saved, "TransformerRanker", tmp_path)
    (model_dir / "encoder" / "modeling_evil.py").write_text(
        f"from pathlib import Path\nPath({str(MARKER)!r}).write_text('ran')\n")
    _edit(model_dir, "encoder/config.json", lambda config: config.update(
        model_type="evil", auto_map={"AutoConfig": "modeling_evil.EvilConfig", "AutoModel": "modeling_evil.EvilModel"}))
    refused_everywhere(model_dir, table, tmp_path, capsys, "not a loadable as2rank model|evil")


@pytest.mark.parametrize("value", ["/elsewhere/model", "../checkpoint", "org/model", "similarity/../../x"])
def test_a_context_encoder_elsewhere_is_refused(value, saved, table, tmp_path, capsys):
    model_dir = copy_of(saved, "ContextExtractor", tmp_path)
    _edit(model_dir, "as2rank.json", lambda meta: meta["params"].update(encoder=value))
    with pytest.raises(ValueError, match="encoder names .* neither packaged weights"):
        as2rank.load(model_dir)
    assert isinstance(as2rank.load(model_dir, encoder="minilm-l6"), ContextExtractor)  # the user's own choice


def test_the_references_table_lists_every_class_that_reads_a_file_to_predict():
    """Every loadable class whose saved state names files that prediction opens is in the trust table: the
    transformer family (their similarity prior's encoder), a Cosinet's word vectors, a ContextExtractor's
    encoder; and nothing else."""
    from as2rank.persistence.registry import AS2RANK_CLASSES, REFERENCES, resolve_class
    from as2rank.transformer.scaffold import _TransformerEstimator

    family = {name for name in AS2RANK_CLASSES if issubclass(resolve_class(name), _TransformerEstimator)}
    assert family == {"TransformerRanker", "CascadeTransformer", "Cerberus", "DistilledRanker", "ContextConcat",
                      "ContextMWA", "ContextEnsemble"}
    assert {name: REFERENCES[name] for name in family} == {name: {"similarity_source_": ("minilm-l6", "mpnet-base")}
                                                           for name in family}
    assert set(REFERENCES) == family | {"Cosinet", "ContextExtractor"}
    assert REFERENCES["Cosinet"] == {"embeddings": ("glove-6b-50d", "minilm-l6-wordpiece")}


def test_a_similarity_prior_reads_its_encoder_from_the_directory(tokenizer, tmp_path):
    """A similarity prior fitted on a checkpoint of the user's (not packaged) is saved with a copy of it: the
    directory loads and scores the same once the checkpoint is gone; pointed elsewhere it is refused."""
    X, y = synthetic(n_questions=6)
    checkpoint = tmp_path / "checkpoint"
    torch.manual_seed(0)  # the checkpoint's random weights: the same scores in every run (score digests)
    transformers.AutoModel.from_config(tiny_config("bert", 2)).save_pretrained(checkpoint)
    tokenizer.save_pretrained(checkpoint)
    model = TransformerRanker(model=str(checkpoint), similarity_prior=True, max_length=16, epochs=1, batch_size=8,
                              random_state=0, device="cpu", precision="fp32").fit(X, y)
    expected = model.predict(X)
    as2rank.save(model, tmp_path / "m")
    shutil.rmtree(checkpoint)
    loaded = as2rank.load(tmp_path / "m")
    assert loaded.similarity_source_["model"] == str(tmp_path / "m" / "similarity")
    np.testing.assert_allclose(loaded.predict(X), expected, rtol=1e-5, atol=1e-6)
    _edit(tmp_path / "m", "as2rank.json", lambda meta: meta["fitted"]["similarity_source_"].update(model=str(tmp_path)))
    with pytest.raises(ValueError, match=r"similarity_source_\['model'\] names"):
        as2rank.load(tmp_path / "m")


# ----------------------------------------------------------------------------------------------- fitted state
def _logistic_dir(saved, tmp_path):
    model_dir = copy_of(saved, "PointwiseRanker", tmp_path)
    return model_dir, next(model_dir.rglob("fitted.estimator_"))


def _edit_arrays(folder, edit):
    from safetensors.numpy import load_file, save_file

    arrays = dict(load_file(str(folder / "arrays.safetensors")))
    edit(arrays)
    save_file(arrays, str(folder / "arrays.safetensors"))


@pytest.mark.parametrize("edit, match", [
    (lambda a: a.update({"fitted.coef_": np.full_like(a["fitted.coef_"], np.nan)}), "coef_ holds .* non-finite"),
    (lambda a: a.update({"fitted.coef_": a["fitted.coef_"][:, :2].copy()}), r"coef_ must have shape \(1, 7\), got \(1, 2\)"),
    (lambda a: a.update({"fitted.coef_": a["fitted.coef_"].T.copy()}), "coef_ must have shape"),
    (lambda a: a.update({"fitted.intercept_": np.array([np.inf])}), "intercept_ holds"),
])
def test_damaged_arrays_are_refused_never_scored(edit, match, saved, table, tmp_path, capsys):
    """The reported cases: an all-NaN coef_ scored 166 NaN rows, a coef_ of the wrong shape gave every candidate
    the same score. Unsealed, the seal refuses the edit; resealed, the fitted-state rules do."""
    model_dir, logistic = _logistic_dir(saved, tmp_path)
    _edit_arrays(logistic, edit)
    with pytest.raises(ValueError, match="arrays.safetensors is not the file that was saved"):
        as2rank.load(model_dir)
    reseal(model_dir)
    refused_everywhere(model_dir, table, tmp_path, capsys, match)


@pytest.mark.parametrize("edit, match", [
    (lambda f: f.update(n_features_in_="six"), "n_features_in_ must be an integer"),
    (lambda f: f.pop("classes_"), "classes_ is missing"),
    (lambda f: f.update(classes_=[0]), "classes_ must be an array"),
])
def test_edited_fitted_keys_are_one_line_errors(edit, match, saved, table, tmp_path, capsys):
    model_dir, logistic = _logistic_dir(saved, tmp_path)
    _edit(model_dir, logistic.relative_to(model_dir) / "as2rank.json", lambda meta: edit(meta["fitted"]))
    refused_everywhere(model_dir, table, tmp_path, capsys, match)


def test_non_finite_weights_are_refused(saved, tmp_path):
    from safetensors.torch import load_file, save_file

    model_dir = copy_of(saved, "TransformerRanker", tmp_path)
    heads = dict(load_file(str(model_dir / "heads.safetensors")))
    name = next(iter(heads))
    heads[name] = torch.full_like(heads[name], float("nan"))
    save_file(heads, str(model_dir / "heads.safetensors"))
    reseal(model_dir)
    with pytest.raises(ValueError, match="holds non-finite values"):
        as2rank.load(model_dir)


def test_deeply_nested_json_is_refused(tmp_path):
    """The reported case: a deeply nested as2rank.json raised RecursionError inside as2rank.load."""
    WordOverlapRanker().save_pretrained(tmp_path / "m")
    text = json.dumps({"format_version": 2, "class": "WordOverlapRanker", "params": {"lowercase": 0}, "fitted": None})
    (tmp_path / "m" / "as2rank.json").write_text(text.replace('"lowercase": 0', '"lowercase": ' + "[" * 100_000 + "]" * 100_000))
    with pytest.raises(ValueError, match="nests its values more than 64 levels"):
        as2rank.load(tmp_path / "m")


def test_unknown_files_in_a_loader_folder_are_refused(saved, tmp_path):
    model_dir = copy_of(saved, "TransformerRanker", tmp_path)
    (model_dir / "encoder" / "added_tokens.json").write_text("{}")
    with pytest.raises(ValueError, match="encoder/added_tokens.json was not saved with the model"):
        as2rank.load(model_dir)
    (model_dir / "encoder" / "added_tokens.json").unlink()
    (model_dir / "my-notes.txt").write_text("the user's own file: never read, never refused")
    assert isinstance(as2rank.load(model_dir), TransformerRanker)


def test_a_loaded_model_equals_the_saved_one_for_every_class(saved):
    """The checks refuse only what was changed: every untouched directory loads (its scores are compared to the
    fitted model's in tests/test_persistence.py)."""
    for name, path in saved.items():
        loaded = as2rank.load(path)
        assert type(loaded).__name__ in (name, "Pipeline")


def test_ranked_ties_follow_the_text_not_the_row_order(tmp_path):
    """WO+RR without positions ties on overlap: shuffled rows must give the same ranked file."""
    X, _ = synthetic(n_questions=20, seed=3)
    X = X.drop(columns="position")
    model = OverlapRankRanker()
    first = as2rank.rank(model, X)
    rng = np.random.default_rng(1)
    shuffled = X.iloc[np.lexsort((rng.random(len(X)), pd.factorize(X["qid"])[0]))]  # rows shuffled inside questions
    again = as2rank.rank(model, shuffled)
    pd.testing.assert_frame_equal(first.drop(columns="row").reset_index(drop=True),
                                  again.drop(columns="row").reset_index(drop=True))

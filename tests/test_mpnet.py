"""MPNet (the family of ``model="mpnet-base"``, all-mpnet-base-v2) in every transformer estimator, on tiny random
MPNet encoders: the layer-by-layer run equals transformers' own model at every layer (MPNet's blocks add a relative
position bias that its encoder computes once), the cascade's exits and Cerberus's heads compute what MPNet's
blocks do, pairs carry no token types and their question mask ends at the first separator, and every estimator
fits, predicts, round-trips through ``as2rank.save``/``as2rank.load`` and predicts in int8."""

import copy

import numpy as np
import pandas as pd
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import as2rank  # noqa: E402
from as2rank.lexical.baselines import ReciprocalRankRanker, WordOverlapRanker  # noqa: E402
from as2rank.neural.backbone import LayerStack, encoder_states, pool, uses_token_types  # noqa: E402
from as2rank.neural.tokens import encode_pairs, pair_template, question_mask  # noqa: E402
from as2rank.transformer.cascade import CascadeTransformer  # noqa: E402
from as2rank.transformer.cerberus import Cerberus, DistilledRanker  # noqa: E402
from as2rank.transformer.context.rankers import ContextConcat, ContextEnsemble, ContextExtractor, ContextMWA  # noqa: E402
from as2rank.transformer.distillation import CerberusEncoder  # noqa: E402
from as2rank.transformer.network import feed_forward  # noqa: E402
from as2rank.transformer.ranker import TransformerRanker  # noqa: E402
from as2rank.transformer.zeroshot import ZeroShotRanker  # noqa: E402
from tests.test_context import synthetic as context_rows  # noqa: E402
from tests.test_transformer import WORDS, synthetic  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_torch_thread")

#: MPNet's special tokens, ``<s>``, ``<pad>`` and ``</s>`` at all-mpnet-base-v2's ids: MPNet's embeddings take id 1
#: for padding whatever the tokenizer says (positions are numbered from the input ids, skipping it).
SPECIAL = ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]
MAX_LENGTH, CONTEXT_LENGTH, PAIR_LENGTH = 32, 48, 24


@pytest.fixture(scope="session")
def mpnet_tokenizer():
    """A word-level MPNet tokenizer over the small vocabulary of ``test_transformer``, built offline."""
    return transformers.MPNetTokenizer(vocab={w: i for i, w in enumerate(SPECIAL + WORDS)}, unk_token="<unk>")


def mpnet_config(layers=4):
    return transformers.MPNetConfig(vocab_size=len(SPECIAL) + len(WORDS), hidden_size=32, num_hidden_layers=layers,
                                    num_attention_heads=2, intermediate_size=64,
                                    max_position_embeddings=CONTEXT_LENGTH + 2)


def mpnet_encoder(layers=4):
    torch.manual_seed(0)
    return transformers.AutoModel.from_config(mpnet_config(layers)).eval()


def pair_batch(tokenizer, n=6):
    """Pairs of several lengths (so, padding), as ``encode_pairs`` gives them to a model."""
    X, _ = synthetic(n_questions=2)
    encoded = encode_pairs(tokenizer, X["question"][:n], X["candidate"][:n], max_length=MAX_LENGTH, token_types=False)
    batch = {k: torch.from_numpy(encoded[k]) for k in ("input_ids", "attention_mask")}
    assert not batch["attention_mask"].all()
    return batch


# ----------------------------------------------------------------------------------------------- tokens and layers
def test_pairs_have_no_token_types_and_the_question_mask_ends_at_the_first_separator(mpnet_tokenizer):
    tok = mpnet_tokenizer
    assert pair_template(tok) == ((0,), (2, 2), (2,), (0, 0, 0, 0, 0))  # <s> A </s></s> B </s>, one segment
    assert not uses_token_types(mpnet_encoder(1), tok)
    questions = ["who wrote hamlet", "what is the capital of france", "who"]
    candidates = ["hamlet was built in paris", "paris", "the king of the city of paris was first"]
    for max_length in (MAX_LENGTH, 9):  # whole pairs, and pairs cut longest first
        encoded = encode_pairs(tok, questions, candidates, max_length=max_length, token_types=False)
        reference = tok(questions, candidates, truncation="longest_first", max_length=max_length, padding="longest",
                        return_tensors="np")
        assert "token_type_ids" not in encoded
        np.testing.assert_array_equal(encoded["input_ids"], reference["input_ids"])
        np.testing.assert_array_equal(encoded["attention_mask"], reference["attention_mask"])
        mask = question_mask(encoded["input_ids"], tok)
        for row, ids in enumerate(encoded["input_ids"]):
            # The tokenizer's own account of which tokens are the question's: <s>, them, and the </s> after them.
            question = [i for i, text in enumerate(reference.sequence_ids(row)) if text == 0]
            end = question[-1] + 1
            assert ids[0] == tok.cls_token_id and ids[end] == ids[end + 1] == tok.sep_token_id  # <s> A </s></s> B
            np.testing.assert_array_equal(mask[row], np.arange(len(ids)) <= end)


def test_layer_stack_equals_the_mpnet_model_at_every_layer(mpnet_tokenizer):
    encoder = mpnet_encoder(3)
    batch = pair_batch(mpnet_tokenizer)
    with torch.inference_mode():
        states = encoder(**batch, output_hidden_states=True).hidden_states
        stack = LayerStack(encoder)
        hidden = stack.embed(batch)
        torch.testing.assert_close(hidden, states[0], rtol=0, atol=1e-6)
        for layer in range(3):
            hidden = stack.run(hidden, batch["attention_mask"], layer, layer + 1)
            torch.testing.assert_close(hidden, states[layer + 1], rtol=0, atol=1e-5)
        torch.testing.assert_close(stack.run(stack.embed(batch), batch["attention_mask"], 0, 3), states[-1], rtol=0, atol=1e-5)
        torch.testing.assert_close(encoder_states(encoder, batch), states[-1], rtol=0, atol=0)


def test_cerberus_heads_compute_what_mpnet_blocks_do(mpnet_tokenizer):
    encoder = mpnet_encoder(4)
    original = copy.deepcopy(encoder)
    module = CerberusEncoder(encoder, body_layers=2, head_layers=2, n_heads=2, pooling="mean").eval()
    for depth, block in enumerate(module.heads):  # the heads start as copies of blocks 2 and 3, by MPNet's names
        for i in range(2):
            expected = original.encoder.layer[2 + depth].state_dict()
            state = block.block_state(i)
            assert state.keys() == expected.keys()
            assert all(torch.equal(state[k], expected[k]) for k in expected)
    torch.manual_seed(1)
    with torch.no_grad():  # heads apart, as training moves them
        for weights in module.heads.parameters():
            weights[1].add_(0.1 * torch.randn_like(weights[1]))
    batch = pair_batch(mpnet_tokenizer)
    padding = (1.0 - batch["attention_mask"][:, None, None, :].float()) * torch.finfo(torch.float32).min
    with torch.inference_mode():
        logits = module(batch)
        body = original(**batch, output_hidden_states=True).hidden_states[2]
        bias = original.encoder.compute_position_bias(body)
        for i in range(2):
            hidden = body
            for depth, block in enumerate(module.heads):
                layer = copy.deepcopy(original.encoder.layer[2 + depth])
                layer.load_state_dict(block.block_state(i))
                hidden = layer(hidden, padding, bias)[0]
            classifier = feed_forward(hidden.shape[-1], 2).eval()
            classifier.load_state_dict(module.classifiers.classifier_state(i))
            expected = classifier(pool(hidden, batch["attention_mask"], "mean")).squeeze(-1)
            torch.testing.assert_close(logits[:, i], expected, rtol=0, atol=1e-5)
    assert (logits[:, 0] - logits[:, 1]).abs().max() > 1e-3


def test_cascade_has_the_paper_exits_and_each_equals_the_model_at_its_layer(mpnet_tokenizer):
    X, y = synthetic(n_questions=6)
    est = CascadeTransformer(model=mpnet_config(12), tokenizer=mpnet_tokenizer, lexical_prior=False, max_length=MAX_LENGTH,
                             epochs=1, batch_size=8, learning_rate=1e-3, random_state=0, device="cpu",
                             precision="fp32").fit(X, y)
    assert est.exits_ == (4, 6, 8, 10, 12) and est.n_layers_ == 12
    module = est.model_.eval()
    encoded = est.encode(X)
    batch = {k: torch.from_numpy(v) for k, v in encoded.items() if k != "lengths"}
    assert set(batch) == {"input_ids", "attention_mask", "question_mask"}
    with torch.inference_mode():
        states = module.encoder(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                                output_hidden_states=True).hidden_states
        expected = torch.stack([module.exit_logits(e, states[layer], batch) for e, layer in enumerate(est.exits_)], 1)
        np.testing.assert_allclose(est.predict_exits(X), expected.numpy(), rtol=0, atol=1e-5)
        # With drops, on chunks of a few rows cut to their own width: each exit's survivors keep their logits.
        codes = pd.factorize(X["qid"])[0]
        for exact in (False, True):
            logits, _ = module.cascade(batch, codes, [0.4] * 4, 4, chunk_tokens=64, lengths=encoded["lengths"],
                                       exact_widths=exact)
            reached = ~torch.isnan(logits)
            assert reached[:, 0].all() and not reached[:, -1].all()
            torch.testing.assert_close(logits[reached], expected[reached].float(), rtol=0, atol=1e-5)


# ----------------------------------------------------------------------------------------------- estimators
def _common(tokenizer, length=MAX_LENGTH):
    return dict(model=mpnet_config(), tokenizer=tokenizer, max_length=length, epochs=1, batch_size=8, learning_rate=1e-3,
                random_state=0, device="cpu", precision="fp32")


def _context(cls, tokenizer, **params):
    return cls(**_common(tokenizer, CONTEXT_LENGTH), max_pair_length=PAIR_LENGTH, **params)


ESTIMATORS = {
    "ranker": lambda tok: TransformerRanker(**_common(tok)),
    "ranker-listwise": lambda tok: TransformerRanker(**_common(tok), loss="listwise"),
    "cascade": lambda tok: CascadeTransformer(**_common(tok), alpha=0.3),
    "distilled": lambda tok: DistilledRanker(**_common(tok), teachers=[WordOverlapRanker()]),
    "cerberus": lambda tok: Cerberus(**_common(tok), teachers=[WordOverlapRanker(), ReciprocalRankRanker()],
                                     body_layers=2, head_layers=2),
    "concat": lambda tok: _context(ContextConcat, tok),
    "mwa": lambda tok: _context(ContextMWA, tok),
    "ensemble": lambda tok: _context(ContextEnsemble, tok),
    "zeroshot": lambda tok: ZeroShotRanker(model=mpnet_config(), tokenizer=tok, max_length=MAX_LENGTH, device="cpu",
                                           precision="fp32"),
}


CONTEXT_RANKERS = ("concat", "mwa", "ensemble")


def each(names):
    """``names`` as test parameters, the tests of each estimator in one pytest-xdist group: one worker fits it."""
    return [pytest.param(name, marks=pytest.mark.xdist_group(f"mpnet-{name}")) for name in names]


@pytest.fixture(scope="module")
def fits(mpnet_tokenizer):
    """Each estimator of :data:`ESTIMATORS` fitted once per test process, on its data: ``name -> (est, X)``."""
    done = {}

    def fit(name):
        if name not in done:
            if name in CONTEXT_RANKERS:
                X, y = context_rows()
                X = ContextExtractor(max_global_sentences=2, max_global_tokens=12).fit_transform(X)
            else:
                X, y = synthetic(n_questions=8)
            torch.manual_seed(0)  # the zero-shot ranker builds its random encoder from the config in fit
            done[name] = ESTIMATORS[name](mpnet_tokenizer).fit(X, y), X
        return done[name]

    return fit


@pytest.mark.parametrize("name", each(ESTIMATORS))
def test_every_estimator_fits_predicts_and_round_trips(name, fits, tmp_path):
    est, X = fits(name)
    scores = est.predict(X)
    assert scores.shape == (len(X),) and np.isfinite(scores).all() and np.ptp(scores) > 0
    if name != "zeroshot":  # the trained ones read the segment similarity, on by default, from the question mask
        assert est.model_.similarity is not None
        assert np.isfinite(est.history_.epoch_loss).all()
    as2rank.save(est, tmp_path / name)
    np.testing.assert_allclose(as2rank.load(tmp_path / name).predict(X), scores, rtol=0, atol=1e-6)


@pytest.mark.parametrize("name", each(["ranker", "cascade", "cerberus", "mwa", "zeroshot"]))
def test_prediction_builds_the_attention_mask_without_reading_it(name, fits):
    """MPNet runs eager attention, whose mask transformers builds after a truth test of the padding (a read of
    the device); the estimators hand it a ready mask, on every batch."""
    from tests.test_host_reads import counted_reads

    est, X = fits(name)
    est.set_params(batch_tokens=64)  # many batches
    try:
        with counted_reads() as calls:
            est.predict(X)
    finally:
        est.set_params(batch_tokens="auto")
    assert "__bool__" not in calls


@pytest.mark.parametrize("name", each(name for name in ESTIMATORS if name != "zeroshot"))
def test_every_estimator_predicts_in_int8_with_torch(name, fits, monkeypatch):
    from as2rank.neural import int8_supported
    from as2rank.neural.onnx import runtime

    if not int8_supported():
        pytest.skip("CPU without int8 kernels")
    monkeypatch.setattr(runtime, "onnx_available", lambda: False)  # torch's dynamic int8 (ONNX: the slow test below)
    est, X = fits(name)
    fp32 = est.predict(X)
    try:
        int8 = est.set_params(precision="int8").predict(X)
        module = est.predictor(encoded=est.encode(X)).module
    finally:
        est.set_params(precision="fp32")
    assert any(isinstance(m, torch.ao.nn.quantized.dynamic.Linear) for m in module.modules())
    np.testing.assert_allclose(int8, fp32, rtol=0, atol=0.05)
    assert not np.array_equal(int8, fp32)


@pytest.mark.slow
@pytest.mark.xdist_group("onnx")
@pytest.mark.usefixtures("memoized_exports")
@pytest.mark.parametrize("cls", [TransformerRanker, CascadeTransformer])
def test_int8_on_onnx_runtime(cls, mpnet_tokenizer):
    from as2rank.neural import int8_supported
    from as2rank.neural.onnx.runtime import OnnxCascade, OnnxModule, onnx_available

    if not (int8_supported() and onnx_available()):
        pytest.skip("needs int8 kernels and onnxruntime, onnx, onnxscript")
    X, y = synthetic(n_questions=6)
    layers = 2 if cls is CascadeTransformer else 1  # exits 1 and 2: the second segment starts from hidden states
    est = cls(**{**_common(mpnet_tokenizer), "model": mpnet_config(layers)}).fit(X, y)
    fp32 = est.predict(X)
    int8 = est.set_params(precision="int8").predict(X)
    assert isinstance(est.predictor(encoded=est.encode(X)).module, OnnxCascade if cls is CascadeTransformer else OnnxModule)
    np.testing.assert_allclose(int8, fp32, rtol=0, atol=0.05)

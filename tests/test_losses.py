"""The neural estimators' losses (``loss="pointwise"`` or ``"listwise"``, :mod:`as2rank.neural.losses`): values
computed by hand on tiny groups, and listwise training batches that hold whole questions for every transformer
estimator."""

import math
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

import as2rank.neural.predict as predict  # noqa: E402
from as2rank.neural.batching import length_chunks, question_bucket_batches  # noqa: E402
from as2rank.neural.distributed import Shard  # noqa: E402
from as2rank.neural.losses import (DISTILLATION_LOSSES, LABEL_LOSSES, by_question,  # noqa: E402
                                   listwise_kl_loss, pointwise_distillation)
from as2rank.neural.batching import CHUNK_ROWS  # noqa: E402
from tests.test_transformer import small, synthetic, tokenizer  # noqa: E402,F401

pytestmark = pytest.mark.usefixtures("one_torch_thread")

#: Three questions, rows interleaved: a (one positive of three), b (two positives of two), c (none).
GROUP = torch.tensor([0, 1, 0, 2, 1, 0, 2])
LOGITS = torch.tensor([1.0, 0.5, 0.0, 0.3, 2.0, -1.0, 0.1])
LABELS = torch.tensor([0.0, 1.0, 1.0, 0.0, 1.0, 0.0, 0.0])


def label_loss(logits, batch, loss):
    return LABEL_LOSSES[loss](logits, batch)


def distillation_loss(student, teacher, batch, alpha, tau, loss):
    return DISTILLATION_LOSSES[loss](alpha, tau)(student, teacher, batch)


def logsumexp(*values):
    return math.log(sum(math.exp(v) for v in values))


def test_by_question_lays_rows_out_in_row_order():
    grid, mask = by_question(LOGITS, GROUP)
    np.testing.assert_array_equal(grid.numpy(), np.float32([[1.0, 0.0, -1.0], [0.5, 2.0, 0.0], [0.3, 0.1, 0.0]]))
    np.testing.assert_array_equal(mask.numpy(), [[1, 1, 1], [1, 1, 0], [1, 1, 0]])


def test_listwise_label_loss_by_hand():
    # KL(p ‖ softmax(s)) = Σ p log p − Σ p log softmax(s); c has no positive and is left out.
    a = logsumexp(1.0, 0.0, -1.0) - 0.0  # p = (0, 1, 0)
    b = math.log(0.5) - 0.5 * ((0.5 - logsumexp(0.5, 2.0)) + (2.0 - logsumexp(0.5, 2.0)))
    batch = {"labels": LABELS, "group": GROUP}
    assert label_loss(LOGITS, batch, "listwise").item() == pytest.approx((a + b) / 2, rel=1e-6)
    # Columns (exits, heads) are each a list of their own: the mean of the columns' losses.
    columns = torch.stack([LOGITS, 2 * LOGITS, LOGITS - 3], dim=1)
    expected = np.mean([label_loss(columns[:, j], batch, "listwise").item() for j in range(3)])
    assert label_loss(columns, batch, "listwise").item() == pytest.approx(expected, rel=1e-6)
    assert label_loss(LOGITS - 3, batch, "listwise").item() == pytest.approx((a + b) / 2, rel=1e-6)  # shift-free
    none = {"labels": torch.zeros(7), "group": GROUP}
    assert label_loss(LOGITS, none, "listwise").item() == 0.0


def test_pointwise_label_loss_is_binary_cross_entropy():
    s, y = LOGITS.numpy(), LABELS.numpy()
    expected = -np.mean(y * np.log(1 / (1 + np.exp(-s))) + (1 - y) * np.log(1 - 1 / (1 + np.exp(-s))))
    assert label_loss(LOGITS, {"labels": LABELS}, "pointwise").item() == pytest.approx(expected, rel=1e-6)


def test_label_losses_read_graded_labels():
    # Rows question by question, as a Cosinet batch holds them; labels graded (2 and 1 in the first question).
    order = [0, 2, 5, 1, 4, 3, 6]
    logits, graded = LOGITS[order], torch.tensor([0.0, 2.0, 1.0, 0.0, 1.0, 0.0, 0.0])
    group = torch.from_numpy(np.repeat(np.arange(3), [3, 2, 2]))
    batch = {"labels": graded, "group": group}
    # Listwise: the first question's target is (0, 2/3, 1/3).
    p, log_q = [2 / 3, 1 / 3], [v - logsumexp(1.0, 0.0, -1.0) for v in (0.0, -1.0)]  # KL = Σ p log p − Σ p log q
    a = sum(pi * math.log(pi) for pi in p) - sum(pi * lq for pi, lq in zip(p, log_q))
    b = 0.0 - (2.0 - logsumexp(0.5, 2.0))
    assert LABEL_LOSSES["listwise"](logits, batch).item() == pytest.approx((a + b) / 2, rel=1e-6)
    grid, mask = by_question(logits, group)
    assert LABEL_LOSSES["listwise"](logits, batch).item() == listwise_kl_loss(grid, by_question(graded, group)[0], mask).item()
    # Pointwise: any label > 0 is a positive.
    binary = {"labels": (graded > 0).float()}
    assert LABEL_LOSSES["pointwise"](logits, batch).item() == LABEL_LOSSES["pointwise"](logits, binary).item()


def test_listwise_distillation_by_hand():
    alpha, tau = 0.3, 2.0
    teacher = torch.tensor([0.2, -1.0, 1.5, 0.0, 0.7, -0.4, 2.0])
    batch = {"labels": LABELS, "group": GROUP}

    def kl(p, s):  # KL(p ‖ softmax(s)) over one question
        log_q = [v - logsumexp(*s) for v in s]
        return sum(pi * (math.log(pi) - lq) for pi, lq in zip(p, log_q) if pi > 0)

    def soft(t, s):
        p = [math.exp(v / tau - logsumexp(*[w / tau for w in t])) for v in t]
        return kl(p, [v / tau for v in s])

    questions = [[0, 2, 5], [1, 4], [3, 6]]
    s, t, y = LOGITS.tolist(), teacher.tolist(), LABELS.tolist()
    hard = np.mean([kl([y[i] / sum(y[j] for j in q) for i in q], [s[i] for i in q]) for q in questions[:2]])
    kd = np.mean([soft([t[i] for i in q], [s[i] for i in q]) for q in questions])
    got = distillation_loss(LOGITS.unsqueeze(1), teacher.unsqueeze(1), batch, alpha, tau, "listwise")
    assert got.shape == (1,) and got.item() == pytest.approx(alpha * hard + (1 - alpha) * tau**2 * kd, rel=1e-6)
    # α = 1 is the listwise label loss; a teacher equal to the student adds nothing.
    one = distillation_loss(LOGITS.unsqueeze(1), teacher.unsqueeze(1), batch, 1.0, tau, "listwise")
    assert one.item() == pytest.approx(label_loss(LOGITS, batch, "listwise").item(), rel=1e-6)
    same = distillation_loss(LOGITS.unsqueeze(1), LOGITS.unsqueeze(1), batch, 0.0, tau, "listwise")
    assert same.item() == pytest.approx(0.0, abs=1e-6)
    # Pointwise: the mean over rows of Eq. 1 per pair.
    pointwise = distillation_loss(LOGITS.unsqueeze(1), teacher.unsqueeze(1), batch, alpha, tau, "pointwise")
    assert pointwise.item() == pytest.approx(pointwise_distillation(LOGITS, teacher, LABELS, alpha, tau).mean().item())


def test_question_batches_hold_whole_questions_and_every_row_once():
    rng = np.random.default_rng(0)
    for trial in range(100):
        n = int(rng.integers(1, 25))
        sizes = rng.integers(1, 40, n)
        codes = rng.permutation(np.repeat(np.arange(n) * 3, sizes))
        batch_size = int(rng.integers(1, 50))
        parts = question_bucket_batches(rng.integers(5, 90, len(codes)), codes, batch_size, np.random.default_rng(trial))
        assert len(parts) == min(n, math.ceil(len(codes) / batch_size))  # whatever the draw
        assert sorted(np.concatenate(parts).tolist()) == list(range(len(codes)))
        owners = [set(codes[p]) for p in parts]
        assert all(owners) and sum(map(len, owners)) == n  # no question in two batches


def estimators(tokenizer, X, y):
    """One small estimator of every transformer class that trains on labels, at ``loss="listwise"``."""
    from as2rank.transformer.cascade import CascadeTransformer
    from as2rank.transformer.cerberus import Cerberus, DistilledRanker
    from as2rank.transformer.ranker import TransformerRanker
    from tests.test_cerberus import teachers_for

    teachers = teachers_for(X, y)
    return {
        "TransformerRanker": small(TransformerRanker, "bert", tokenizer, loss="listwise"),
        "CascadeTransformer": small(CascadeTransformer, "bert", tokenizer, loss="listwise", exit_sampling="all"),
        "Cerberus": small(Cerberus, "bert", tokenizer, teachers=teachers, body_layers=4, head_layers=2,
                          loss="listwise"),
        "DistilledRanker": small(DistilledRanker, "bert", tokenizer, teachers=teachers, loss="listwise"),
    }


@pytest.mark.parametrize("name", ["TransformerRanker", "CascadeTransformer", "Cerberus", "DistilledRanker",
                                  "ContextConcat", "ContextMWA", "ContextEnsemble"])
def test_listwise_training_batches_never_split_a_question(name, tokenizer, monkeypatch):
    if name.startswith("Context"):
        from as2rank.transformer.context import rankers
        from as2rank.transformer.context.features import ContextExtractor
        from tests import test_context

        X, y = test_context.synthetic()
        X = ContextExtractor(max_global_sentences=2, max_global_tokens=12).fit_transform(X)
        est = test_context.small(getattr(rankers, name), tokenizer, loss="listwise")
    else:
        X, y = synthetic(n_questions=12)
        X = X.assign(teacher_score=np.random.default_rng(0).normal(size=len(X)) + 2 * y)  # a teacher's column
        est = estimators(tokenizer, X, y)[name]
    batches, tensors, original_split, original_tensors = [], [], Shard.split, predict.batch_tensors

    def split(self, units, questions, sizes=None):  # a training batch's rows (one process: all of them)
        rows, real = original_split(self, units, questions, sizes)
        batches.append(np.asarray(rows))
        return rows, real

    def spy(encoded, rows):
        if sys._getframe(1).f_code.co_filename.endswith("training.py"):  # the training batches' tensors only
            tensors.append(np.asarray(rows))
        return original_tensors(encoded, rows)

    monkeypatch.setattr(Shard, "split", split)
    monkeypatch.setattr(predict, "batch_tensors", spy)
    est.set_params(reuse_fit=False).fit(X, y)
    sizes = X.groupby("qid").size()
    # The ensemble's two encoders train first, listwise too.
    members = getattr(est, "member_histories_", {}).values()
    assert len(batches) == est.history_.n_steps + sum(h.n_steps for h in members) > 2
    for rows in batches:
        counts = X.iloc[rows].groupby("qid").size()
        assert (counts == sizes[counts.index]).all()  # every question whole
    # On the CPU each batch's forward runs in parts of at most CHUNK_ROWS rows: together, the batch's rows.
    assert max(map(len, tensors)) <= CHUNK_ROWS
    parts = iter(tensors)
    for rows in batches:
        taken = []
        while len(taken) < len(rows):
            taken += next(parts).tolist()
        assert sorted(taken) == sorted(rows.tolist())
    assert next(parts, None) is None


def test_length_chunks_sort_by_length_and_take_every_row_once():
    rng = np.random.default_rng(0)
    for _ in range(50):
        lengths = rng.integers(3, 120, int(rng.integers(1, 70)))
        chunks = length_chunks(lengths, 8)
        assert len(chunks) == math.ceil(len(lengths) / 8) and max(map(len, chunks)) <= 8
        order = np.concatenate(chunks)
        assert sorted(order.tolist()) == list(range(len(lengths)))
        assert (np.diff(lengths[order]) >= 0).all()  # shortest first: each part pads to little
    # WikiQA-like: one long candidate among short ones pads only its own part.
    lengths = np.array([12, 90, 14, 13, 15, 11, 16, 12, 14, 13])
    padded = sum(len(c) * lengths[c].max() for c in length_chunks(lengths, 4))
    assert padded == 4 * 13 + 3 * 14 + 3 * 90 < len(lengths) * 90  # parts of 4, 3, 3 rows


@pytest.mark.parametrize("name", ["TransformerRanker", "CascadeTransformer", "Cerberus", "DistilledRanker"])
def test_a_listwise_batch_run_in_parts_has_the_loss_and_gradients_of_the_whole(name, tokenizer):
    """The forward pass of a listwise batch taken part by part, each part padded to its own longest row, and
    the outputs put back in row order: the same loss and gradients as the whole batch (no dropout)."""
    X, y = synthetic(n_questions=6)
    X = X.assign(teacher_score=np.random.default_rng(0).normal(size=len(X)) + 2 * y)
    est = estimators(tokenizer, X, y)[name].set_params(reuse_fit=False, epochs=1).fit(X, y)
    module = est.model_.eval()  # no dropout: the two passes see the same network
    encoded = est._encode(X)
    rows = np.arange(len(X))
    labels = torch.from_numpy((y > 0).astype(np.float32))
    group = torch.from_numpy(np.unique(X["qid"], return_inverse=True)[1])
    # Distillation: any teacher logits will do, one column per teacher.
    targets = {"teacher_logits": torch.randn(len(X), len(est.teachers), generator=torch.Generator().manual_seed(0))} \
        if name in ("Cerberus", "DistilledRanker") else {}
    extra = {**targets, "labels": labels, "group": group, "step": 0, "draw": 0.5}
    whole = {**predict.batch_tensors(encoded, rows), **extra}
    pieces = length_chunks(encoded["lengths"], 3)
    assert len({int(encoded["lengths"][p].max()) for p in pieces}) > 1  # the parts pad to different widths
    chunked = {**extra, "chunks": [{**predict.batch_tensors(encoded, p), **{k: v[p] for k, v in targets.items()},
                                    "step": 0, "draw": 0.5} for p in pieces],
               "restore": torch.from_numpy(np.argsort(np.concatenate(pieces)))}

    def loss_and_grads(batch):
        module.zero_grad()
        loss = est.compute_loss(module, batch, est.get_loss())
        loss.backward()
        return float(loss.detach()), [p.grad.clone() for p in module.parameters() if p.grad is not None]

    (a, grads_a), (b, grads_b) = loss_and_grads(whole), loss_and_grads(chunked)
    assert b == pytest.approx(a, rel=1e-5) and a > 0
    assert len(grads_a) == len(grads_b) > 0
    for g, h in zip(grads_a, grads_b):
        torch.testing.assert_close(h, g, rtol=1e-4, atol=1e-6)

"""One training run of a transformer estimator on validated data: the hold-out of dev questions, the batches
(length-bucketed, sharded across processes), the dev evaluation and the one training loop
(:func:`as2rank.neural.train`), then the int8 calibration from the weights just trained."""

from __future__ import annotations

import math

import numpy as np

from ..data import holdout_questions
from ..early_stopping import holdout_fraction
from ..metrics import mean_average_precision

__all__ = ["train_estimator"]

#: Rows per part of a listwise batch's forward pass (``length_chunks``), and the devices that run it in parts: a
#: CPU's time grows with the tokens it runs; a GPU's, on batches this small, with the kernels it launches.
CHUNK_ROWS = 8
CHUNK_DEVICES = ("cpu",)


def train_estimator(est, X, y, index, targets, rng, setup, dev=None, state=None):
    """Run the training loop on validated data and its ``_row_targets``: ``fit`` (``state=None``; an
    optional dev set) or one ``partial_fit`` call (one pass, continuing ``state``). Returns the history and the
    int8 copy's activation ranges from the weights just trained (None for a module that is not exported)."""
    import torch

    from ..neural import train
    from ..neural.predict import batch_tensors
    from ..neural.batching import length_bucket_batches, length_chunks, question_bucket_batches
    from ..neural.distributed import LocalBatch
    from ..neural.onnx.copies import INT8_COPIES

    device, shard = setup.device, setup.shard
    module = est.model_
    est._set_trainable(module)
    INT8_COPIES.forget(module)  # the new weights need their own int8 copy
    encoded = est._encode(X)
    train_rows = np.arange(len(X))
    fraction = holdout_fraction(est, index, y)
    if state is None and dev is None and fraction is not None:
        is_dev = holdout_questions(index, y, fraction, rng)
        if is_dev.all():
            raise ValueError("validation_fraction leaves no training question; lower it.")
        dev_rows = np.flatnonzero(is_dev)
        train_rows = np.flatnonzero(~is_dev)
        dev_enc = {k: v[dev_rows] for k, v in encoded.items()}
        dev = (None, y[dev_rows], index.take(dev_rows))
    elif dev is not None:
        dev_enc = est._encode(dev[0])

    labels = torch.from_numpy((y > 0).astype(np.float32))
    targets = {k: torch.as_tensor(v) for k, v in targets.items()}
    lengths, codes = encoded["lengths"][train_rows], index.codes[train_rows]
    # A listwise loss compares a question's candidates with each other: its batches hold whole questions.
    listwise = est.loss == "listwise"
    steps = math.ceil(len(train_rows) / est.batch_size)
    if listwise:
        steps = min(steps, len(np.unique(codes)))

    # The losses' draws come from their own stream, so they leave the batch order as it is.
    draws = rng.spawn(1)[0]
    chunked = listwise and device.type in CHUNK_DEVICES

    def batches(epoch):
        parts = (question_bucket_batches(lengths, codes, est.batch_size, rng) if listwise
                 else length_bucket_batches(lengths, est.batch_size, rng))
        for i, part in enumerate(parts):
            # Numbered and drawn for the global batch: the same in every process.
            step, draw = epoch * steps + i, float(draws.random())
            rows, real = shard.split(train_rows[part], codes[part])
            per_row = {k: v[rows] for k, v in targets.items()}
            if chunked:
                pieces = length_chunks(encoded["lengths"][rows], CHUNK_ROWS)
                batch = {"chunks": [{**batch_tensors(encoded, rows[p]), **{k: v[p] for k, v in per_row.items()},
                                     "step": step, "draw": draw} for p in pieces],
                         "restore": torch.from_numpy(np.argsort(np.concatenate(pieces)))}
            else:
                batch = batch_tensors(encoded, rows)
            batch.update(per_row, labels=labels[rows], step=step, draw=draw)
            if listwise:  # each row's question, numbered within the batch
                batch["group"] = torch.from_numpy(np.unique(index.codes[rows], return_inverse=True)[1])
            yield LocalBatch(batch, len(rows) if real else 0)

    def objective(module, batch):
        if "chunks" not in batch:
            return est._loss(module, batch)
        outputs = torch.cat([est._outputs(module, chunk) for chunk in batch["chunks"]])
        return est._criterion(outputs[batch["restore"]], batch)

    evaluate = None
    if dev is not None:
        from ..neural.predict import no_progress, predict_logits

        dev_y, dev_index = dev[1], dev[2]
        # Resolved here: the loop calls back into the estimator only through its loss.
        eval_tokens, eval_dtype = est._batch_tokens(device), est._compute_dtype(device)

        def evaluate(m):
            # The dev MAP ranks by the module's output, averaged over its heads where it has several.
            scores = predict_logits(m, dev_enc, device, batch_tokens=eval_tokens, dtype=eval_dtype,
                                    progress=no_progress)
            return mean_average_precision(dev_y, scores.mean(axis=1) if scores.ndim == 2 else scores, dev_index)

    history = train(
        module,
        batches,
        objective,
        epochs=est.epochs if state is None else 1,
        steps_per_epoch=steps,
        learning_rate=est.learning_rate,
        device=device,
        optimizer="adamw",
        weight_decay=est.weight_decay,
        schedule="linear",
        warmup=est.warmup,
        max_grad_norm=est.max_grad_norm,
        verbose=est.verbose,
        desc=type(est).__name__,
        evaluate=evaluate,
        eval_every=est.eval_every,
        patience=est.patience if evaluate is not None else None,
        precision=est._compute_dtype(device, training=True),
        lr_multipliers={name: est.head_lr_multiplier for name in est._head_modules},
        accelerator=setup.accelerator,
        state=state,
    )
    if not getattr(module, "onnx_exportable", False):
        return history, None
    # The fixed input ranges of the int8 copy (static quantization), from the weights just trained.
    from ..neural.onnx.calibration import activation_ranges, calibration_rows

    return history, activation_ranges(module, encoded, calibration_rows(train_rows), device,
                                      previous=getattr(est, "activation_ranges_", None) if state else None)

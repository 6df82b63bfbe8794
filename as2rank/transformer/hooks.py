"""The training hooks of the transformer estimators: what ``fit`` and ``partial_fit`` run, one documented
method per piece, that a family member overrides where it trains differently.

:meth:`TrainingHooks.fit_loop` holds out the dev questions, encodes the rows, and hands the one training loop
(:func:`as2rank.neural.train`) the module, the batches of :meth:`~TrainingHooks.get_batches`, the loss of
:meth:`~TrainingHooks.compute_loss` (the loss object of :meth:`~TrainingHooks.get_loss` on
:meth:`~TrainingHooks.forward_outputs`) and early stopping on :meth:`~TrainingHooks.evaluate`; it returns what
training learned beyond the weights, and ``fit`` sets the fitted attributes. Importing this module does not
import torch.
"""

from __future__ import annotations

import math

import numpy as np

from ..data import holdout_questions
from ..early_stopping import holdout_fraction
from ..metrics import mean_average_precision

__all__ = ["CHUNK_DEVICES", "CHUNK_ROWS", "TrainingHooks"]

#: Rows per part of a listwise batch's forward pass (``length_chunks``), and the devices that run it in parts: a
#: CPU's time grows with the tokens it runs; a GPU's, on batches this small, with the kernels it launches.
CHUNK_ROWS = 8
CHUNK_DEVICES = ("cpu",)


class TrainingHooks:
    """The training steps of :class:`~as2rank.transformer.scaffold._TransformerEstimator`, one method each.

    skorch's shape: :meth:`fit_loop` runs the loop with :meth:`get_batches`, :meth:`compute_loss` and
    :meth:`evaluate`; a class changes a step by overriding its method (the cascade's
    :meth:`forward_outputs` returns every exit, the distilled students' :meth:`get_loss` compares with their
    teachers).
    """

    def get_loss(self):
        """The loss object of this fit: ``loss(outputs, batch) -> scalar tensor``, the label loss of ``loss``
        (``as2rank.neural.losses.LABEL_LOSSES``). Its ``by_question`` says whether batches hold whole
        questions."""
        from ..neural.losses import LABEL_LOSSES

        return LABEL_LOSSES[self.loss]

    def forward_outputs(self, module, batch):
        """What the loss reads of the module for a batch, one row per batch row (the logits; a class with several
        per row, such as exits, returns them as columns). Rows do not see each other here, so a batch's rows
        may run in parts (:func:`~as2rank.neural.batching.length_chunks`) whose outputs are joined.

        ``batch`` holds the batch's token tensors, ``labels``, the per-row ``_row_targets`` and two entries
        for losses that vary between batches: ``step``, the batch's number within this ``fit`` or
        ``partial_fit`` call (0, 1, ... over its epochs), and ``draw``, a uniform number in [0, 1) from the
        fit's seeded generator (the same in every process of a distributed fit)."""
        return module(batch)

    def compute_loss(self, module, batch, loss):
        """The scalar training loss of one batch: ``loss`` (:meth:`get_loss`) of :meth:`forward_outputs`, over
        the parts of a batch that :meth:`get_batches` cut into ``chunks`` put back in the batch's row order."""
        if "chunks" not in batch:
            return loss(self.forward_outputs(module, batch), batch)
        import torch

        outputs = torch.cat([self.forward_outputs(module, chunk) for chunk in batch["chunks"]])
        return loss(outputs[batch["restore"]], batch)

    def get_batches(self, encoded, y, index, targets, rows, *, by_question, rng, shard, chunked):
        """The training batches over ``rows`` of the encoded data, and how many an epoch yields.

        Rows are bucketed by length (:func:`~as2rank.neural.batching.length_bucket_batches`), or by question
        with ``by_question`` (a listwise loss compares a question's candidates: its batches hold whole questions,
        and carry ``group``, each row's question numbered within the batch); the order is drawn from ``rng``.
        Each batch holds the token tensors, ``labels`` (1.0 where ``y > 0``), ``targets`` sliced to its rows,
        ``step`` and ``draw`` (see :meth:`forward_outputs`), and is this process's part of the global batch
        (``shard``). With ``chunked`` its forward pass runs in parts of ``CHUNK_ROWS`` rows of similar length.

        Returns
        -------
        batches : callable
            ``epoch -> iterator`` of :class:`~as2rank.neural.distributed.LocalBatch`.
        steps : int
            Batches per epoch.
        """
        import torch

        from ..neural.batching import length_bucket_batches, length_chunks, question_bucket_batches
        from ..neural.distributed import LocalBatch
        from ..neural.predict import batch_tensors

        labels = torch.from_numpy((y > 0).astype(np.float32))
        targets = {k: torch.as_tensor(v) for k, v in targets.items()}
        lengths, codes = encoded["lengths"][rows], index.codes[rows]
        steps = math.ceil(len(rows) / self.batch_size)
        if by_question:
            steps = min(steps, len(np.unique(codes)))
        # The losses' draws come from their own stream, so they leave the batch order as it is.
        draws = rng.spawn(1)[0]

        def batches(epoch):
            parts = (question_bucket_batches(lengths, codes, self.batch_size, rng) if by_question
                     else length_bucket_batches(lengths, self.batch_size, rng))
            for i, part in enumerate(parts):
                # Numbered and drawn for the global batch: the same in every process.
                step, draw = epoch * steps + i, float(draws.random())
                local, real = shard.split(rows[part], codes[part])
                per_row = {k: v[local] for k, v in targets.items()}
                if chunked:
                    pieces = length_chunks(encoded["lengths"][local], CHUNK_ROWS)
                    batch = {"chunks": [{**batch_tensors(encoded, local[p]), **{k: v[p] for k, v in per_row.items()},
                                         "step": step, "draw": draw} for p in pieces],
                             "restore": torch.from_numpy(np.argsort(np.concatenate(pieces)))}
                else:
                    batch = batch_tensors(encoded, local)
                batch.update(per_row, labels=labels[local], step=step, draw=draw)
                if by_question:
                    batch["group"] = torch.from_numpy(np.unique(index.codes[local], return_inverse=True)[1])
                yield LocalBatch(batch, len(local) if real else 0)

        return batches, steps

    def evaluate(self, module, encoded, y, index, device) -> float:
        """The validation score of ``module`` during training: the MAP of its output on the encoded dev rows
        (averaged over its heads where it has several), predicted at the estimator's precision and batch size."""
        from ..neural.predict import no_progress, predict_logits

        scores = predict_logits(module, encoded, device, batch_tokens=self._batch_tokens(device),
                                dtype=self._compute_dtype(device), progress=no_progress)
        return mean_average_precision(y, scores.mean(axis=1) if scores.ndim == 2 else scores, index)

    def fit_loop(self, X, y, index, targets, rng, setup, dev=None, state=None) -> tuple:
        """Train ``model_`` on validated data: ``fit`` (``state=None``; ``dev``, the checked ``eval_set``, or a
        ``validation_fraction`` of the training questions held out here) or one ``partial_fit`` pass
        (continuing ``state``). ``targets`` are the ``_row_targets`` of the rows.

        Returns
        -------
        history : TrainingHistory
        ranges : dict or None
            The int8 copy's activation ranges from the weights just trained (None for a module that is not
            exported).
        """
        from ..neural import EarlyStopping, train
        from ..neural.onnx.copies import INT8_COPIES

        device = setup.device
        module = self.model_
        self._set_trainable(module)
        INT8_COPIES.forget(module)  # the new weights need their own int8 copy
        encoded = self._encode(X)
        rows = np.arange(len(X))
        fraction = holdout_fraction(index, y, validation_fraction=self.validation_fraction,
                                    early_stopping=self.early_stopping, auto=self._auto_holdout)
        if state is None and dev is None and fraction is not None:
            is_dev = holdout_questions(index, y, fraction, rng)
            if is_dev.all():
                raise ValueError("validation_fraction leaves no training question; lower it.")
            dev_rows = np.flatnonzero(is_dev)
            rows = np.flatnonzero(~is_dev)
            dev_enc = {k: v[dev_rows] for k, v in encoded.items()}
            dev = (None, y[dev_rows], index.take(dev_rows))
        elif dev is not None:
            dev_enc = self._encode(dev[0])
        loss = self.get_loss()
        batches, steps = self.get_batches(encoded, y, index, targets, rows, by_question=loss.by_question, rng=rng,
                                          shard=setup.shard, chunked=loss.by_question and device.type in CHUNK_DEVICES)
        callbacks = []
        if dev is not None:
            def evaluate(m):
                return self.evaluate(m, dev_enc, dev[1], dev[2], device)

            callbacks.append(EarlyStopping(evaluate, self.patience, every=self.eval_every))

        def compute_loss(m, batch):
            return self.compute_loss(m, batch, loss)

        history = train(
            module,
            batches,
            compute_loss,
            epochs=self.epochs if state is None else 1,
            steps_per_epoch=steps,
            learning_rate=self.learning_rate,
            device=device,
            optimizer="adamw",
            weight_decay=self.weight_decay,
            schedule="linear",
            warmup=self.warmup,
            max_grad_norm=self.max_grad_norm,
            verbose=self.verbose,
            desc=type(self).__name__,
            callbacks=callbacks,
            precision=self._compute_dtype(device, training=True),
            lr_multipliers={name: self.head_lr_multiplier for name in self._head_modules},
            accelerator=setup.accelerator,
            state=state,
        )
        if not getattr(module, "onnx_exportable", False):
            return history, None
        # The fixed input ranges of the int8 copy (static quantization), from the weights just trained.
        from ..neural.onnx.calibration import activation_ranges, calibration_rows

        return history, activation_ranges(module, encoded, calibration_rows(rows), device,
                                          previous=getattr(self, "activation_ranges_", None) if state else None)

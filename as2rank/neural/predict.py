"""The one batched prediction loop of the neural estimators (:func:`predict_batches`) and its per-row use by
the cross-encoders (:func:`predict_logits`).

Every estimator's ``predict`` goes through :func:`predict_batches`: it says how its rows are batched (by
token budget, by question), how a batch's inputs are laid out on the device and what one batch computes; the
loop runs the batches without gradients under one autocast context (each weight cast to the autocast dtype
once per call), behind the progress bar, and gathers the outputs in row order. On a GPU the loop lays out the
next batches (gathering rows, pinned host memory, non-blocking copies) in a background thread while the device
computes the current one; on the CPU, where one set of cores is both host and device, it does not
(``prefetch``).
"""

from __future__ import annotations

import contextlib
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Callable

import numpy as np
import torch

from .backbone import encoder_states, pool
from .batching import token_budget_batches
from .devices import autocast, to_device
from .distributed import is_main_process

__all__ = ["PREFETCH", "Predictor", "batch_tensors", "default_prefetch", "device_batch", "no_progress", "predict_batches",
           "predict_outputs", "progress_bar",
           "predict_logits", "sentence_embeddings"]

#: Outputs kept on the device before :func:`predict_batches` reads them (16M values: 64 MiB in float32).
PENDING_VALUES = 1 << 24
#: Batches laid out ahead of the one computing, on a GPU (:func:`predict_batches`' ``prefetch``).
PREFETCH = 2


def default_prefetch(device) -> int:
    """Batches :func:`predict_batches` lays out ahead by default: :data:`PREFETCH` on a GPU, none on the CPU
    (its cores compute the batches; a thread laying out the next one only competes with them)."""
    return PREFETCH if torch.device(device).type == "cuda" else 0


def no_progress(batches, n_batches: int, desc: str):
    """The ``progress`` of a loop that shows no bar: the batches themselves."""
    return batches


def progress_bar(verbose: bool, prefix: str = "") -> Callable:
    """The ``progress`` of an estimator's prediction loop: with ``verbose``, a tqdm bar over the batches labelled
    ``prefix`` and the loop's ``desc``, in the main process only (under a launcher every process predicts; one bar
    is enough); else :func:`no_progress`."""
    if not (verbose and is_main_process()):
        return no_progress

    def bar(batches, n_batches: int, desc: str):
        from tqdm.auto import tqdm

        return tqdm(batches, total=n_batches, desc=f"{prefix}{desc}", unit="batch")

    return bar


def predict_batches(batches, run, n_rows: int, *, device, dtype, progress, desc: str = "predict", prepare=None,
                    prefetch: int | None = None) -> np.ndarray:
    """Run ``run`` on every batch and gather its outputs by row.

    Parameters
    ----------
    batches : sequence
        What ``prepare`` (or ``run``, without it) takes, one item per batch.
    run : callable
        ``run(batch)`` returns ``(rows, out)``: the indices of the rows the batch scores and their outputs,
        a tensor or array of shape (len(rows), ...). With ``prepare``, ``run`` takes what ``prepare`` returns.
    n_rows : int
        Rows in all.
    device : torch.device
    dtype : torch.dtype
        Autocast dtype (``torch.float32``: none).
    progress : callable
        ``progress(batches, n_batches, description)`` returns an iterable over the batches (a progress bar
        or the batches themselves).
    desc : str, default="predict"
        The progress bar's description.
    prepare : callable, default=None
        ``prepare(batch)``: the host's part of a batch (laying out its inputs and starting their copy to the
        device), which must not depend on the batches before it. None: ``run`` takes the batches as they are.
    prefetch : int, default=None
        Batches ``prepare`` runs ahead of ``run``, in a background thread (0: in turn with ``run``). None:
        :func:`default_prefetch` of ``device``. ``run`` sees the same inputs either way, so the outputs are the
        same bits.

    Returns
    -------
    ndarray of float64 of shape (n_rows, ...)
        Each row's output; NaN for rows no batch scored.
    """
    rows, values, pending = [], [], []
    n_pending = 0

    def read():
        # One device-to-host transfer for every output not yet read.
        nonlocal n_pending
        values.append(torch.cat([out.float() for out in pending]).cpu().numpy())
        pending.clear()
        n_pending = 0

    prefetch = default_prefetch(device) if prefetch is None else int(prefetch)
    # ``no_grad`` rather than ``inference_mode``: autocast then keeps the lower-precision copy of each weight for
    # the whole call (its cast cache skips inference mode), where it would cast every weight again in every
    # batch; the copies are the same values, so the outputs are the same bits either way.
    with torch.no_grad(), autocast(device, dtype), _prepared(batches, prepare, prefetch) as prepared:
        for batch in progress(prepared, len(batches), desc):
            batch_rows, out = run(batch)
            rows.append(np.asarray(batch_rows))
            if not isinstance(out, torch.Tensor):
                if pending:  # keep the values in the order of their rows
                    read()
                values.append(np.asarray(out))
                continue
            # Tensors stay where ``run`` left them, so that a GPU never idles while the next batch is prepared
            # and launched; they are read once per call (or per PENDING_VALUES values, bounding device memory).
            pending.append(out)
            n_pending += out.numel()
            if n_pending >= PENDING_VALUES:
                read()
    if pending:
        read()
    if not rows:
        return np.full(n_rows, np.nan)
    values = np.concatenate(values)
    scores = np.full((n_rows, *values.shape[1:]), np.nan)
    scores[np.concatenate(rows)] = values
    return scores


@contextlib.contextmanager
def _prepared(batches, prepare, prefetch: int):
    """The batches through ``prepare``: in turn, or up to ``prefetch`` ahead in a background thread (whose
    pending work is cancelled and awaited when the loop ends early, an error say)."""
    if prepare is None:
        yield batches
        return
    if prefetch <= 0:
        yield map(prepare, batches)
        return
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="as2rank-prefetch") as pool:
        ahead = deque()

        def ordered():
            for batch in batches:
                ahead.append(pool.submit(prepare, batch))
                if len(ahead) > prefetch:
                    yield ahead.popleft().result()
            while ahead:
                yield ahead.popleft().result()

        try:
            yield ordered()
        finally:
            for future in ahead:
                future.cancel()


def device_batch(encoded: dict, rows, device) -> dict:
    """The tensors of ``rows`` of ``encoded`` (``as2rank.neural.predict.batch_tensors``) on ``device``: on a
    GPU from pinned host memory with non-blocking copies, so that laying out the next batch overlaps the
    device's work."""
    batch = batch_tensors(encoded, rows)
    if torch.device(device).type == "cuda":
        batch = {k: v.pin_memory() if isinstance(v, torch.Tensor) else v for k, v in batch.items()}
    return to_device(batch, device)


def predict_logits(module, encoded: dict, device, *, batch_tokens: int, dtype, progress,
                   prefetch: int | None = None) -> np.ndarray:
    """The module's logit(s) for every encoded row, in row order (one per row, or one per head of a
    multi-head module).

    Rows are packed into batches of at most ``batch_tokens`` padded tokens (sorted by length, see
    :func:`~as2rank.neural.batching.token_budget_batches`).

    Parameters
    ----------
    module : torch.nn.Module
        Maps a batch to one logit per row; already on ``device``, in evaluation mode.
    encoded : dict of ndarray
        Token arrays of shape (n, width) and ``lengths`` of shape (n,) (as
        :func:`~as2rank.neural.tokens.encode_pairs` returns them).
    device : torch.device
    batch_tokens : int
        Padded tokens per batch.
    dtype : torch.dtype
        Autocast dtype (``torch.float32``: none).
    progress : callable
        As in :func:`predict_batches`.
    prefetch : int, default=None
        As in :func:`predict_batches`.

    Returns
    -------
    ndarray of float64 of shape (n,) or (n, n_heads)
        As the module's output per row.
    """
    n = len(encoded["lengths"])
    batches = token_budget_batches(np.ones(n, dtype=np.int64), encoded["lengths"], batch_tokens)
    return predict_batches(
        batches, lambda prepared: (prepared[0], module(prepared[1])), n, device=device, dtype=dtype,
        progress=progress, prepare=lambda rows: (rows, device_batch(encoded, rows, device)), prefetch=prefetch,
    )


@dataclass(frozen=True)
class Predictor:
    """What a fitted estimator predicts with on one device: the module (the fitted one, or its int8 copy),
    the device, the autocast dtype and the padded-token budget of a batch. Built by the transformer estimators'
    ``predictor()`` from their fitted state and their current inference parameters.

    Attributes
    ----------
    module : torch.nn.Module or int8 copy
    device : torch.device
    dtype : torch.dtype
        Autocast dtype (``torch.float32``: none).
    batch_tokens : int
        Padded tokens per batch.
    progress : callable
        ``progress(batches, n_batches, description)``: the progress bar, or :func:`no_progress`.
    prefetch : int, default=None
        Batches laid out ahead of the one computing (:func:`predict_batches`); None: :func:`default_prefetch`.
    """

    module: object
    device: torch.device
    dtype: torch.dtype
    batch_tokens: int
    progress: Callable = no_progress
    prefetch: int | None = None

    def logits(self, encoded: dict) -> np.ndarray:
        """The module's output for every ``encoded`` row (:func:`predict_logits`)."""
        return predict_logits(self.module, encoded, self.device, batch_tokens=self.batch_tokens, dtype=self.dtype,
                              progress=self.progress, prefetch=self.prefetch)


def batch_tensors(encoded: dict, rows: np.ndarray) -> dict:
    """Tensors of ``rows`` of an :func:`~as2rank.neural.tokens.encode_pairs` result, token arrays cut to the batch's longest row
    (per-row arrays, such as a ``prior`` logit, are taken whole).

    Entries named ``host_*`` stay NumPy arrays (their ``rows``): what a module must know of its batch before
    it runs, such as the shapes of its intermediate tensors, read without a device-to-host transfer (which
    on a GPU waits for all the work queued before it).
    """
    width = int(encoded["lengths"][rows].max())
    out = {}
    for key, value in encoded.items():
        if key.startswith("host_"):
            out[key] = value[rows]
        elif key != "lengths":
            out[key] = torch.from_numpy(np.ascontiguousarray(value[rows, :width] if value.ndim == 2 else value[rows]))
    return out


def sentence_embeddings(encoder, tokenizer, texts, *, device, dtype, max_length: int, batch_tokens: int,
                        progress, pooling: str = "mean") -> np.ndarray:
    """Unit-length sentence embeddings: each text's pooled token encodings (``as2rank.neural.backbone.pool``; by default their mean,
    padding excluded).

    Parameters
    ----------
    encoder : transformers.PreTrainedModel
        On ``device``, in evaluation mode (a sequence classifier's encoder is used, :func:`~as2rank.neural.backbone.encoder_states`).
    tokenizer : transformers.PreTrainedTokenizerBase
    texts : sequence of str
        Distinct texts (each is encoded as given).
    device : torch.device
    dtype : torch.dtype
        Autocast dtype (``torch.float32``: none); the means are taken in float32.
    max_length : int
        Texts are truncated to this many tokens.
    batch_tokens : int
        Padded tokens per batch (texts sorted by length, :func:`~as2rank.neural.batching.token_budget_batches`).
    progress : callable
        As in :func:`~as2rank.neural.predict.predict_batches`.
    pooling : {"mean", "cls"}, default="mean"
        How a text's token encodings become one vector (:func:`~as2rank.neural.backbone.native_pooling` gives a checkpoint's own).

    Returns
    -------
    ndarray of float64 of shape (n_texts, hidden_size)
    """
    tokens = tokenizer([str(t) for t in texts], truncation=True, max_length=int(max_length), padding="longest",
                       padding_side="right", return_tensors="np", return_token_type_ids=False,
                       return_attention_mask=True)
    ids, mask = tokens["input_ids"].astype(np.int64), tokens["attention_mask"].astype(np.int64)
    lengths = mask.sum(axis=1)

    def run(rows):
        width = int(lengths[rows].max())
        batch = {"input_ids": torch.from_numpy(ids[rows, :width]).to(device),
                 "attention_mask": torch.from_numpy(mask[rows, :width]).to(device)}
        pooled = pool(encoder_states(encoder, batch).float(), batch["attention_mask"], pooling)
        return rows, torch.nn.functional.normalize(pooled, dim=-1)

    batches = token_budget_batches(np.ones(len(ids), dtype=np.int64), lengths, batch_tokens)
    return predict_batches(batches, run, len(ids), device=device, dtype=dtype, progress=progress, desc="encode")


def predict_outputs(module: torch.nn.Module, run: Callable, encoded: dict, device, *, batch_tokens: int,
                    dtype) -> np.ndarray:
    """:func:`predict_logits` of ``run`` (``module`` or one of its methods) on the encoded rows, with ``module`` moved
    to ``device`` in evaluation mode for the call and put back where and how it was: outputs of a module in
    the middle of its fit (such as the pretrained encoder's segment cosines that start a lexical prior)."""
    home, training = next(module.parameters()).device, module.training
    module.to(device).eval()
    try:
        return predict_logits(run, encoded, device, batch_tokens=batch_tokens, dtype=dtype, progress=no_progress)
    finally:
        module.to(home).train(training)

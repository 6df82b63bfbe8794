"""The similarity feature of a lexical prior (``similarity_prior=True``): the cosine of a question's and a
candidate's sentence embeddings, each the mean of a frozen pretrained encoder's token encodings, as
sentence-transformers checkpoints such as the default all-MiniLM-L6-v2 were trained to compare sentences.

The encoder is the checkpoint the estimator starts from (its ``model`` and ``tokenizer``), without any
fine-tuning. A fit records their names and the digests of their files (:func:`similarity_source`; a model
loaded with ``from_pretrained`` keeps them, while its ``model`` names the fine-tuned encoder). The encoder is
loaded once per process, from files with those digests only: a process that finds the checkpoint's files
changed since the fit raises instead of giving the prior other similarities than those it was fitted on.
"""

from __future__ import annotations

import numpy as np
import torch

from ..neural.backbone import encoder_states, load_backbone, masked_mean
from ..neural.batching import token_budget_batches
from ..neural.fitcache import source_digests
from ..neural.predict import no_progress, predict_batches

__all__ = ["export_source", "pair_similarity", "similarity_source"]

#: Padded tokens per batch of sentences.
BATCH_TOKENS = 4096
#: ``(model, tokenizer)`` -> ``(digests, encoder, tokenizer)``: the encoders loaded in this process.
_LOADED: dict = {}


def similarity_source(model, tokenizer) -> dict:
    """What a fit records of the encoder behind the similarity feature: its names and the digests of its files.

    Parameters
    ----------
    model, tokenizer
        The estimator's ``model`` and ``tokenizer`` parameters.

    Returns
    -------
    dict
        ``{"model": model, "tokenizer": tokenizer, "digests": [str, str]}``
        (:func:`~as2rank.neural.fitcache.source_digests`).

    Raises
    ------
    ValueError
        If ``model`` (or ``tokenizer``) is not a name or path of files on disk: a config or a tokenizer object
        could not be loaded again to score new rows.
    """
    if not isinstance(model, str) or not (tokenizer is None or isinstance(tokenizer, str)):
        raise ValueError(
            "similarity_prior=True needs model= (and tokenizer=, when given) to name a checkpoint on disk (an "
            "alias, a local path or a downloaded Hugging Face id): the prior loads its pretrained encoder again "
            f"to score new rows, got model={type(model).__name__}, tokenizer={type(tokenizer).__name__}."
        )
    digests = source_digests(model, tokenizer)
    if digests is None:
        raise ValueError(f"similarity_prior=True: {model!r} resolves to no files on disk.")
    return {"model": model, "tokenizer": tokenizer, "digests": list(digests)}


def export_source(source: dict, folder) -> dict:
    """Copy the encoder of ``source`` (its verified files, loaded as prediction loads them) into ``folder`` of a model
    directory, and return the source that names it there: ``{"model": <folder's name>, "tokenizer": None,
    "digests": ...}``. A saved model then reads its similarities from its own directory, wherever it is loaded
    (:func:`as2rank.persistence.trust.resolve_references` resolves the name inside the directory)."""
    from pathlib import Path

    folder = Path(folder)
    encoder, tokenizer = _encoder(source)
    encoder.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return {"model": folder.name, "tokenizer": None, "digests": list(source_digests(str(folder), None))}


def _encoder(source: dict):
    """The encoder and tokenizer of ``source``. Loaded once per process, and only from files whose digests are
    those the fit recorded (checked before and after loading); once loaded, the weights in memory are the
    right ones whatever happens to the files, so later calls do not read them again."""
    key = (source["model"], source["tokenizer"])
    loaded = _LOADED.get(key)
    if loaded is None or loaded[0] != list(source["digests"]):
        if _digests(key) != list(source["digests"]):
            _refuse(source)
        # Loading may initialise weights the checkpoint lacks: keep the seeded stream of the fit that asks.
        with torch.random.fork_rng(devices=[]):
            encoder, tokenizer = load_backbone(*key)
        if _digests(key) != list(source["digests"]):  # the files changed while they were read
            _refuse(source)
        loaded = _LOADED[key] = (list(source["digests"]), encoder, tokenizer)
    return loaded[1], loaded[2]


def _digests(key) -> list | None:
    digests = source_digests(*key)
    return None if digests is None else list(digests)


def _refuse(source: dict):
    raise ValueError(
        f"The files of {source['model']!r} are not those the similarity prior was fitted with (they changed or "
        "are missing), so its similarities would differ from the ones its weights were fitted on. Put the "
        "original checkpoint back, or fit again."
    )


def pair_similarity(source: dict, questions, candidates, *, device, dtype, max_length: int) -> np.ndarray:
    """The cosine of each (question, candidate) pair's sentence embeddings.

    Each distinct text is encoded once (questions repeat over their candidates), truncated to ``max_length``
    tokens, in batches of at most ``BATCH_TOKENS`` padded tokens.

    Parameters
    ----------
    source : dict
        From :func:`similarity_source` at fit.
    questions, candidates : sequence of str
    device : torch.device
    dtype : torch.dtype
        Autocast dtype (``torch.float32``: none).
    max_length : int

    Returns
    -------
    ndarray of float64 of shape (n_pairs,)
    """
    encoder, tokenizer = _encoder(source)
    encoder = encoder.to(device)
    texts, inverse = np.unique(np.concatenate([np.asarray(questions, dtype=object),
                                               np.asarray(candidates, dtype=object)]), return_inverse=True)
    tokens = tokenizer([str(t) for t in texts], truncation=True, max_length=int(max_length), padding="longest",
                       return_tensors="np", return_token_type_ids=False, return_attention_mask=True)
    ids, mask = tokens["input_ids"].astype(np.int64), tokens["attention_mask"].astype(np.int64)
    lengths = mask.sum(axis=1)
    batches = token_budget_batches(np.ones(len(texts), dtype=np.int64), lengths, BATCH_TOKENS)

    def run(rows):
        width = int(lengths[rows].max())
        batch_mask = torch.from_numpy(mask[rows, :width]).to(device)
        hidden = encoder_states(encoder, {"input_ids": torch.from_numpy(ids[rows, :width]).to(device), "attention_mask": batch_mask})
        return rows, torch.nn.functional.normalize(masked_mean(hidden.float(), batch_mask), dim=-1)

    embeddings = predict_batches(batches, run, len(texts), device=device, dtype=dtype, progress=no_progress)
    n = len(np.asarray(questions))
    return np.einsum("ij,ij->i", embeddings[inverse[:n]], embeddings[inverse[n:]])

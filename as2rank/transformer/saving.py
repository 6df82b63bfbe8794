"""The transformer family's model directories: ``encoder/`` (a transformers model and its tokenizer),
``heads.safetensors`` and ``as2rank.json`` (the format of :mod:`as2rank.persistence`), registered with
:mod:`as2rank.persistence.registry` as the family's layout when this package is imported."""

from __future__ import annotations

import json
from pathlib import Path

from ..persistence import (HEADS_FILE, INT8_FOLDER, _check_class, _check_tensors, _load, _one_line, _read_safetensors,
                           _Reader, _Writer, _write_torch, open_model)
from ..persistence.registry import class_name, register_layout
from ..persistence.schema import check_fitted
from ..persistence.trust import resolve_references

__all__ = ["read_transformer", "write_transformer"]


def write_transformer(est, path) -> None:
    """Write a fitted transformer-family estimator: ``encoder/`` (the encoder and its tokenizer, loadable by
    ``transformers.AutoModel`` and usable as ``model=``), ``heads.safetensors`` and ``as2rank.json``. What its
    fitted state names outside the model (a similarity prior's pretrained encoder, unless packaged weights) is
    copied into the directory (``_export_attrs``), so that the directory loads anywhere on its own."""
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    est.model_.encoder.save_pretrained(path / "encoder")
    est.tokenizer_.save_pretrained(path / "encoder")
    if getattr(est, "pooling_", None) == "mean":
        # Say so the sentence-transformers way, so that pooling="auto" keeps it when the saved encoder is the
        # ``model=`` of a new estimator (TANDA's adapt step).
        (path / "encoder" / "1_Pooling").mkdir(exist_ok=True)
        (path / "encoder" / "1_Pooling" / "config.json").write_text(json.dumps({"pooling_mode_mean_tokens": True}))
    _write_torch({k: v for k, v in est.model_.state_dict().items() if not k.startswith("encoder.")}, path / HEADS_FILE)
    writer = _Writer(path, est, strict=True)
    params = {k: writer.encode(v, f"params.{k}") for k, v in est.get_params(deep=False).items() if k not in est._unsaved_params}
    writer.strict = False  # the fitted attributes may hold estimators (a lexical prior's features): subdirectories
    writer.write(class_name(est), params, {k: writer.encode(v, f"fitted.{k}") for k, v in est._export_attrs(path).items()})


def read_transformer(cls, path, params: dict, meta=None):
    """Load a transformer-family estimator written by :func:`write_transformer` (weights on the CPU; the
    ``device`` parameter moves them at prediction). ``meta`` None: ``path`` is opened and checked first
    (:func:`~as2rank.persistence.open_model`)."""
    from ..neural.backbone import load_backbone

    path = Path(path)
    if meta is None:
        meta = open_model(path)
        _check_class(meta, cls, path)
    if meta["fitted"] is None:  # an unfitted template (a step of a SequentialRanker): its parameters only
        return _load(cls, path, meta, params)
    unknown = sorted(set(params) - set(cls._get_param_names()))
    if unknown:
        raise ValueError(f"{cls.__name__} has no parameter {', '.join(unknown)}.")
    reader = _Reader(path)
    try:
        fitted = resolve_references(cls, reader.decode(meta["fitted"]), path)
        check_fitted(meta["class"], fitted, path / "as2rank.json")
        est = cls(**{**reader.decode(meta["params"]), "model": str(path / "encoder"), "tokenizer": None, **params})
        learnt = est._imported_attrs(fitted)
    except (KeyError, TypeError, AttributeError) as exc:
        raise ValueError(f"{path / 'as2rank.json'} does not describe a {cls.__name__} ({_one_line(exc)}).") from None
    from safetensors.torch import load_file

    heads = _read_safetensors(path / HEADS_FILE, load_file)
    _check_tensors(heads, path / HEADS_FILE)
    encoder, tokenizer = load_backbone(est.model)
    _check_tensors(encoder.state_dict(), path / "encoder")
    # The estimator's own state protocol (unpickling restores through it too) sets what was read: the fitted
    # attributes first, which the module is built from, then the module.
    est.__setstate__({**est.__getstate__(), **learnt, "tokenizer_": tokenizer})
    module = est._build_module(encoder)
    try:
        missing, unexpected = module.load_state_dict(heads, strict=False)
    except RuntimeError as exc:  # a tensor of the wrong shape
        raise ValueError(f"{path / HEADS_FILE} does not match a {cls.__name__}: {_one_line(exc)}") from None
    if unexpected or any(not k.startswith("encoder.") for k in missing):
        raise ValueError(f"{path / HEADS_FILE} does not match a {cls.__name__}: {unexpected or missing}.")
    est.__setstate__({**est.__getstate__(), "model_": module.eval()})
    if (path / INT8_FOLDER).is_dir():  # int8 graphs saved with the model: read where they match its weights
        from ..neural.onnx.copies import INT8_COPIES

        INT8_COPIES.attach_graphs(est.model_, path / INT8_FOLDER)
    return est


register_layout(("TransformerRanker", "CascadeTransformer", "Cerberus", "DistilledRanker", "ContextConcat",
                 "ContextEnsemble", "ContextMWA"), write_transformer, read_transformer)

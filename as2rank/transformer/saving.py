"""The transformer family's model directories: ``encoder/`` (a transformers model and its tokenizer),
``heads.safetensors`` and ``as2rank.json`` (the format of :mod:`as2rank.persistence`), registered with
``as2rank.persistence.registry`` as the family's layout when this package is imported, and the estimators'
``save_pretrained``/``from_pretrained`` (:class:`PretrainedIO`). Importing this module does not import torch."""

from __future__ import annotations

import json
from pathlib import Path

from sklearn.utils.validation import check_is_fitted

from ..persistence.checks import check_checkpoint, check_loaded_tokenizer, check_params, one_line_errors
from ..persistence.codec import (HEADS_FILE, INT8_FOLDER, Reader, Writer, check_class, check_tensors, open_model,
                                 read_estimator, read_safetensors, write_torch)
from ..persistence.formats import check_onnx_folder, one_line
from ..persistence.registry import class_name, register_layout
from ..persistence.schema import check_fitted
from ..persistence.trust import resolve_references
from ..params import CHECKPOINT_ALIASES, param_names
from .prior import PRIOR_ATTRS

__all__ = ["PretrainedIO", "read_transformer", "write_transformer"]


class PretrainedIO:
    """Hugging Face's ``save_pretrained``/``from_pretrained`` of a transformer estimator
    (:class:`~as2rank.transformer.scaffold._TransformerEstimator`), in the directory format of
    :mod:`as2rank.persistence`, and the fitted attributes written beside the weights."""

    #: Fitted attributes that :meth:`save_pretrained` writes beside the weights (with ``activation_ranges_`` and
    #: the prior's, where fitted) and loading sets back; a class adds those its module is built from.
    _saved_attrs = ("n_layers_",)
    #: Text columns the model reads (the rows an int8 copy is traced on have them; identical fits are keyed by them).
    _input_columns = ("question", "candidate")

    def save_pretrained(self, path, *, int8: bool = False, card=None, overwrite: bool = False) -> None:
        """Write the fitted model to a pickle-free directory (the format of :mod:`as2rank.persistence`).

        Layout: ``encoder/`` (the fine-tuned encoder and its tokenizer, loadable by
        ``transformers.AutoModel`` and usable as ``model=`` of a new estimator: the TANDA recipe's
        "transfer" output), ``heads.safetensors`` (the score heads), ``as2rank.json`` (format version,
        class, parameters and fitted attributes) and ``README.md`` (a model card: :mod:`as2rank.persistence.card`).
        The directory is written whole and replaces a previous model at ``path`` in one step (see
        :func:`as2rank.save <as2rank.persistence.save>`). Load with :meth:`from_pretrained` or
        :func:`as2rank.load <as2rank.persistence.load>`.
        Under ``accelerate launch``/``torchrun`` every process may call it: the main process writes, the
        others wait until the directory is complete.

        Parameters
        ----------
        path : str or pathlib.Path
        int8 : bool, default=False
            Also write ``onnx/``: the graphs that ``precision="int8"`` runs on ONNX Runtime, exported now
            (:func:`~as2rank.neural.onnx.runtime.write_int8_copy`). A process that loads the directory then
            predicts at int8 without exporting them, which takes seconds per graph. A loaded model uses them only
            if they were exported from its weights by the same as2rank; otherwise it exports again. Needs
            a model calibrated for int8 at fit and ``pip install as2rank[onnx]``.
        card : as2rank.persistence.card.ModelCardData, optional
            Training data and metrics for the model card, ``README.md``.
        overwrite : bool, default=False
            Also write into a non-empty directory that is not an as2rank model (see
            :func:`as2rank.save <as2rank.persistence.save>`).
        """
        from ..neural.distributed import is_main_process, wait_for_everyone
        from ..persistence import write_model

        check_is_fitted(self, "model_")
        if int8:
            from ..neural.onnx.runtime import onnx_available

            if not hasattr(self, "activation_ranges_"):
                raise ValueError(f"This {type(self).__name__} has no int8 calibration: its model cannot run on ONNX Runtime.")
            if not onnx_available():
                raise ImportError("int8=True exports to ONNX Runtime: pip install as2rank[onnx]")
        def write(folder):
            write_transformer(self, folder)
            if int8:
                from ..neural.onnx.runtime import write_int8_copy

                write_int8_copy(self._int8_copy_to_save(), folder / INT8_FOLDER)

        if is_main_process():
            write_model(self, path, write, card=card, overwrite=overwrite)
        wait_for_everyone()

    def _int8_copy_to_save(self):
        """The model's int8 copy on ONNX Runtime, traced on two made-up rows of the columns it reads (any rows
        give the same graphs), or read from the graphs it was loaded with."""
        import pandas as pd

        from ..neural.onnx.copies import INT8_COPIES

        columns = self._input_columns
        rows = pd.DataFrame({"qid": ["q", "q"], **{c: [f"A {c}.", f"Another, longer {c} text."] for c in columns}})
        encoded = self.encode(rows)
        from ..neural import torch_threads

        with torch_threads(self.n_threads):
            return INT8_COPIES.get(self.model_, onnx=True, encoded=encoded, ranges=self.activation_ranges_)

    @classmethod
    def from_pretrained(cls, path, **params):
        """Load an estimator written by :meth:`save_pretrained` (on the CPU; ``device`` applies at prediction).

        Parameters
        ----------
        path : str or pathlib.Path
        **params
            Parameters overriding the saved ones (e.g. ``device="cpu"``, ``alpha=0.3``).

        Returns
        -------
        estimator
            Fitted; its ``model`` parameter names the saved encoder, so ``warm_start`` or a fresh ``fit``
            continue from the adapted weights.
        """
        return one_line_errors(path, lambda: read_transformer(cls, path, params))

    def _optional_attrs(self) -> tuple:
        return ("activation_ranges_", *PRIOR_ATTRS)

    def _export_attrs(self, path) -> dict:
        """The fitted attributes :meth:`save_pretrained` writes into the model directory ``path``: ``_saved_attrs``,
        and the optional ones fitted. A similarity prior's pretrained encoder that is not packaged weights is
        copied into ``path/similarity`` and named so (:func:`~as2rank.transformer.similarity.export_source`)."""
        optional = {k: getattr(self, k) for k in self._optional_attrs() if getattr(self, k, None) is not None}
        source = optional.get("similarity_source_")
        if source is not None and not all(source.get(k) in (None, *CHECKPOINT_ALIASES) for k in ("model", "tokenizer")):
            from .similarity import export_source

            optional["similarity_source_"] = export_source(source, Path(path) / "similarity")
        return {**{k: getattr(self, k) for k in self._saved_attrs}, **optional}

    def _imported_attrs(self, attrs: dict) -> dict:
        """The fitted attributes of a saved model that this class restores (a KeyError when one of
        ``_saved_attrs`` is missing)."""
        return {**{k: attrs[k] for k in self._saved_attrs}, **{k: attrs[k] for k in self._optional_attrs() if k in attrs}}



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
    write_torch({k: v for k, v in est.model_.state_dict().items() if not k.startswith("encoder.")}, path / HEADS_FILE)
    writer = Writer(path, est, strict=True)
    params = {k: writer.encode(v, f"params.{k}") for k, v in est.get_params(deep=False).items() if k not in est._unsaved_params}
    writer.strict = False  # the fitted attributes may hold estimators (a lexical prior's features): subdirectories
    writer.write(class_name(est), params, {k: writer.encode(v, f"fitted.{k}") for k, v in est._export_attrs(path).items()})


def read_transformer(cls, path, params: dict, meta=None):
    """Load a transformer-family estimator written by :func:`write_transformer` (weights on the CPU; the
    ``device`` parameter moves them at prediction). ``meta`` None: ``path`` is opened and checked first
    (``as2rank.persistence.open_model``).

    Before transformers reads ``encoder/``, the folder is checked as a checkpoint
    (:func:`~as2rank.persistence.checks.check_checkpoint`: safetensors weights of the shapes its configuration
    implies, no remote code or Hub option, a tokenizer that fits the embeddings); once loaded, the tokenizer
    against the embedding matrix, the fitted depth against the encoder's, and the heads against the module the
    fitted attributes build (strictly); int8 graphs are used only once checked
    (:func:`~as2rank.persistence.formats.check_onnx_folder`)."""
    from ..neural.backbone import load_backbone

    path = Path(path)
    if meta is None:
        meta = open_model(path)
        check_class(meta, cls, path)
    if meta["fitted"] is None:  # an unfitted template (a step of a SequentialRanker): its parameters only
        return read_estimator(cls, path, meta, params)
    unknown = sorted(set(params) - set(param_names(cls)))
    if unknown:
        raise ValueError(f"{cls.__name__} has no parameter {', '.join(unknown)}.")
    reader = Reader(path)
    try:
        fitted = resolve_references(meta["class"], reader.decode(meta["fitted"]), path)
        check_fitted(meta["class"], fitted, path / "as2rank.json")
        est = cls(**{**reader.decode(meta["params"]), "model": str(path / "encoder"), "tokenizer": None, **params})
        learnt = est._imported_attrs(fitted)
    except (KeyError, TypeError, AttributeError) as exc:
        raise ValueError(f"{path / 'as2rank.json'} does not describe a {cls.__name__} ({one_line(exc)}).") from None
    from safetensors.torch import load_file

    heads = read_safetensors(path / HEADS_FILE, load_file)
    check_tensors(heads, path / HEADS_FILE)
    check_checkpoint(path / "encoder")
    encoder, tokenizer = load_backbone(est.model)
    check_tensors(encoder.state_dict(), path / "encoder")
    check_loaded_tokenizer(tokenizer, encoder.get_input_embeddings().weight.shape[0], path / "encoder")
    if est.model == str(path / "encoder"):  # the directory's own encoder (not one passed to the loader)
        _check_depth(learnt, encoder, path / "as2rank.json")
    # The estimator's own state protocol (unpickling restores through it too) sets what was read: the fitted
    # attributes first, which the module is built from, then the module.
    est.__setstate__({**est.__getstate__(), **learnt, "tokenizer_": tokenizer})
    module = est.build_module(encoder, vars(est))
    try:
        missing, unexpected = module.load_state_dict(heads, strict=False)
    except RuntimeError as exc:  # a tensor of the wrong shape
        raise ValueError(f"{path / HEADS_FILE} does not match a {cls.__name__}: {one_line(exc)}") from None
    if unexpected or any(not k.startswith("encoder.") for k in missing):
        raise ValueError(f"{path / HEADS_FILE} does not match a {cls.__name__}: {unexpected or missing}.")
    est.__setstate__({**est.__getstate__(), "model_": module.eval()})
    if (path / INT8_FOLDER).is_dir() and check_onnx_folder(path / INT8_FOLDER):
        # int8 graphs saved with the model: read where they match its weights
        from ..neural.onnx.copies import INT8_COPIES

        INT8_COPIES.attach_graphs(est.model_, path / INT8_FOLDER)
    # The parameters the directory saved (or the caller passed); those only fit reads (teachers) are not saved.
    saved = {*meta["params"], *params}
    check_params(est, path / "as2rank.json", {k: v for k, v in cls._parameter_constraints.items() if k in saved})
    return est


def _check_depth(fitted: dict, encoder, source) -> None:
    """The fitted attributes against the encoder saved beside them: no more layers than it has (a Cerberus's
    body; its head layers are in its heads), and a checkpoint's own head (``pooling_="classifier"``) exactly when
    it is a sequence classifier (otherwise the module would be built around a new, randomly initialised one)."""
    from ..neural.backbone import is_sequence_classifier

    depth = getattr(encoder.config, "num_hidden_layers", None)
    name = "body_layers_" if "body_layers_" in fitted else "n_layers_"
    if isinstance(depth, int) and fitted[name] > depth:
        raise ValueError(f"{source}: {name} is {fitted[name]}, but the encoder saved beside it has {depth} layers; the "
                         "model is damaged or was edited.")
    if (fitted.get("pooling_") == "classifier") != is_sequence_classifier(encoder):
        raise ValueError(f"{source}: pooling_ {fitted.get('pooling_')!r} does not fit the encoder saved beside it (a "
                         f"{type(encoder).__name__}); the model is damaged or was edited.")


register_layout(("TransformerRanker", "CascadeTransformer", "Cerberus", "DistilledRanker", "ContextConcat",
                 "ContextEnsemble", "ContextMWA"), write_transformer, read_transformer)

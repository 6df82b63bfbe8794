"""The Cascade Transformer (Soldaini & Moschitti, 2020): one encoder with early exits that drop candidates.

:class:`CascadeTransformer` has a classifier after several layers ("exits"); at inference each exit but the
last drops the lowest-scoring ``floor(α · k)`` of the ``k`` surviving candidates of every question, and
dropped rows are no longer computed. The torch-free parts (the drop rule, the scores of dropped rows, the
cost report, :func:`~as2rank.pruning.rules.simulate_cascade` and :func:`~as2rank.pruning.rules.tune_alpha`) live
in :mod:`as2rank.pruning.rules`.
"""

from __future__ import annotations

import math
from numbers import Integral

import numpy as np
from sklearn.utils.validation import check_is_fitted

from ..data import GroupIndex, check_X, ragged_arange
from ..params import Interval, Options, SequenceOf
from ..pruning.rules import DROP_RATIO_CONSTRAINTS, check_drop_ratios, cost_report, stage_scores
from .parameters import AUTO_BATCH_TOKENS
from .scaffold import _TransformerEstimator

__all__ = ["CascadeTransformer", "default_exits"]

#: Prediction runs the layers on length-sorted chunks of at most ``batch_tokens`` padded tokens, cut from groups
#: of whole questions (drops act per question) of at most this many times ``batch_tokens`` real tokens. Sorted
#: chunks pad far less than padding each question to its longest candidate, and larger groups leave fewer
#: part-filled chunks after each drop (the speed and cascade benchmarks measure both).
CHUNKS_PER_GROUP = 32

#: Values of ``CascadeTransformer(exit_sampling=...)``.
EXIT_SAMPLING = ("uniform", "all")


def default_exits(depth: int) -> tuple:
    """The paper's exits (4, 6, 8, 10, 12 of 12 layers) at the same proportions of ``depth`` layers.

    >>> default_exits(6)
    (2, 3, 4, 5, 6)
    """
    return tuple(sorted({max(1, math.floor(depth * p / 12 + 0.5)) for p in (4, 6, 8, 10, 12)}))


def _group_rows(index: GroupIndex, groups: np.ndarray):
    """Rows of ``groups`` (each group's rows in original order) and the batch-local group of each row."""
    sizes = index.sizes[groups]
    rows = index.order[np.repeat(index.starts[groups], sizes) + ragged_arange(sizes)]
    return rows, np.repeat(np.arange(len(groups)), sizes)


class CascadeTransformer(_TransformerEstimator):
    """Cascade Transformer (Soldaini & Moschitti, 2020, §4.3): early exits with per-question candidate drops.

    A classifier after each exit layer ρ(i) reads the mean of all token encodings of that layer (padding
    excluded) and is a 3-layer feed-forward network (hidden size = the model's, tanh, dropout 0.1).
    Training is multi-task: every mini-batch draws one exit uniformly at random (the last included) and
    back-propagates its loss (pointwise binary cross-entropy, or listwise: ``loss``) through all layers
    below, down to the embeddings (the paper's scheme, ``exit_sampling="uniform"``); ``exit_sampling="all"``
    instead trains every exit on every mini-batch (the mean of the exits' losses, one encoder pass), which gives
    each classifier five times the updates of a small fine-tuning budget (see ``exit_sampling``).

    At inference the candidates of a question go through the encoder together (several questions may share
    a batch); after each exit but the last the lowest-scoring ``floor(α · k)`` of the question's ``k``
    survivors are dropped and their hidden states sliced away, so later layers never compute them. With
    α=0.3 and 128 candidates, 90, 63, 45 and 32 candidates remain after the first four exits.

    Scores (see :mod:`as2rank.pruning.sequential`): rows reaching the last exit get its logit, rows dropped earlier are
    shifted below them by ``EXIT_GAP`` per missing exit, so ranks follow the cascade. ``predict(X,
    return_cost=True)`` also returns the cost report: the relative cost and the rows processed per layer.

    ``alpha`` and ``exit_layer`` act only at inference: they can be changed on a fitted model with
    ``set_params``, and with ``reuse_fit=True`` and an integer ``random_state``,
    ``GridSearchCV(CascadeTransformer(...), {"alpha": [0, .1, .2, .3]}, cv=GroupKFold(3))`` trains three
    models, not twelve (see :mod:`as2rank.neural.fitcache` for when this holds with ``n_jobs>1``).
    :func:`~as2rank.pruning.rules.tune_alpha` picks per-exit values on a dev set from one encoder pass.

    Defaults measured: ``docs/benchmarks/defaults-cascade.md`` (the training budget and ``segment_similarity``,
    scored at α=0); ``docs/benchmarks/cascade.md`` compares the ``exit_sampling`` schemes.

    Parameters
    ----------
    model : str or transformers.PretrainedConfig, default="minilm-l6"
        A BERT-style encoder (BERT, MiniLM, RoBERTa, XLM-R, ELECTRA) or MPNet (``"mpnet-base"``): an alias,
        local path, Hugging Face id or a config for a random encoder.
    tokenizer : None, str or tokenizer, default=None
        Required when ``model`` is a config.
    exits : sequence of int, default=None
        Increasing 1-based exit layers ρ(i); the encoder is cut after the last. ``None``: the paper's
        4, 6, 8, 10, 12 for 12 layers and the same proportions otherwise (2, 3, 4, 5, 6 for 6 layers).
    alpha : float or sequence of float, default=0.0
        Drop ratio in [0, 1), one value for all pruning exits or one per exit but the last.
    exit_layer : int, default=None
        Score with the classifier of this exit layer only (no drop): the paper's "CT (4 layers, α=0)" rows.
    exit_sampling : {"uniform", "all"}, default="all"
        Which exits learn from a mini-batch. ``"all"``: every exit, loss = mean of the exits' losses, one
        pass through all layers. ``"uniform"``: one exit drawn uniformly at random (the paper, §4.3; a step
        runs on average 2/3 of the layers). The paper trained on ASNQ (millions of pairs), where a fifth of
        the updates per classifier is plenty; on WikiQA and the bundled SQuAD sample ``"all"`` ranked
        better.
    lexical_prior : bool, default=True
        Add a lexical model's logit to every exit's logit (see ``TransformerRanker``); the drops then
        rank by the sum too. ``False`` (with ``segment_similarity=False``) trains the pure cascade of the paper.
    segment_similarity : bool, default=True
        As in :class:`~as2rank.transformer.ranker.TransformerRanker`, at every exit: each exit's logit gains its own
        trained ``w × cos(q, c)`` of its layer's encodings, every ``w`` starting at the coefficient of the
        pretrained last exit layer's cosine.
    similarity_prior : bool, default=False
        As in :class:`~as2rank.transformer.ranker.TransformerRanker`: the prior also reads the similarity of the
        pretrained encoder's sentence embeddings.
    max_length, epochs, batch_size, loss, learning_rate, head_lr_multiplier, weight_decay, warmup, max_grad_norm, \
early_stopping, validation_fraction, patience, eval_every, warm_start, freeze_embeddings, device, precision, n_threads, \
reuse_fit, random_state, verbose, callbacks
        As in :class:`~as2rank.transformer.ranker.TransformerRanker`, with the same defaults (``epochs=4``,
        ``learning_rate=5e-5``), chosen for this class by its own sweep; the paper's fine-tuning setting is
        ``epochs=2, learning_rate=2e-5, lexical_prior=False, segment_similarity=False, early_stopping=False``.
        Early stopping watches the dev MAP of the last exit and is on by default from 300 answered training
        questions, as for ``TransformerRanker``.
    batch_tokens : int or "auto", default="auto"
        The layers run on chunks of rows of similar length holding at most this many padded tokens (rows ×
        longest row); ``"auto"``: 2048 on the CPU (1024 for the int8 copy on ONNX Runtime), 16384 elsewhere.
        Drops act per question: chunks are cut from groups of whole questions holding at most
        ``CHUNKS_PER_GROUP × batch_tokens`` tokens (a larger question forms a group of its own), and after
        each drop the survivors of a group are packed into new chunks.

    Attributes
    ----------
    model_ : torch.nn.Module
        ``model_.encoder`` and ``model_.classifiers`` (one per exit).
    tokenizer_ : transformers.PreTrainedTokenizerBase
    exits_ : tuple of int
    n_layers_ : int
        Layers of the cut encoder (the last exit).
    activation_ranges_ : dict of str to ndarray of shape (2, n_inputs)
        The int8 copy's quantization ranges, as in :class:`~as2rank.transformer.ranker.TransformerRanker` (every
        exit's classifier included).
    history_ : as2rank.neural.TrainingHistory
    fit_cache_hit_ : bool
        Whether the last ``fit`` reused an identical earlier fit's weights (``reuse_fit``), as in
        :class:`~as2rank.transformer.ranker.TransformerRanker`.

    Notes
    -----
    The cost report that ``predict(X, return_cost=True)`` and ``predict_exits(X, return_cost=True)`` return
    is a dict: ``relative_cost`` (rows × layers run, over all rows × all layers: the paper's cost),
    ``relative_token_cost`` (the same in tokens × layers: survivors longer than the dropped rows save less
    than ``relative_cost`` says), ``rows_per_layer``, ``survivors`` (rows scored by each exit), ``n_rows``,
    ``n_questions``.
    """

    auto_holdout = True
    #: The int8 cascade on ONNX Runtime predicts faster on chunks of 1024 tokens than of 512 (each drop
    #: re-packs the survivors into chunks).
    _auto_batch_tokens = {**AUTO_BATCH_TOKENS, "cpu-onnx": 1024}
    _inference_params = ("alpha", "exit_layer", "batch_tokens", "verbose", "reuse_fit", "n_threads")
    head_modules = ("classifiers",)
    _saved_attrs = ("n_layers_", "exits_")
    _parameter_constraints = {
        **_TransformerEstimator._parameter_constraints,
        "exits": [None, SequenceOf(Interval(Integral, 1, None))],
        "exit_sampling": [Options(EXIT_SAMPLING)],
        "alpha": DROP_RATIO_CONSTRAINTS,
        "exit_layer": [Interval(Integral, 1, None), None],
    }

    def __init__(
        self, model="minilm-l6", tokenizer=None, exits=None, alpha=0.0, exit_layer=None, exit_sampling="all",
        lexical_prior=True, segment_similarity=True, similarity_prior=False, max_length=128,
        epochs=4, batch_size=32, loss="pointwise", learning_rate=5e-5, head_lr_multiplier=10.0, weight_decay=0.01,
        warmup=0.1, max_grad_norm=1.0, early_stopping="auto", validation_fraction=None, patience=2, eval_every=None,
        warm_start=False, freeze_embeddings=False, batch_tokens="auto", device="auto", precision="auto",
        n_threads=None, reuse_fit=True, random_state=None, verbose=False, callbacks=None,
    ):
        self._keep_params(locals())

    # ----------------------------------------------------------------- training hooks
    def _check_rules(self):
        super()._check_rules()
        if self.exits is not None and np.any(np.diff(list(self.exits)) <= 0):
            raise ValueError(f"exits must be increasing positive layer numbers, got {self.exits!r}.")
        # Without exits the depth (hence the number of pruning exits) is known only once the model is loaded.
        if self.exits is not None and np.ndim(self.alpha) == 1:
            check_drop_ratios(self.alpha, len(self.exits) - 1, "alpha")

    def prepare_encoder(self, encoder):
        from ..neural.backbone import layer_list

        depth = len(layer_list(encoder))
        exits = default_exits(depth) if self.exits is None else tuple(int(e) for e in self.exits)
        if exits[-1] > depth:
            raise ValueError(f"exits={self.exits!r} but the encoder has only {depth} layers.")
        return encoder, {"exits_": exits, "n_layers_": exits[-1]}

    def build_module(self, encoder, fitted):
        from .network import CascadeEncoder

        return CascadeEncoder(encoder, fitted["exits_"], similarity=self.segment_similarity)

    def forward_outputs(self, module, batch):
        """Every exit's logits as columns, or (``exit_sampling="uniform"``) one exit's, drawn per batch."""
        if self.exit_sampling == "uniform":  # one exit per batch, uniformly at random
            exit_index = min(int(batch["draw"] * len(self.exits_)), len(self.exits_) - 1)
            return module(batch, exit_index)
        return module.all_exits(batch)

    # ----------------------------------------------------------------- inference
    def _inference_plan(self):
        """Drop ratios and the index of the last exit to run, validated against the fitted exits."""
        alphas = check_drop_ratios(self.alpha, len(self.exits_) - 1, "alpha")
        if self.exit_layer is None:
            return alphas, len(self.exits_) - 1
        if self.exit_layer not in self.exits_:
            raise ValueError(f"exit_layer must be one of the exits {self.exits_}, got {self.exit_layer!r}.")
        return [0.0] * len(alphas), self.exits_.index(self.exit_layer)

    def _run(self, predictor, encoded, index, alphas, last_exit):
        from ..neural.batching import token_budget_batches
        from ..neural.predict import device_batch, predict_batches

        # Groups are budgeted by their real tokens: the chunks inside them are cut by length, so a question
        # costs about its tokens, not its rows × its longest row.
        tokens = np.add.reduceat(encoded["lengths"][index.order], index.starts)
        module, device, chunk_tokens = predictor.module, predictor.device, predictor.batch_tokens
        batches = token_budget_batches(tokens, np.ones_like(tokens), CHUNKS_PER_GROUP * chunk_tokens)
        rows_per_layer = np.zeros(self.exits_[last_exit], dtype=np.int64)

        def prepare(groups):
            rows, codes = _group_rows(index, groups)
            return rows, codes, device_batch(encoded, rows, device)

        def run(prepared):
            rows, codes, batch = prepared
            logits, batch_rows = module.cascade(batch, codes, alphas, last_exit, chunk_tokens,
                                                lengths=encoded["lengths"][rows], exact_widths=self._exact_widths(device))
            rows_per_layer[:] += batch_rows
            return rows, logits

        logits = predict_batches(batches, run, index.n_rows, device=device, dtype=predictor.dtype,
                                 progress=predictor.progress, desc="cascade", prepare=prepare,
                                 prefetch=predictor.prefetch)
        if logits.ndim == 1:  # no rows
            logits = logits.reshape(0, len(self.exits_))
        return logits, rows_per_layer

    @staticmethod
    def _exact_widths(device) -> bool:
        """Whether the cascade reads its survivors after each drop to cut chunks to their real lengths: where
        the batch is in host memory, so the read is free (see :meth:`CascadeEncoder.cascade
        <as2rank.transformer.network.CascadeEncoder.cascade>`)."""
        return device.type == "cpu"

    def _predict_logits(self, X, alphas, last_exit):
        """Every exit's logits of every row (NaN past the exit where the row stopped), the exit each row
        reached, and the cost report."""
        from ..neural import torch_threads

        check_is_fitted(self, "model_")
        X = check_X(X)
        index = GroupIndex.from_frame(X)
        encoded = self.encode(X)
        with torch_threads(self.n_threads):
            logits, rows_per_layer = self._run(self.predictor(encoded=encoded), encoded, index, alphas, last_exit)
        reached = np.sum(~np.isnan(logits), axis=1) - 1
        survivors = np.bincount(reached, minlength=last_exit + 1)[::-1].cumsum()[::-1]
        report = cost_report(rows_per_layer, survivors, index.n_rows, index.n_groups)
        # The paper's cost is relative to the whole model, also when scoring at an earlier exit.
        report["relative_cost"] = float(rows_per_layer.sum() / (self.n_layers_ * index.n_rows))
        # The same with each row weighted by its tokens: what a drop saves depends on how long the dropped rows are.
        tokens = encoded["lengths"]
        layers = tokens @ np.asarray(self.exits_)[reached]
        report["relative_token_cost"] = float(layers / (self.n_layers_ * tokens.sum())) if len(tokens) else 0.0
        return logits, reached, report

    def predict(self, X, return_cost: bool = False):
        """One score per row, consistent with the cascade (see the class docstring).

        Parameters
        ----------
        X : pandas.DataFrame
            Grouped-candidate frame; each question's candidates are pruned together.
        return_cost : bool, default=False
            Also return the cost report of this call (see the class's Notes).

        Returns
        -------
        scores : ndarray of float64 of shape (n_rows,)
        cost : dict
            Only with ``return_cost=True``.
        """
        check_is_fitted(self, "model_")
        alphas, last_exit = self._inference_plan()
        logits, reached, report = self._predict_logits(X, alphas, last_exit)
        scores = stage_scores(logits[np.arange(len(logits)), reached], reached, last_exit + 1)
        return (scores, report) if return_cost else scores

    def predict_exits(self, X, return_cost: bool = False):
        """Logits of every exit classifier for every row, without any drop (one full encoder pass).

        Useful to evaluate every exit at α=0 at once (the paper's Table 2) and for
        :func:`~as2rank.pruning.rules.simulate_cascade` and :func:`~as2rank.pruning.rules.tune_alpha`.

        Parameters
        ----------
        X : pandas.DataFrame
        return_cost : bool, default=False
            Also return the cost report of this call (every row through every layer).

        Returns
        -------
        logits : ndarray of float64 of shape (n_rows, n_exits)
        cost : dict
            Only with ``return_cost=True``.
        """
        check_is_fitted(self, "model_")
        n_exits = len(self.exits_)
        logits, _, report = self._predict_logits(X, [0.0] * (n_exits - 1), n_exits - 1)
        return (logits, report) if return_cost else logits

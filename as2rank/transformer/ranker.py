"""The transformer cross-encoder: :class:`TransformerRanker`.

The machinery every transformer-backed ranker shares (training, early stopping, precision, fit reuse,
persistence) is ``as2rank.transformer.scaffold._TransformerEstimator``. Importing this module does not
import torch or transformers; fitting an estimator does.
"""

from __future__ import annotations

from numbers import Integral


from ..params import POOLINGS, Interval, Options
from .scaffold import _TransformerEstimator

__all__ = ["TransformerRanker"]


class TransformerRanker(_TransformerEstimator):
    """Monolithic transformer cross-encoder (the TANDA baseline of the Cascade Transformer paper, §4.1).

    Each (question, candidate) pair is encoded jointly; the first token's final encoding (the paper's
    choice; or the mean of the token encodings, see ``pooling``) feeds a feed-forward head (dropout,
    dense + tanh, dropout, dense) that outputs one logit, trained with pointwise binary cross-entropy or a
    listwise loss over each question's candidates (``loss``). Optimisation: AdamW, linear warm-up then linear
    decay, gradient clipping, through the shared loop :func:`as2rank.neural.train`.

    **From a cross-encoder checkpoint**: when ``model`` names a checkpoint with a sequence-classification head
    (an MS MARCO cross-encoder, or the ``encoder/`` folder this class saves after fine-tuning from one), the
    model starts from that head instead of a new one (``pooling="auto"`` resolves to ``"classifier"``): before
    any training step its score is the checkpoint's own logit (plus the prior and similarity terms, when on),
    and training fine-tunes the head with the encoder.

    **TANDA ("transfer then adapt")**: fit on a large transfer set (e.g. ASNQ), set ``warm_start=True``,
    then fit on the target set: the second ``fit`` continues from the fitted weights with a fresh optimizer
    and schedule. :meth:`save_pretrained` also writes the adapted encoder, usable as ``model=`` later.

    Defaults measured: ``docs/benchmarks/defaults.md`` (the training budget, early stopping and the prior and
    similarity terms, over training sizes and data sets). Prediction speed and accuracy at each ``precision``
    and ``batch_tokens``: ``docs/benchmarks/speed.md`` and ``docs/benchmarks/cpu_inference.md``.

    Parameters
    ----------
    model : str or transformers.PretrainedConfig, default="minilm-l6"
        ``"minilm-l6"`` (the packaged all-MiniLM-L6-v2, offline), a local path or Hugging Face id of any
        encoder (BERT, RoBERTa, ELECTRA, MiniLM, MPNet, ...) or cross-encoder checkpoint (see ``pooling``), or a
        config for a randomly initialised encoder.
    tokenizer : None, str or tokenizer, default=None
        ``None`` uses the model's tokenizer; required when ``model`` is a config.
    num_layers : int, default=None
        Keep only the first ``num_layers`` transformer blocks (the paper's "4/6/8/10 layers TANDA" rows);
        ``None`` keeps all.
    pooling : {"auto", "cls", "mean"}, default="auto"
        What the head reads: the first token's encoding (``"cls"``, as TANDA and the paper) or the mean of
        the token encodings, padding excluded (``"mean"``). ``"auto"`` takes the pooling the checkpoint was
        trained with: ``"mean"`` for sentence-transformers checkpoints such as the default all-MiniLM-L6-v2
        (whose first-token encoding was never trained),
        ``"cls"`` for BERT, RoBERTa, ELECTRA and the like, and ``"classifier"`` for a checkpoint with a
        sequence-classification head: the checkpoint's own head scores
        (:func:`~as2rank.transformer.network.classifier_scores`; the logit of a one-label head, ``logit[1] - logit[0]``
        of a two-label one), and, being trained already, learns at ``learning_rate`` (``head_lr_multiplier``
        is for new heads). ``"cls"`` or ``"mean"`` on such a checkpoint drop its head for a new one.
    lexical_prior : bool, default=True
        Add the logit of a lexical model to the head's logit, in training and prediction, so the network
        learns what the lexical model misses (:mod:`as2rank.transformer.prior`): a logistic regression on
        :class:`~as2rank.lexical.baselines.LexicalFeatures` (word overlap, IDF-weighted overlap, position), fitted on
        the training rows when a fresh ``fit`` (or the first ``partial_fit``) starts; a warm start keeps the
        fitted prior. On by default because the defaults benchmark found it best or indistinguishable from
        the best at every training size of both data sets, while the pure model fell below word overlap on
        small training sets. ``False`` (with ``segment_similarity=False``)
        trains the pure cross-encoder (the papers' model); the training labels must hold both classes otherwise.
    segment_similarity : bool, default=True
        Add a trained term ``w × cos(q, c)`` to the logit: the cosine of the mean encodings of the pair's
        question tokens and of its candidate tokens, taken from the same encoder pass as the head's input, so
        it costs nothing at prediction (:class:`~as2rank.transformer.network.SegmentSimilarity`). Sentence-embedding
        checkpoints such as the default were trained to compare sentences by such means, which a score head
        initialised at random cannot learn from a few hundred questions. A fresh ``fit`` first runs the
        pretrained encoder over the training rows and starts ``w`` at the cosine's coefficient in the
        prior's logistic regression (fitted beside the lexical features, or alone without
        ``lexical_prior``); training then adapts ``w`` and the encoder together. On by default, as measured
        against the plain head by the defaults benchmark. Needs a tokenizer with a separator token (BERT's
        ``[SEP]``, RoBERTa's ``</s>``).
    similarity_prior : bool, default=False
        Give the lexical prior one more feature: the cosine of the question's and the candidate's sentence
        embeddings (the mean of the token encodings) from ``model`` as it was before fine-tuning, frozen
        (:mod:`as2rank.transformer.similarity`). Sentence-transformers checkpoints such as the default were trained
        for exactly that comparison, which a few hundred training questions teach a cross-encoder only in
        part; the defaults benchmark measures it. Needs ``lexical_prior=True`` and a ``model`` (and
        ``tokenizer``) that name files on disk: each ``fit`` records their digests, and a process that loads
        them later (once) refuses files that changed. Costs one more encoder pass per question and per candidate, in
        ``fit`` and in ``predict``.
    max_length : int, default=128
        Pairs are truncated (longest first) to this many tokens.
    epochs : int, default=4
        Passes over the training data. With ``learning_rate`` and ``lexical_prior``, chosen by the defaults
        benchmark; the TANDA papers'
        fine-tuning setting is ``epochs=2, learning_rate=2e-5, lexical_prior=False, segment_similarity=False,
        early_stopping=False``.
    batch_size : int, default=32
        Training pairs per optimizer step (batches group pairs of similar length).
    loss : {"pointwise", "listwise"}, default="pointwise"
        ``"pointwise"``: binary cross-entropy of each pair's logit against its label. ``"listwise"``: each
        batch holds whole questions (``batch_size`` pairs on average; a question with more candidates is a
        batch of its own), and the loss is the KL divergence from each question's normalised labels to the
        softmax of its candidates' logits (Cosinet's listwise loss; questions without a correct answer add
        nothing). Every transformer estimator takes it (the cascade's exits, the students' distillation).
    learning_rate : float, default=5e-5
        Peak learning rate of the encoder.
    head_lr_multiplier : float, default=10.0
        The score head(s), initialised at random, learn at ``head_lr_multiplier × learning_rate`` (same
        schedule). With the short fine-tuning budgets of AS2 data sets the heads otherwise stay close to
        their initialisation; the cascade, whose five classifiers each see a fifth of the updates, needs it
        most.
    weight_decay : float, default=0.01
    warmup : float, default=0.1
        Fraction of the steps of linear warm-up.
    max_grad_norm : float or None, default=1.0
        Gradient clipping; ``None`` does not clip.
    early_stopping : "auto" or bool, default="auto"
        Stop when the validation MAP has not improved for ``patience`` evaluations and keep the weights of
        the best evaluation; ``epochs`` is then a budget. The validation set is ``fit``'s ``eval_set`` or,
        without one, a held-out share of the training questions that have a correct answer (whole questions,
        drawn with ``random_state``; they do not train). ``"auto"``: early stopping on the ``eval_set``; without
        one, on ``validation_fraction`` of the answered questions when set, else on 0.1 of them from 300
        answered training questions on, and the whole budget below that
        (:data:`~as2rank.neural.early_stopping.AUTO_MIN_QUESTIONS`; the defaults benchmark measures both).
        ``True``: always (``validation_fraction`` of 0.1 when not set). ``False``: never (an ``eval_set`` or a
        ``validation_fraction`` is then an error).
    validation_fraction : float, default=None
        Fraction of the answered training questions held out for early stopping when ``fit`` gets no
        ``eval_set`` (at least one question); ``None``: 0.1 where early stopping holds out questions.
    patience : int, default=2
        Evaluations without a better validation MAP before training stops (scikit-learn's
        ``n_iter_no_change``).
    eval_every : int, default=None
        With a dev set: evaluate every this many steps instead of after each epoch.
    warm_start : bool, default=False
        Continue from the fitted weights on the next ``fit`` (TANDA adapt step).
    freeze_embeddings : bool, default=False
        Keep the word-embedding matrix fixed during fine-tuning (a cheaper optimizer step; position and
        segment embeddings still learn).
    batch_tokens : int or "auto", default="auto"
        Prediction batches hold at most this many padded tokens (rows are sorted by length, then scores
        are put back in input order). ``"auto"``: 2048 on the CPU, where small batches stay in cache and pad
        less, 512 there for the int8 copy on ONNX Runtime (both swept by the speed benchmark), 16384 on other
        devices.
    device : str, default="auto"
        ``"auto"`` (CUDA when present, else CPU), ``"cpu"``, ``"cuda"``, ...
    precision : {"auto", "fp32", "bf16", "fp16", "int8"}, default="auto"
        Numeric precision of training and prediction (autocast: weights and optimizer stay float32).
        ``"auto"``: bfloat16 on CUDA devices that support it, else float16 with loss scaling; on the CPU
        bfloat16 where it is native (AVX512-BF16/AMX), else float32. ``"bf16"`` falls back to float32 with
        a warning where bfloat16 is not native; ``"fp16"`` needs CUDA. ``"int8"`` (CPU only) trains as
        ``"auto"`` and predicts with an int8 copy of the model (built once on first use and never pickled;
        float32 with a warning on CPUs without int8 kernels): on ONNX Runtime when it is installed (``pip
        install as2rank[onnx]``: the model exported with ``torch.onnx`` on the first ``predict`` and checked
        against it), its matrix products in int8 with static quantization: each one's input is rounded to a
        grid fixed by the range it took on 128 training rows at the end of ``fit``
        (``activation_ranges_``), so a row's int8 score does not depend on the rows predicted beside it.
        Without ONNX Runtime, torch's dynamically quantized linear layers run instead; they scale each input by
        the range of its whole batch, so their scores move with the other rows of the batch and now and then
        another top candidate wins. It can be set on a fitted model with ``set_params``.
    n_threads : int, default=None
        torch CPU threads used by ``fit``, ``partial_fit`` and ``predict`` (restored afterwards). ``None``
        keeps torch's setting, which already avoids oversubscription in joblib and Dask workers (see
        :func:`as2rank.neural.torch_threads`); set it when k parallel fits share a machine in another way.
    reuse_fit : bool, default=True
        With an integer ``random_state``, reuse the weights of an identical earlier fit in this process
        (same class, training parameters, data, and initial weights and tokenizer by content, every file
        of a ``model`` directory included): model selection over inference-only parameters then trains
        once per fold (see :mod:`as2rank.neural.fitcache`). ``fit_cache_hit_`` tells whether a fit was
        reused.
    random_state : int, RandomState or None, default=None
        Seeds head initialisation, dropout, batch order and the validation split.
    verbose : bool, default=False
        Progress bars for training and prediction.
    callbacks : list of as2rank.neural.Callback, default=None
        Called around the training steps of ``fit`` and ``partial_fit``, after the built-in early stopping, in the
        order given (:class:`~as2rank.neural.callbacks.Callback`): ``on_train_begin(module, history, accelerator)``
        before the first step; ``on_step_end(step)`` after each optimizer step and ``on_epoch_end(step)`` after
        each full epoch, either returning True to stop training there; ``on_train_end(step, stopped)`` after the
        last step. Training time only: not written by :meth:`save_pretrained` (a loaded model has
        ``callbacks=None``), copied by ``sklearn.base.clone``, and a fit with callbacks always trains
        (``reuse_fit`` does not apply).

    Attributes
    ----------
    model_ : torch.nn.Module
        Encoder (``model_.encoder``), head (``model_.head``) and, with ``segment_similarity``, the similarity
        term (``model_.similarity``, its trained weight ``model_.similarity.weight``). With
        ``pooling_="classifier"``, ``model_.encoder`` is the checkpoint's sequence classifier, head included
        (``model_.head`` is None), and :meth:`save_pretrained` writes it whole to ``encoder/``: a cross-encoder
        checkpoint again.
    tokenizer_ : transformers.PreTrainedTokenizerBase
    n_layers_ : int
        Transformer blocks used.
    pooling_ : {"cls", "mean", "classifier"}
        The pooling used (``pooling`` with ``"auto"`` resolved).
    lexical_features_ : LexicalFeatures
        With ``lexical_prior``: the prior's fitted features.
    lexical_coef_ : ndarray of shape (7,) or (8,)
        With ``lexical_prior``: the prior's weights on the six ``lexical_features_`` columns (then the
        similarity, with ``similarity_prior``), intercept last.
    similarity_source_ : dict
        With ``similarity_prior``: the ``model`` and ``tokenizer`` the similarity feature loads and the
        digests of their files at fit, which it checks each time it loads them.
    activation_ranges_ : dict of str to ndarray of shape (2, n_inputs)
        Smallest and largest value of each input channel of each linear layer (by name in ``model_``) on up
        to 128 training rows, spread evenly, after training: they fix the smoothing and the quantization
        ranges of the int8 copy (``precision="int8"``).
        ``partial_fit`` widens them with each chunk's rows.
    history_ : as2rank.neural.TrainingHistory
        Losses, learning rates and dev scores of the last ``fit``.
    validation_scores_ : ndarray of float
        Validation MAP of each evaluation of the last ``fit`` (empty without early stopping).
    best_iteration_ : int
        Optimizer steps behind the kept weights: those of the best evaluation with early stopping, else all.
    fit_cache_hit_ : bool
        Whether the last ``fit`` took its weights from an identical earlier fit in this process
        (``reuse_fit``) instead of training; ``partial_fit`` sets it to False.

    Examples
    --------
    >>> from as2rank.transformer.ranker import TransformerRanker
    >>> ranker = TransformerRanker(num_layers=4, epochs=1, random_state=0)  # doctest: +SKIP
    >>> ranker.fit(X_train, y_train).predict(X_test)  # doctest: +SKIP
    """

    auto_holdout = True
    _saved_attrs = ("n_layers_", "pooling_")
    _parameter_constraints = {
        **_TransformerEstimator._parameter_constraints,
        "num_layers": [Interval(Integral, 1, None), None],
        "pooling": [Options(POOLINGS)],
    }

    def __init__(
        self, model="minilm-l6", tokenizer=None, num_layers=None, pooling="auto", lexical_prior=True,
        segment_similarity=True, similarity_prior=False, max_length=128,
        epochs=4, batch_size=32, loss="pointwise", learning_rate=5e-5, head_lr_multiplier=10.0, weight_decay=0.01,
        warmup=0.1, max_grad_norm=1.0, early_stopping="auto", validation_fraction=None, patience=2, eval_every=None,
        warm_start=False, freeze_embeddings=False, batch_tokens="auto", device="auto", precision="auto",
        n_threads=None, reuse_fit=True, random_state=None, verbose=False, callbacks=None,
    ):
        self._keep_params(locals())

    @property
    def head_modules(self):
        # A checkpoint's own head is trained already: it learns at the encoder's rate.
        return () if self.pooling_ == "classifier" else ("head",)

    def prepare_encoder(self, encoder):
        from ..neural.backbone import is_sequence_classifier
        from ..neural.backbone import prepare_encoder as cut_encoder

        if not is_sequence_classifier(encoder):
            encoder, n_layers, pooling = cut_encoder(encoder, self.model, self.num_layers, self.pooling)
            return encoder, {"n_layers_": n_layers, "pooling_": pooling}
        # A cross-encoder checkpoint: its encoder is cut in place; "auto" keeps its head, "cls"/"mean" drop it.
        base, n_layers, pooling = cut_encoder(encoder.base_model, self.model, self.num_layers, self.pooling)
        if self.pooling == "auto":
            return encoder, {"n_layers_": n_layers, "pooling_": "classifier"}
        return base, {"n_layers_": n_layers, "pooling_": pooling}

    def build_module(self, encoder, fitted):
        from ..neural.backbone import is_sequence_classifier
        from .network import CrossEncoder

        if fitted["pooling_"] == "classifier" and not is_sequence_classifier(encoder):
            # Restoring from a config (a pickle, a reused fit) builds its bare encoder; the state to load is the
            # classifier's: build one of the checkpoint's class.
            from transformers import AutoModelForSequenceClassification

            encoder = AutoModelForSequenceClassification.from_config(encoder.config)
        return CrossEncoder(encoder, fitted["pooling_"], similarity=self.segment_similarity)

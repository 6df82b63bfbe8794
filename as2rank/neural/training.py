"""The one training loop of the neural estimators, its learning-rate schedules and its batches (of whole questions,
or of token arrays).

The training shell (:mod:`as2rank.neural.shell`) hands it a model, a batch iterator (batches built on the CPU), a
loss callable (:mod:`as2rank.neural.losses`) and callbacks (:mod:`as2rank.neural.callbacks`, early stopping's
among them); :func:`train` owns everything else: device placement, the optimizer, the schedule, gradient clipping,
mixed precision, progress and history. It runs under Hugging Face Accelerate, so the same loop trains in
one process (CPU or one GPU) or in every process of an ``accelerate launch``/``torchrun`` run (DDP;
see :mod:`as2rank.neural.distributed`), and it can continue where a previous run stopped
(:class:`TrainingState`, for ``partial_fit`` on data streamed in chunks).
"""

from __future__ import annotations

import math
import time
import warnings
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np
import torch

from ..data import ragged_arange
from .callbacks import Callback
from .devices import to_device

__all__ = [
    "OPTIMIZERS",
    "SCHEDULES",
    "TrainingHistory",
    "TrainingState",
    "train",
    "slanted_triangular",
    "linear_warmup_decay",
    "padded_groups",
    "question_batches",
    "token_batches",
]

#: Values of :func:`~as2rank.neural.train`'s ``optimizer``: Adam, or AdamW (decoupled weight decay).
OPTIMIZERS = ("adam", "adamw")


@dataclass
class TrainingHistory:
    """What :func:`train` did.

    Attributes
    ----------
    epoch_loss : list of float
        Mean training loss of each epoch.
    step_loss : list of float
        Loss of each optimizer step.
    learning_rate : list of float
        Learning rate used at each step.
    seconds : float
        Wall-clock time of the loop.
    eval_scores, eval_steps : list
        Score of each evaluation (:class:`~as2rank.neural.early_stopping.EarlyStopping`) and the step count it was
        taken at.
    best_step : int or None
        Step count of the best evaluation, whose weights were restored.
    stopped_early : bool
        Whether a callback (early stopping's ``patience``) ended training before the last step.
    """

    epoch_loss: list = field(default_factory=list)
    step_loss: list = field(default_factory=list)
    learning_rate: list = field(default_factory=list)
    seconds: float = 0.0
    eval_scores: list = field(default_factory=list)
    eval_steps: list = field(default_factory=list)
    best_step: int | None = None
    stopped_early: bool = False

    @property
    def n_steps(self) -> int:
        return len(self.step_loss)

    def extend(self, other: TrainingHistory) -> TrainingHistory:
        """Append the steps and epochs of a later run (``partial_fit``: one epoch per call); returns ``self``."""
        self.epoch_loss += other.epoch_loss
        self.step_loss += other.step_loss
        self.learning_rate += other.learning_rate
        self.seconds += other.seconds
        return self


def slanted_triangular(total_steps: int, warmup: float = 0.1, ratio: float = 32.0) -> Callable[[int], float]:
    """Slanted triangular learning rate (Howard & Ruder, 2018, eq. 3) as a multiplier of the peak rate.

    The rate rises linearly for the first ``cut = floor(warmup * total_steps)`` steps from
    ``peak / ratio`` to ``peak``, then decays linearly back to ``peak / ratio`` at the last step.

    Parameters
    ----------
    total_steps : int
    warmup : float, default=0.1
        The paper's ``cut_frac``.
    ratio : float, default=32
        How much smaller the lowest rate is than the peak.

    Returns
    -------
    callable
        ``step -> multiplier`` of the peak rate.
    """
    cut = max(1, math.floor(total_steps * warmup))
    decay_steps = max(1, total_steps - 1 - cut)

    def multiplier(step: int) -> float:
        p = step / cut if step < cut else max(0.0, 1.0 - (step - cut) / decay_steps)
        return (1.0 + p * (ratio - 1.0)) / ratio

    return multiplier


def linear_warmup_decay(total_steps: int, warmup: float = 0.1) -> Callable[[int], float]:
    """Linear warm-up from 0 to the peak over ``warmup * total_steps`` steps, then linear decay to 0
    (the BERT fine-tuning schedule).

    Parameters
    ----------
    total_steps : int
    warmup : float, default=0.1

    Returns
    -------
    callable
        ``step -> multiplier``.
    """
    cut = math.floor(total_steps * warmup)

    def multiplier(step: int) -> float:
        if step < cut:
            return (step + 1) / (cut + 1)
        return max(0.0, (total_steps - step) / max(1, total_steps - cut))

    return multiplier


def _constant(total_steps: int, warmup: float = 0.0) -> Callable[[int], float]:
    return lambda step: 1.0


#: Learning-rate schedules by name: ``name -> (total_steps, warmup) -> (step -> multiplier)``.
SCHEDULES = {"slanted_triangular": slanted_triangular, "linear": linear_warmup_decay, "constant": _constant}


class TrainingState:
    """Where a run of :func:`train` stopped, for the next run to continue: what ``partial_fit`` keeps between calls.

    The learning-rate schedule of a resumed run is laid out over ``total_rows`` training rows, declared
    before the first run: a step's rate is the schedule's value at the fraction of ``total_rows`` trained
    before it, however the rows are split into runs and batches. The optimizer (its moments and step counts)
    and the float16 loss scale carry over from run to run.

    Parameters
    ----------
    total_rows : int
        Training rows over all runs (the rows of the data times the passes over it).
    rows_per_step : int, default=1
        Rows of a full batch when batches are made of rows (their ``batch_size``): the schedule then has as
        many steps as ``fit`` would take, and one run over all the rows in full batches follows ``fit``'s
        schedule exactly. 1 when batches are made of whole questions (the schedule then moves row by row).

    Attributes
    ----------
    rows_done, steps_done, runs : int
        Rows trained, optimizer steps taken (over all processes) and runs made so far.
    optimizer : torch.optim.Optimizer or None
        The live optimizer between runs of one process; pickling stores its state on the CPU instead, and the
        next run rebuilds it from that state.
    """

    @classmethod
    def resume(cls, state, total_rows, rows_per_step: int = 1) -> TrainingState:
        """``state`` when a stream is running, else a new state over ``total_rows`` (required then): what a
        ``partial_fit`` call trains on."""
        if state is not None:
            return state
        if total_rows is None:
            raise ValueError(
                "The first call to partial_fit needs total_rows: the number of training rows that all calls "
                "together will pass (the rows of the data times the passes over it); the learning-rate "
                "schedule is laid out over them."
            )
        return cls(total_rows, rows_per_step)

    def __init__(self, total_rows: int, rows_per_step: int = 1):
        if isinstance(total_rows, bool) or not isinstance(total_rows, (int, np.integer)) or total_rows < 1:
            raise ValueError(f"total_rows must be a positive integer, got {total_rows!r}.")
        self.total_rows = int(total_rows)
        self.rows_per_step = int(rows_per_step)
        self.total_steps = math.ceil(self.total_rows / self.rows_per_step)
        self.rows_done = 0
        self.steps_done = 0
        self.runs = 0
        self.optimizer = None
        self.optimizer_state = None
        self.scaler_state = None

    def position(self) -> float:
        """The schedule position (in steps) of the next step."""
        return self.rows_done * self.total_steps / self.total_rows

    def __getstate__(self):
        state = dict(self.__dict__)
        if state["optimizer"] is not None:
            state["optimizer_state"] = _to_cpu(state["optimizer"].state_dict())
        state["optimizer"] = None
        return state


def _to_cpu(obj):
    if isinstance(obj, torch.Tensor):
        return obj.detach().to("cpu", copy=True)
    if isinstance(obj, dict):
        return {k: _to_cpu(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_to_cpu(v) for v in obj]
    return obj


class _Objective(torch.nn.Module):
    """A model and its loss as one module: the whole loss computation then runs inside the forward pass that
    DDP synchronises and that Accelerate's autocast covers (a loss may call methods other than ``forward``,
    such as the cascade's exits)."""

    def __init__(self, module, loss_fn):
        super().__init__()
        self.module = module
        self.loss_fn = loss_fn

    def forward(self, batch):
        return self.loss_fn(self.module, batch)


def train(
    module: torch.nn.Module,
    batches: Callable[[int], Iterable],
    loss_fn: Callable,
    *,
    epochs: int,
    steps_per_epoch: int,
    learning_rate: float,
    device: torch.device,
    optimizer: str = "adam",
    weight_decay: float = 0.0,
    schedule: str = "slanted_triangular",
    warmup: float = 0.1,
    max_grad_norm: float | None = None,
    verbose: bool = False,
    desc: str = "training",
    callbacks: Sequence[Callback] = (),
    precision: torch.dtype | None = None,
    lr_multipliers: dict[str, float] | None = None,
    accelerator=None,
    state: TrainingState | None = None,
) -> TrainingHistory:
    """Train ``module`` in place, in this process or in every process of an ``accelerate launch``/``torchrun`` run.

    The loop runs under Hugging Face Accelerate: the model (wrapped with its loss) goes through
    ``Accelerator.prepare`` (DDP when several processes run, autocast in ``precision``), the backward pass
    through ``Accelerator.backward`` (float16 loss scaling), clipping through ``Accelerator.clip_grad_norm_``.
    In one process this is the plain torch loop, step for step. With several processes, each yields its
    part of every global batch (:class:`~as2rank.neural.distributed.LocalBatch`, see
    :mod:`as2rank.neural.distributed`); its loss is scaled by its share of the global batch's examples, so
    that the averaged gradient is the gradient of the global batch's mean loss, and the recorded losses and
    evaluation scores are those of all processes together.

    Parameters
    ----------
    module : torch.nn.Module
        Its parameters with ``requires_grad`` are optimised; frozen tensors should be buffers or have
        ``requires_grad=False``.
    batches : callable
        ``epoch -> iterable`` of batches (tensors, or dicts/tuples of tensors, on the CPU), or of
        :class:`~as2rank.neural.distributed.LocalBatch`; each epoch must yield ``steps_per_epoch`` batches.
        The estimator shuffles here, from its own seeded generator.
    loss_fn : callable
        ``(module, batch) -> scalar tensor``, with ``batch`` already on ``device``.
    epochs, steps_per_epoch : int
    learning_rate : float
        Peak learning rate.
    device : torch.device
        Under a launcher, each process trains on its own device of this type (``accelerator.device``).
    optimizer : {"adam", "adamw"}, default="adam"
    weight_decay : float, default=0.0
    schedule : {"slanted_triangular", "linear", "constant"}, default="slanted_triangular"
    warmup : float, default=0.1
        Fraction of the steps spent rising to the peak.
    max_grad_norm : float, default=None
        Clip the global gradient norm to this value; ``None`` does not clip.
    verbose : bool, default=False
        Show a tqdm progress bar (in the main process only).
    desc : str
        Label of the progress bar.
    callbacks : sequence of Callback, default=()
        Called around the steps (:class:`~as2rank.neural.callbacks.Callback`); one may stop the run, such as
        :class:`~as2rank.neural.early_stopping.EarlyStopping`, which evaluates the model and restores its best weights.
    precision : torch.dtype, default=None
        Mixed precision through Accelerate: the loss is computed under autocast in this dtype
        (``torch.bfloat16``, or ``torch.float16`` on CUDA, with loss scaling so that small gradients do
        not underflow); the weights and the optimizer stay in float32. ``None`` or float32: no autocast.
    lr_multipliers : dict of str to float, default=None
        ``{submodule name: factor}``: parameters under that submodule (e.g. ``"head"``) learn at
        ``factor × learning_rate`` through the same schedule; the others at ``learning_rate``.
    accelerator : accelerate.Accelerator, default=None
        The one that :func:`~as2rank.neural.distributed.setup_training` made for the estimator's shards;
        ``None`` makes one for ``device`` and ``precision``.
    state : TrainingState, default=None
        Continue a previous run (``partial_fit``): its optimizer, and a schedule laid out over
        ``state.total_rows`` rows instead of ``epochs * steps_per_epoch`` steps; updated in place. The
        schedule advances by the rows of each batch, so batches must say them (``LocalBatch``). Early stopping
        is not available then.

    Returns
    -------
    TrainingHistory

    Raises
    ------
    ValueError
        For an unknown optimizer or schedule, float16 on a CPU, or early stopping together with ``state``.
    """
    from .distributed import LocalBatch, make_accelerator
    from .early_stopping import EarlyStopping

    if optimizer not in OPTIMIZERS:
        raise ValueError(f"optimizer must be one of {OPTIMIZERS}, got {optimizer!r}.")
    if schedule not in SCHEDULES:
        raise ValueError(f"schedule must be one of {tuple(SCHEDULES)}, got {schedule!r}.")
    if state is not None and any(isinstance(callback, EarlyStopping) for callback in callbacks):
        raise ValueError("Early stopping is not available when continuing a run (state=...).")
    if accelerator is None:
        accelerator = make_accelerator(device, precision)
    world = accelerator.num_processes
    if world > 1:
        device = accelerator.device
    run_steps = epochs * steps_per_epoch
    total_steps = run_steps if state is None else state.total_steps
    multiplier = SCHEDULES[schedule](total_steps, warmup)
    module.to(device)
    opt = state.optimizer if state is not None else None
    if opt is None:
        groups = _param_groups(module, learning_rate, lr_multipliers or {})
        opt_class = torch.optim.Adam if optimizer == "adam" else torch.optim.AdamW
        # The fused kernel updates all tensors in one pass (the optimizer step is a visible share of a CPU step).
        fused = optimizer == "adamw" and device.type in ("cpu", "cuda")
        opt = opt_class(groups, lr=learning_rate, weight_decay=weight_decay, **({"fused": True} if fused else {}))
        for group in opt.param_groups:
            group["initial_lr"] = group["lr"]
        if state is not None and state.optimizer_state is not None:
            opt.load_state_dict(state.optimizer_state)
    params = [p for group in opt.param_groups for p in group["params"]]
    objective, prepared_opt = accelerator.prepare(_Objective(module, loss_fn), opt)
    if state is not None and state.scaler_state is not None and accelerator.scaler is not None:
        accelerator.scaler.load_state_dict(state.scaler_state)
    history = TrainingHistory()
    for callback in callbacks:
        callback.on_train_begin(module, history, accelerator)
    start = time.perf_counter()
    progress = _progress(run_steps, verbose and accelerator.is_main_process, desc)
    module.train()
    seen, stopped = 0, False
    try:
        for epoch in range(epochs):
            epoch_losses = []
            for item in batches(epoch):
                if isinstance(item, LocalBatch):
                    batch, rows = item.batch, item.rows
                    examples = rows if item.examples is None else item.examples
                else:
                    batch, rows, examples = item, 0, 1.0
                step = len(history.step_loss) + len(epoch_losses)
                position = step if state is None else state.position()
                for group in opt.param_groups:
                    group["lr"] = group["initial_lr"] * multiplier(position)
                history.learning_rate.append(opt.param_groups[0]["lr"])
                loss = objective(to_device(batch, device))
                if world > 1:
                    # One all-reduce: the global batch's examples and rows, and its mean loss.
                    local = torch.tensor([examples, examples * float(loss.detach()), rows], dtype=torch.float64, device=device)
                    total_examples, loss_sum, rows = accelerator.reduce(local, "sum").tolist()
                    step_loss = loss_sum / total_examples
                    loss = loss * (examples * world / total_examples)
                else:
                    step_loss = float(loss.detach())
                prepared_opt.zero_grad(set_to_none=True)
                accelerator.backward(loss)
                if max_grad_norm is not None:
                    accelerator.clip_grad_norm_(params, max_grad_norm)
                prepared_opt.step()
                if state is not None:
                    state.rows_done += int(rows)
                    state.steps_done += 1
                epoch_losses.append(step_loss)
                if progress is not None:
                    progress.update()
                    postfix = {"epoch": epoch + 1, "loss": f"{epoch_losses[-1]:.4f}"}
                    if rows:
                        seen += rows
                        postfix["pairs/s"] = f"{seen / max(time.perf_counter() - start, 1e-9):.1f}"
                    progress.set_postfix(postfix)
                step += 1
                if any([callback.on_step_end(step) for callback in callbacks]):
                    stopped = True
                    break
            if stopped:
                history.step_loss.extend(epoch_losses)
                history.epoch_loss.append(float(np.mean(epoch_losses)))
                history.stopped_early = epoch + 1 < epochs or len(epoch_losses) < steps_per_epoch
                break
            if len(epoch_losses) != steps_per_epoch:
                raise RuntimeError(
                    f"The batch iterator yielded {len(epoch_losses)} batches in epoch {epoch + 1}, "
                    f"{steps_per_epoch} were announced."
                )
            history.step_loss.extend(epoch_losses)
            history.epoch_loss.append(float(np.mean(epoch_losses)))
            if any([callback.on_epoch_end(len(history.step_loss)) for callback in callbacks]):
                stopped, history.stopped_early = True, epoch + 1 < epochs
                break
        for callback in callbacks:
            callback.on_train_end(len(history.step_loss), stopped)
    finally:
        if progress is not None:
            progress.close()
        # A fitted model carries no gradients: they would double its memory and its pickles.
        module.zero_grad(set_to_none=True)
        module.eval()
    if state is not None:
        state.runs += 1
        state.optimizer = opt
        state.optimizer_state = None
        state.scaler_state = None if accelerator.scaler is None else accelerator.scaler.state_dict()
        if state.rows_done > state.total_rows:
            warnings.warn(
                f"Training has now seen {state.rows_done} rows, more than the total_rows={state.total_rows} declared "
                "on the first call; the learning rate stays at the end of its schedule.",
                RuntimeWarning,
                stacklevel=3,
            )
    history.seconds = time.perf_counter() - start
    return history


def _param_groups(module, learning_rate: float, multipliers: dict) -> list:
    """Optimizer parameter groups: one per learning-rate multiplier (trainable parameters only)."""
    unknown = set(multipliers) - {name for name, _ in module.named_modules()}
    if unknown:
        raise ValueError(f"lr_multipliers names no submodule of the model: {sorted(unknown)}.")
    by_factor: dict[float, list] = {1.0: []}  # the base group first: history records its learning rate
    for name, param in module.named_parameters():
        if param.requires_grad:
            factor = next((f for prefix, f in multipliers.items() if name.startswith(prefix + ".")), 1.0)
            by_factor.setdefault(float(factor), []).append(param)
    return [{"params": params, "lr": learning_rate * factor} for factor, params in by_factor.items() if params]


def _progress(total: int, verbose: bool, desc: str):
    if not verbose:
        return None
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=desc, unit="batch")


def padded_groups(offsets: np.ndarray, order: np.ndarray) -> np.ndarray:
    """Rows of every question in a padded matrix, in original order (a :class:`~as2rank.data.GroupIndex`'s
    ``offsets`` and ``order``).

    Parameters
    ----------
    offsets : ndarray of shape (n_groups + 1,)
    order : ndarray of shape (n_rows,)

    Returns
    -------
    ndarray of int64, shape (n_groups, max_group_size)
        ``rows[g, j]`` is the row at position ``j`` of question ``g``; ``-1`` pads shorter questions.
    """
    sizes = np.diff(offsets)
    rows = np.full((len(sizes), int(sizes.max(initial=0))), -1, dtype=np.int64)
    rows[np.repeat(np.arange(len(sizes)), sizes), ragged_arange(sizes)] = order
    return rows


def question_batches(groups: np.ndarray, batch_size: int, rng: np.random.Generator | None = None) -> list:
    """Split question numbers into batches of ``batch_size`` whole questions, shuffled when ``rng`` is given.

    Parameters
    ----------
    groups : ndarray of int
    batch_size : int
    rng : numpy.random.Generator, default=None

    Returns
    -------
    list of ndarray
    """
    groups = np.asarray(groups)
    if rng is not None:
        groups = rng.permutation(groups)
    return [groups[i : i + batch_size] for i in range(0, len(groups), batch_size)]


def token_batches(encoded: dict, y: np.ndarray, codes: np.ndarray, targets: dict, rows: np.ndarray, *,
                  batch_size: int, by_question: bool, rng: np.random.Generator, shard, chunked: bool) -> tuple:
    """The training batches over ``rows`` of token arrays, and how many an epoch yields.

    Rows are bucketed by length, or by question with ``by_question`` (a listwise loss compares a question's
    candidates: its batches hold whole questions, and carry ``group``, each row's question numbered within the
    batch; :mod:`as2rank.neural.batching`); the order is drawn from ``rng``. Each batch holds the token tensors,
    ``labels`` (1.0 where ``y > 0``), ``targets`` sliced to its rows, and two entries for losses that vary between
    batches: ``step``, the batch's number within the run (0, 1, ... over its epochs), and ``draw``, a uniform
    number in [0, 1) from a stream spawned from ``rng`` (the same in every process of a distributed fit). It is
    this process's part of the global batch (``shard``, a :class:`~as2rank.neural.distributed.Shard`). With
    ``chunked`` its forward pass runs in parts of :data:`~as2rank.neural.batching.CHUNK_ROWS` rows of similar
    length (``chunks``, and ``restore``, the order that puts their outputs back in the batch's row order).

    Parameters
    ----------
    encoded : dict of ndarray
        Token arrays of every row and their ``lengths`` (:func:`~as2rank.neural.tokens.encode_pairs`).
    y : ndarray of shape (n_rows,)
    codes : ndarray of int of shape (n_rows,)
        Each row's question.
    targets : dict of ndarray
        Per-row arrays the batches carry beside ``labels``.
    rows : ndarray of int
        The rows to train on.
    batch_size : int
    by_question, chunked : bool
    rng : numpy.random.Generator
    shard : as2rank.neural.distributed.Shard

    Returns
    -------
    batches : callable
        ``epoch -> iterator`` of :class:`~as2rank.neural.distributed.LocalBatch`.
    steps : int
        Batches per epoch.
    """
    from . import batching
    from .distributed import LocalBatch
    from .predict import batch_tensors

    labels = torch.from_numpy((y > 0).astype(np.float32))
    targets = {k: torch.as_tensor(v) for k, v in targets.items()}
    lengths, row_codes = encoded["lengths"][rows], codes[rows]
    steps = -(-len(rows) // batch_size)
    if by_question:
        steps = min(steps, len(np.unique(row_codes)))
    # The losses' draws come from their own stream, so they leave the batch order as it is.
    draws = rng.spawn(1)[0]

    def batches(epoch):
        parts = (batching.question_bucket_batches(lengths, row_codes, batch_size, rng) if by_question
                 else batching.length_bucket_batches(lengths, batch_size, rng))
        for i, part in enumerate(parts):
            # Numbered and drawn for the global batch: the same in every process.
            step, draw = epoch * steps + i, float(draws.random())
            local, real = shard.split(rows[part], row_codes[part])
            per_row = {k: v[local] for k, v in targets.items()}
            if chunked:
                pieces = batching.length_chunks(encoded["lengths"][local], batching.CHUNK_ROWS)
                batch = {"chunks": [{**batch_tensors(encoded, local[p]), **{k: v[p] for k, v in per_row.items()},
                                     "step": step, "draw": draw} for p in pieces],
                         "restore": torch.from_numpy(np.argsort(np.concatenate(pieces)))}
            else:
                batch = batch_tensors(encoded, local)
            batch.update(per_row, labels=labels[local], step=step, draw=draw)
            if by_question:
                batch["group"] = torch.from_numpy(np.unique(codes[local], return_inverse=True)[1])
            yield LocalBatch(batch, len(local) if real else 0)

    return batches, steps

"""The one training loop of the neural estimators, its learning-rate schedules, question batching and losses.

Every neural estimator supplies a model, a batch iterator (batches of whole questions built on the CPU)
and a loss callable; :func:`train` owns everything else: device placement, the optimizer, the schedule,
gradient clipping, progress and history. Device placement, the backward pass and the optimizer step each
happen in exactly one place, which is where Hugging Face Accelerate's ``prepare``/``backward`` would hook in.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import numpy as np
import torch

from .devices import autocast, to_device

__all__ = [
    "OPTIMIZERS",
    "SCHEDULES",
    "TrainingHistory",
    "train",
    "slanted_triangular",
    "linear_warmup_decay",
    "padded_groups",
    "question_batches",
    "listwise_kl_loss",
]

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
        Score of each evaluation (``evaluate`` of :func:`train`) and the step count it was taken at.
    best_step : int or None
        Step count of the best evaluation, whose weights were restored.
    stopped_early : bool
        Whether ``patience`` ended training before the last epoch.
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
        ``step -> multiplier`` for :class:`torch.optim.lr_scheduler.LambdaLR`.
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
    evaluate: Callable[[torch.nn.Module], float] | None = None,
    eval_every: int | None = None,
    patience: int | None = None,
    precision: torch.dtype | None = None,
    lr_multipliers: dict[str, float] | None = None,
    rows_of: Callable | None = None,
) -> TrainingHistory:
    """Train ``module`` in place.

    Parameters
    ----------
    module : torch.nn.Module
        Its parameters with ``requires_grad`` are optimised; frozen tensors should be buffers or have
        ``requires_grad=False``.
    batches : callable
        ``epoch -> iterable`` of batches (tensors, or dicts/tuples of tensors, on the CPU); each epoch must
        yield ``steps_per_epoch`` batches. The estimator shuffles here, from its own seeded generator.
    loss_fn : callable
        ``(module, batch) -> scalar tensor``, with ``batch`` already on ``device``.
    epochs, steps_per_epoch : int
    learning_rate : float
        Peak learning rate.
    device : torch.device
    optimizer : {"adam", "adamw"}, default="adam"
    weight_decay : float, default=0.0
    schedule : {"slanted_triangular", "linear", "constant"}, default="slanted_triangular"
    warmup : float, default=0.1
        Fraction of the steps spent rising to the peak.
    max_grad_norm : float, default=None
        Clip the global gradient norm to this value; ``None`` does not clip.
    verbose : bool, default=False
        Show a tqdm progress bar.
    desc : str
        Label of the progress bar.
    evaluate : callable, default=None
        ``module -> score`` (higher is better, e.g. dev MAP), called in evaluation mode at the end of every
        epoch, or every ``eval_every`` steps. The weights of the best evaluation are restored at the end.
    eval_every : int, default=None
        Evaluate every this many optimizer steps instead of once per epoch.
    patience : int, default=None
        Stop after this many evaluations without improvement; ``None`` trains for all epochs.
    precision : torch.dtype, default=None
        Run ``loss_fn`` under autocast in this dtype (``torch.bfloat16`` or ``torch.float16``); the
        weights and the optimizer stay in float32. float16 scales the loss (``torch.amp.GradScaler``) so
        that small gradients do not underflow. ``None`` or float32: no autocast.
    lr_multipliers : dict of str to float, default=None
        ``{submodule name: factor}``: parameters under that submodule (e.g. ``"head"``) learn at
        ``factor × learning_rate`` through the same schedule; the others at ``learning_rate``.
    rows_of : callable, default=None
        ``batch -> number of examples``; when given, the progress bar shows examples per second.

    Returns
    -------
    TrainingHistory
    """
    if optimizer not in OPTIMIZERS:
        raise ValueError(f"optimizer must be one of {OPTIMIZERS}, got {optimizer!r}.")
    if schedule not in SCHEDULES:
        raise ValueError(f"schedule must be one of {tuple(SCHEDULES)}, got {schedule!r}.")
    if eval_every is not None and (isinstance(eval_every, bool) or not isinstance(eval_every, int) or eval_every < 1):
        raise ValueError(f"eval_every must be a positive integer or None, got {eval_every!r}.")
    if patience is not None and (isinstance(patience, bool) or not isinstance(patience, int) or patience < 1):
        raise ValueError(f"patience must be a positive integer or None, got {patience!r}.")
    total_steps = epochs * steps_per_epoch
    module.to(device)
    groups = _param_groups(module, learning_rate, lr_multipliers or {})
    params = [p for group in groups for p in group["params"]]
    opt_class = torch.optim.Adam if optimizer == "adam" else torch.optim.AdamW
    # The fused kernel updates all tensors in one pass (the optimizer step is a visible share of a CPU step).
    fused = optimizer == "adamw" and device.type in ("cpu", "cuda")
    opt = opt_class(groups, lr=learning_rate, weight_decay=weight_decay, **({"fused": True} if fused else {}))
    scheduler = torch.optim.lr_scheduler.LambdaLR(opt, SCHEDULES[schedule](total_steps, warmup))
    # float16 gradients underflow without loss scaling; bfloat16 has float32's range and needs none.
    scaler = torch.amp.GradScaler(device.type) if precision == torch.float16 else None
    history = TrainingHistory()
    tracker = _BestState(module, evaluate, patience, history)
    start = time.perf_counter()
    progress = _progress(total_steps, verbose, desc)
    module.train()
    seen = 0
    try:
        for epoch in range(epochs):
            epoch_losses = []
            for batch in batches(epoch):
                history.learning_rate.append(scheduler.get_last_lr()[0])
                with autocast(device, precision):
                    loss = loss_fn(module, to_device(batch, device))
                opt.zero_grad(set_to_none=True)
                if scaler is None:
                    loss.backward()
                else:
                    scaler.scale(loss).backward()
                    scaler.unscale_(opt)  # clip the true gradients
                if max_grad_norm is not None:
                    torch.nn.utils.clip_grad_norm_(params, max_grad_norm)
                if scaler is None:
                    opt.step()
                else:
                    scaler.step(opt)
                    scaler.update()
                scheduler.step()
                epoch_losses.append(float(loss.detach()))
                if progress is not None:
                    progress.update()
                    postfix = {"epoch": epoch + 1, "loss": f"{epoch_losses[-1]:.4f}"}
                    if rows_of is not None:
                        seen += rows_of(batch)
                        postfix["pairs/s"] = f"{seen / max(time.perf_counter() - start, 1e-9):.1f}"
                    progress.set_postfix(postfix)
                step = len(history.step_loss) + len(epoch_losses)
                if eval_every is not None and step % eval_every == 0 and tracker.check(step):
                    break
            if tracker.stop:
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
            if eval_every is None and tracker.check(len(history.step_loss)):
                history.stopped_early = epoch + 1 < epochs
                break
        # With eval_every, the last steps may not have been evaluated yet: they could hold the best weights.
        evaluated_last = bool(history.eval_steps) and history.eval_steps[-1] == len(history.step_loss)
        if eval_every is not None and not tracker.stop and not evaluated_last:
            tracker.check(len(history.step_loss))
    finally:
        if progress is not None:
            progress.close()
        module.eval()
    tracker.restore()
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


class _BestState:
    """Evaluation bookkeeping of :func:`train`: keeps a CPU copy of the best weights and counts patience."""

    def __init__(self, module, evaluate, patience, history):
        self.module, self.evaluate, self.patience, self.history = module, evaluate, patience, history
        self.best_score, self.best_state, self.bad, self.stop = -math.inf, None, 0, False

    def check(self, step: int) -> bool:
        """Evaluate now; returns True when patience is exhausted."""
        if self.evaluate is None:
            return False
        self.module.eval()
        try:
            with torch.no_grad():
                score = float(self.evaluate(self.module))
        finally:
            self.module.train()
        self.history.eval_scores.append(score)
        self.history.eval_steps.append(step)
        if score > self.best_score:
            self.best_score, self.bad, self.history.best_step = score, 0, step
            self.best_state = {k: v.detach().to("cpu", copy=True) for k, v in self.module.state_dict().items()}
        else:
            self.bad += 1
            self.stop = self.patience is not None and self.bad >= self.patience
        return self.stop

    def restore(self):
        if self.best_state is not None:
            self.module.load_state_dict(self.best_state)


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
    slot = np.arange(len(order)) - np.repeat(offsets[:-1], sizes)
    rows[np.repeat(np.arange(len(sizes)), sizes), slot] = order
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


def listwise_kl_loss(scores: torch.Tensor, labels: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """KL divergence from the normalised gold labels to the softmax of the scores, mean over questions.

    ``KL(p || q) = sum_i p_i (log p_i - log q_i)`` with ``p = labels / sum(labels)`` and
    ``q = softmax(scores)`` over the candidates of a question (Bian et al., 2017; Bonadiman & Moschitti,
    2020). Questions without a positive label have no target distribution and are left out.

    Parameters
    ----------
    scores : Tensor of shape (n_questions, max_candidates)
    labels : Tensor of shape (n_questions, max_candidates)
        Non-negative relevance labels; padding slots are ignored.
    mask : Tensor of bool, shape (n_questions, max_candidates)
        True for real candidates.

    Returns
    -------
    Tensor
        Scalar loss (0 if no question has a positive).
    """
    labels = labels.to(scores.dtype).masked_fill(~mask, 0.0)
    total = labels.sum(dim=1, keepdim=True)
    answered = total.squeeze(1) > 0
    if not answered.any():
        return scores.sum() * 0.0
    p = labels[answered] / total[answered]
    log_q = torch.log_softmax(scores[answered].masked_fill(~mask[answered], float("-inf")), dim=1)
    kl = torch.xlogy(p, p) - p * log_q.masked_fill(~mask[answered], 0.0)
    return kl.sum(dim=1).mean()

"""One fit in several processes: the Accelerate setup of :func:`~as2rank.neural.train`, and whole-question
shards of a global batch.

A script started by ``accelerate launch`` or ``torchrun`` runs once per process (one per GPU, or several CPU
processes on the gloo backend). Every process builds the same estimator on the same data with the same
``random_state``, so every process draws the same sequence of *global* batches (``batch_size`` rows or
questions, as in one process). :meth:`Shard.split` gives each process its whole questions of each global
batch; :func:`~as2rank.neural.train` runs the model under Accelerate (DDP: gradients averaged across
processes), weighs each process's loss by its share of the global batch so that a step is the step one
process would take on the whole global batch, and makes every process take the same early-stopping
decisions. Every process therefore ends with the same fitted estimator. In a plain ``python`` process the
same code runs with one shard, and Accelerate adds nothing to the loop.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np
import pandas as pd
import torch

__all__ = [
    "LocalBatch",
    "Shard",
    "TrainingSetup",
    "is_main_process",
    "make_accelerator",
    "setup_training",
    "training_session",
    "wait_for_everyone",
]

_MIXED_PRECISION = {None: "no", torch.float32: "no", torch.bfloat16: "bf16", torch.float16: "fp16"}


class LocalBatch(NamedTuple):
    """This process's part of a global batch, as the batch iterator of :func:`~as2rank.neural.train` yields it.

    Attributes
    ----------
    batch : dict or tuple of Tensor
        The tensors, on the CPU.
    rows : int
        Training rows of the global batch that ``batch`` holds; 0 for a stand-in (see :meth:`Shard.split`).
    examples : float, default=None
        How many examples the loss of ``batch`` averages over (rows for a pointwise loss, questions for a
        listwise one); ``None`` means ``rows``. Processes weigh their losses by it.
    """

    batch: Any
    rows: int
    examples: float | None = None


@dataclass(frozen=True)
class Shard:
    """Process ``rank`` of ``world_size``: which whole questions of each global batch it trains on.

    Parameters
    ----------
    rank : int, default=0
    world_size : int, default=1
    """

    rank: int = 0
    world_size: int = 1

    def split(self, units: np.ndarray, questions: np.ndarray, sizes: np.ndarray | None = None):
        """This process's units of a global batch, never splitting a question across processes.

        The questions of the batch, in order of first appearance, are cut into ``world_size`` contiguous runs
        of about the same number of rows. A process left without a question (a batch with fewer questions
        than processes) gets the first question as a *stand-in*: it must still run a forward and backward
        pass for the gradient synchronisation, and its loss is weighed by zero.

        Parameters
        ----------
        units : ndarray
            What the batch is made of: row numbers, or question numbers.
        questions : ndarray
            Question of each unit.
        sizes : ndarray, default=None
            Rows of each unit (to balance the processes by rows); ``None``: one row per unit.

        Returns
        -------
        local : ndarray
            This process's units, in the batch's order.
        real : bool
            False for a stand-in.
        """
        units = np.asarray(units)
        if self.world_size == 1:
            return units, True
        codes, _ = pd.factorize(np.asarray(questions), sort=False)
        weights = np.ones(len(units)) if sizes is None else np.asarray(sizes, dtype=np.float64)
        rows = np.bincount(codes, weights=weights)
        middle = np.cumsum(rows) - rows / 2
        owner = np.minimum((middle * self.world_size / rows.sum()).astype(np.int64), self.world_size - 1)
        mine = owner[codes] == self.rank
        if mine.any():
            return units[mine], True
        return units[codes == 0], False


@dataclass(frozen=True)
class TrainingSetup:
    """What :func:`setup_training` decided: the Accelerator, the device this process trains on and its shard."""

    accelerator: Any
    device: torch.device
    shard: Shard


def make_accelerator(device: torch.device, precision: torch.dtype | None = None):
    """An ``accelerate.Accelerator`` for one training run on ``device`` in ``precision``.

    Accelerate keeps its settings (device, mixed precision) in process-wide objects that refuse to change
    once set, while one process may fit estimators of different devices and precisions in turn (a grid
    search over ``precision``, a test suite). When the requested settings differ from the current ones they
    are rebuilt, as ``transformers.Trainer`` does for each run; the process group of a launched run survives
    this (Accelerate reuses an initialised ``torch.distributed`` group).

    Parameters
    ----------
    device : torch.device
        The estimator's device; under a launcher, only its type counts (each process gets its own GPU).
    precision : torch.dtype or None
        Autocast dtype: ``None``/float32 (no autocast), bfloat16, or float16 (CUDA only, with loss scaling).

    Returns
    -------
    accelerate.Accelerator
        With device placement left to the caller, and DDP set to tolerate parameters that a step does not use
        (the cascade trains one exit per step; BERT's pooler is never used).

    Raises
    ------
    ValueError
        For float16 on a CPU, or a dtype that is not a mixed-precision type.
    """
    from accelerate import Accelerator, PartialState
    from accelerate.state import AcceleratorState
    from accelerate.utils import DistributedDataParallelKwargs

    if precision not in _MIXED_PRECISION:
        raise ValueError(f"precision must be None, torch.float32, torch.bfloat16 or torch.float16, got {precision!r}.")
    mixed = _MIXED_PRECISION[precision]
    cpu = device.type == "cpu"
    if mixed == "fp16" and cpu:
        raise ValueError("float16 mixed precision needs a CUDA device (loss scaling runs on GPUs); use bfloat16 on the CPU.")
    partial = PartialState._shared_state
    accel = AcceleratorState._shared_state
    stale = (partial and (partial["device"].type == "cpu") != cpu) or (
        accel and accel.get("_mixed_precision") != mixed
    )
    if stale:
        AcceleratorState._reset_state(reset_partial_state=True)
    ddp = DistributedDataParallelKwargs(find_unused_parameters=True)
    return Accelerator(
        cpu=cpu, mixed_precision=mixed, device_placement=False, step_scheduler_with_optimizer=False, kwargs_handlers=[ddp]
    )


def setup_training(device: torch.device, precision: torch.dtype | None = None) -> TrainingSetup:
    """The Accelerator, device and shard of this process for a fit on ``device``.

    In a plain process: ``device`` itself and ``Shard(0, 1)``. Under ``accelerate launch``/``torchrun``: the
    process's own device (``cuda:<local rank>``, or the CPU) and its rank among the processes.

    Parameters
    ----------
    device : torch.device
    precision : torch.dtype or None

    Returns
    -------
    TrainingSetup

    Raises
    ------
    ValueError
        If the launcher placed the process on a device of another type than ``device`` (e.g. ``device="cpu"``
        in a multi-GPU launch).
    """
    accelerator = make_accelerator(device, precision)
    if accelerator.num_processes == 1:
        return TrainingSetup(accelerator, device, Shard())
    if accelerator.device.type != device.type:
        raise ValueError(
            f"The estimator asks for device {str(device)!r} but the launcher runs this process on "
            f"{str(accelerator.device)!r}; use device='auto' under accelerate launch/torchrun."
        )
    return TrainingSetup(accelerator, accelerator.device, Shard(accelerator.process_index, accelerator.num_processes))


@contextlib.contextmanager
def training_session(n_threads, device: torch.device, random_state, *, precision=None, call: int = 0):
    """The block that every neural ``fit`` and ``partial_fit`` trains in, yielding ``(setup, rng)``.

    torch limited to ``n_threads`` (:func:`~as2rank.neural.torch_threads`), this process's
    :func:`setup_training` for ``device`` and ``precision``, and torch seeded from ``random_state``
    (:func:`~as2rank.neural.seeded`; the ``call``-th ``partial_fit`` call's seed,
    :func:`~as2rank.neural.call_seed`); ``rng`` is the block's NumPy generator.

    Raises
    ------
    ValueError
        Under a launcher (several processes) with ``random_state=None``: each process would draw its own batch
        order and validation split from fresh entropy, and the shards of one step would come from different
        global batches.
    """
    from .devices import call_seed, seeded, torch_threads

    with torch_threads(n_threads):
        setup = setup_training(device, precision)
        if random_state is None and setup.shard.world_size > 1:
            raise ValueError(
                "A fit launched in several processes needs the same random_state in every process (an integer): "
                "with random_state=None each process draws its own batches and validation split."
            )
        with seeded(call_seed(random_state, call), setup.device) as rng:
            yield setup, rng


def is_main_process() -> bool:
    """Whether this process should log and write files: always in a plain process; rank 0 under a launcher."""
    return not (torch.distributed.is_available() and torch.distributed.is_initialized()) or torch.distributed.get_rank() == 0


def wait_for_everyone() -> None:
    """Wait until every process of a launched run gets here (nothing in a plain process)."""
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        torch.distributed.barrier()

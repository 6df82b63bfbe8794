"""Dynamic batching: one inference worker thread scores the requests of many clients together.

A request becomes a :class:`Job` (its question, its candidates and a :class:`concurrent.futures.Future`) in a
bounded queue. The worker takes the oldest job, then waits at most ``max_wait_ms`` after that job *arrived* for
more, up to ``max_batch_pairs`` question/candidate pairs; it packs the jobs into one frame, each job its own
question (``qid``), so that models that read a question's whole list (a cascade's drops, Cosinet's list encoder)
see each request alone; it calls the model once (the library's token-budget batching runs inside that call), and
splits the scores back into the jobs' futures. A job that queued while the worker was busy has waited longer than
``max_wait_ms`` already and goes into the next batch at once. With ``adaptive_wait`` (the default), a batch that
follows a batch of one job does not wait either: it takes only the jobs queued already, so that one client at a time
pays no wait; once a batch holds two jobs or more, the next waits again, so that clients that send together stay
batched together.

One thread calls the model, so no estimator is ever called from two threads. An exception inside the model's call
fails the jobs of that batch only: with several jobs, each is scored again alone, so that one request the model
cannot score does not fail the others. The worker then goes on. A job whose client gave up (its future cancelled,
the request timed out) before its batch started is skipped.

The worker should be the only thread of the process that runs torch. On Linux torch's CPU kernels run on OpenMP
(libgomp), which keeps a pool of threads for every thread that ran a parallel region, for as long as that thread
lives; and when it manages more threads than there are cores, it lets its threads spin only briefly between regions
(libgomp's documentation of ``GOMP_SPINCOUNT``, https://gcc.gnu.org/onlinedocs/libgomp/GOMP_005fSPINCOUNT.html),
so every region of the worker's model call then waits for its threads to wake. Work before serving (loading a
model, a check call) therefore runs through :func:`on_passing_thread`.

No web framework is imported here: :mod:`as2rank.serve.app` awaits the futures.
"""

from __future__ import annotations

import queue
import sys
import threading
import time
from concurrent.futures import Future

import numpy as np

from ..app.guards import is_failure, one_line
from .model import BatchScores, ServedModel, pair_frame

__all__ = ["Batcher", "Closed", "Job", "JobResult", "QueueFull", "on_passing_thread"]

#: Put in the queue by :meth:`Batcher.close`: the worker stops when it reaches it (every job before it is served).
_STOP = object()


def on_passing_thread(function, *args, **kwargs):
    """``function(*args, **kwargs)`` computed on a new thread that has ended when this returns.

    Torch work done this way leaves no OpenMP thread pool behind (see the module's notes), where on the calling
    thread, often the main thread, the pool would live as long as the process.

    Returns
    -------
    object
        What ``function`` returned.

    Raises
    ------
    BaseException
        Whatever ``function`` raised, raised again here.
    """
    outcome = {}

    def target():
        try:
            outcome["value"] = function(*args, **kwargs)
        except BaseException as exc:  # raised again on the calling thread; a Rust panic is a BaseException
            outcome["error"] = exc

    thread = threading.Thread(target=target, name="as2rank-serve-load", daemon=True)
    thread.start()
    thread.join()
    if "error" in outcome:
        raise outcome.pop("error")
    return outcome["value"]


class QueueFull(Exception):
    """The queue holds ``max_queue`` jobs already: the server is busy (HTTP 503 with ``Retry-After``)."""


class Closed(Exception):
    """The batcher is stopping (the server is shutting down) and takes no new job (HTTP 503)."""


class JobResult:
    """The scores of one job, in the order of its candidates.

    Attributes
    ----------
    scores : ndarray of float64 of shape (n_candidates,)
        The model's ranking scores.
    probabilities : ndarray of float64 of shape (n_candidates,) or None
        A calibrated model's probabilities that each candidate answers the question.
    order : ndarray of int of shape (n_candidates,)
        Candidate indices best first: by score, equal scores in the candidates' order (their ``position``), as
        :func:`as2rank.rank <as2rank.base.rank>` orders them.
    answer_probability : float or None
        A calibrated model's probability that the top candidate answers the question.
    answer_index : int or None
        The index of that top candidate.
    """

    def __init__(self, scores, probabilities=None, answer_probability=None, answer_index=None):
        self.scores = scores
        self.probabilities = probabilities
        self.order = np.lexsort((np.arange(len(scores)), -scores))
        self.answer_probability = answer_probability
        self.answer_index = answer_index


class Job:
    """One request waiting for the worker.

    Parameters
    ----------
    question : str
    candidates : list of str
    """

    def __init__(self, question: str, candidates: list):
        self.question = question
        self.candidates = candidates
        self.n_pairs = len(candidates)
        self.arrived = time.monotonic()
        self.future: Future = Future()


class Batcher:
    """The queue and the one worker thread that scores its jobs.

    Parameters
    ----------
    model : ServedModel
    max_wait_ms : float, default=5.0
        How long after the oldest job of a batch arrived the worker waits for more jobs.
    max_batch_pairs : int, default=1024
        Pairs (candidates) of one model call at most; a job larger than that is scored alone.
    max_queue : int, default=256
        Jobs waiting at most; :meth:`submit` raises :class:`QueueFull` beyond.
    dynamic_batching : bool, default=True
        False: one job per model call (what the benchmark compares with).
    adaptive_wait : bool, default=True
        True: a batch that follows a batch of one job takes the jobs queued already and does not wait for more.
        False: every batch waits up to ``max_wait_ms`` after its oldest job arrived.
    threads : int, default=None
        torch's intra-op threads in the worker thread, set after the warm-up call (which imports torch if the
        model runs on it); None leaves torch's setting. A model's own ``n_threads`` parameter applies inside its
        ``predict``.
    on_batch : callable, default=None
        ``on_batch(n_jobs, n_pairs, seconds, failed)`` after each model call (the server's metrics).

    Attributes
    ----------
    ready : threading.Event
        Set once the warm-up call succeeded: the model is loaded and has scored once.
    warm_up_error : str or None
        The warm-up's failure, in one line.
    """

    def __init__(self, model: ServedModel, *, max_wait_ms=5.0, max_batch_pairs=1024, max_queue=256,
                 dynamic_batching=True, adaptive_wait=True, threads=None, on_batch=None):
        self.model = model
        self.adaptive_wait = adaptive_wait
        self._last_batch_jobs = 1  # jobs of the batch before: no traffic yet counts as one client
        self.max_wait = max_wait_ms / 1000.0
        self.max_batch_pairs = max_batch_pairs
        self.max_queue = max_queue
        self.dynamic_batching = dynamic_batching
        self.threads = threads
        self.on_batch = on_batch
        self.ready = threading.Event()
        self.warm_up_error = None
        self._queue = queue.Queue(maxsize=max_queue)
        self._held = None  # a job taken from the queue that did not fit the batch: the next batch's first
        self._lock = threading.RLock()
        self._thread = None
        self._closing = False

    # -------------------------------------------------------------------------------------------- the server's side
    def start(self) -> None:
        """Start the worker (once; later calls do nothing). It warms the model up, then serves the queue."""
        with self._lock:
            if self._thread is None and not self._closing:
                self._thread = threading.Thread(target=self._run, name="as2rank-serve-worker", daemon=True)
                self._thread.start()

    def submit(self, job: Job) -> Future:
        """Queue ``job`` (starting the worker if it is not running) and return its future.

        Raises
        ------
        QueueFull
            When ``max_queue`` jobs wait already.
        Closed
            When :meth:`close` was called.
        """
        with self._lock:  # a job is queued before close's stop mark, or refused
            if self._closing:
                raise Closed("the server is shutting down")
            self.start()
            try:
                self._queue.put_nowait(job)
            except queue.Full:
                raise QueueFull(f"{self.max_queue} requests are waiting already") from None
        return job.future

    def close(self, timeout=None) -> None:
        """Take no new job, let the worker serve every job queued before this call, then stop it.

        Parameters
        ----------
        timeout : float, default=None
            Seconds to wait for the worker to finish; None waits until it has.
        """
        with self._lock:
            if self._closing:
                return
            self._closing = True
            thread = self._thread
        if thread is None:  # never started: nothing was queued (submit starts it)
            return
        start = time.monotonic()
        try:
            self._queue.put(_STOP, timeout=timeout)  # waits while the queue is full: the worker is emptying it
        except queue.Full:  # the worker is stuck in a model call: it is a daemon thread, left behind
            return
        thread.join(None if timeout is None else max(0.0, timeout - (time.monotonic() - start)))

    @property
    def closing(self) -> bool:
        """Whether :meth:`close` was called."""
        return self._closing

    def depth(self) -> int:
        """Jobs waiting for a batch."""
        return self._queue.qsize() + (self._held is not None and self._held is not _STOP)

    # -------------------------------------------------------------------------------------------- the worker
    def _run(self) -> None:
        self._warm_up()
        while True:
            jobs = self._collect()
            if jobs is None:
                return
            self._serve(jobs)

    def _warm_up(self) -> None:
        try:
            self.model.warm_up()
        except BaseException as exc:  # a Rust panic of tokenizers is a BaseException
            if not is_failure(exc):
                raise
            self.warm_up_error = f"{type(exc).__name__}: {one_line(exc, 300)}"
            return
        finally:
            if self.threads is not None and "torch" in sys.modules:
                sys.modules["torch"].set_num_threads(int(self.threads))  # this thread runs every prediction
        self.ready.set()

    def _collect(self):
        """The next batch: the oldest job and those that arrive within ``max_wait`` of it (after a batch of one
        job, with ``adaptive_wait``: those queued already), up to the pair budget; None when the worker is to
        stop."""
        first = self._held if self._held is not None else self._queue.get()
        self._held = None
        if first is _STOP:
            return None
        jobs, pairs = [first], first.n_pairs
        if not self.dynamic_batching:
            return jobs
        alone = self.adaptive_wait and self._last_batch_jobs == 1
        deadline = first.arrived + (0.0 if alone else self.max_wait)
        while pairs < self.max_batch_pairs:
            remaining = deadline - time.monotonic()
            try:
                job = self._queue.get(timeout=remaining) if remaining > 0 else self._queue.get_nowait()
            except queue.Empty:
                break
            if job is _STOP or pairs + job.n_pairs > self.max_batch_pairs:
                self._held = job  # the next batch starts with it (or the worker stops there)
                break
            jobs.append(job)
            pairs += job.n_pairs
        self._last_batch_jobs = len(jobs)
        return jobs

    def _serve(self, jobs) -> None:
        """Score ``jobs`` in one model call and answer each; a failed call is tried again job by job."""
        jobs = [job for job in jobs if job.future.set_running_or_notify_cancel()]  # skip the cancelled
        if not jobs:
            return
        try:
            results = self._score(jobs)
        except BaseException as exc:
            if not is_failure(exc):
                raise
            if len(jobs) > 1:
                for job in jobs:
                    self._serve_alone(job)
                return
            jobs[0].future.set_exception(exc)
            return
        for job, result in zip(jobs, results):
            job.future.set_result(result)

    def _serve_alone(self, job) -> None:
        try:
            (result,) = self._score([job])
        except BaseException as exc:
            if not is_failure(exc):
                raise
            job.future.set_exception(exc)
            return
        job.future.set_result(result)

    def _score(self, jobs) -> list:
        frame = pair_frame([job.question for job in jobs], [job.candidates for job in jobs])
        start, failed = time.perf_counter(), True
        try:
            batch = self.model.score(frame)
            failed = False
        finally:
            if self.on_batch is not None:
                self.on_batch(len(jobs), len(frame), time.perf_counter() - start, failed)
        return _split(batch, jobs)


def _split(batch: BatchScores, jobs) -> list:
    """Each job's :class:`JobResult` from the scores of the frame its batch was packed into."""
    results, offset = [], 0
    for i, job in enumerate(jobs):
        rows = slice(offset, offset + job.n_pairs)
        probabilities = None if batch.probabilities is None else batch.probabilities[rows]
        answer_probability = answer_index = None
        if batch.answer_probability is not None:
            answer_probability = float(batch.answer_probability[i])
            answer_index = int(batch.answer_row[i]) - offset
        results.append(JobResult(batch.scores[rows], probabilities, answer_probability, answer_index))
        offset += job.n_pairs
    return results

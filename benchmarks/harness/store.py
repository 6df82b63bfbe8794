"""The stores that let a re-run compute nothing it computed before: the cache of fitted models
(``benchmarks/cache/``, git-ignored), the committed store of test scores and other arrays
(``benchmarks/results/scores/``), and the record of the library code each of them ran (:mod:`harness.fitcode`),
checked when it is read back.

``--cached-only`` (:data:`CACHED_ONLY`): a run that reads what is stored and computes nothing: a fit, a score or
an array that is not stored raises :class:`NotStored` instead of being computed, so that a results file can be
checked against its stores without hours of fitting.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from pathlib import Path

from harness.fitcode import code_record, stale, syntax, traced
from harness.machine import load_average, log, machine
from harness.paths import CACHE, SCORES

#: ``--cached-only`` (or ``AS2RANK_BENCH_CACHED_ONLY=1``): read the stores, compute nothing.
CACHED_ONLY = bool(os.environ.get("AS2RANK_BENCH_CACHED_ONLY"))


class NotStored(RuntimeError):
    """What a ``--cached-only`` run would have had to compute."""


def computing(what: str) -> None:
    """Raise :class:`NotStored` in a ``--cached-only`` run: ``what`` is not stored and would be computed."""
    if CACHED_ONLY:
        raise NotStored(f"--cached-only: {what} is not stored, and computing it is what --cached-only does not do")


def jsonable(obj):
    """``obj`` with numpy values as Python ones, keys as strings, and keys starting with ``_`` (a script's
    working copies, such as full score tables) left out of the result files."""
    import numpy as np

    if isinstance(obj, dict):
        return {str(k): jsonable(v) for k, v in obj.items() if not str(k).startswith("_")}
    if isinstance(obj, (list, tuple)):
        return [jsonable(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return jsonable(obj.tolist())
    if isinstance(obj, np.integer):
        return int(obj)
    if isinstance(obj, np.floating):
        return float(obj)
    return obj


def write_text(path: Path, text: str) -> None:
    """Write a results file, page or cache record atomically: a run stopped meanwhile leaves the previous file."""
    from harness.library import atomic_file

    with atomic_file(path) as temporary:
        temporary.write_text(text, encoding="utf-8")


def inference_params(est) -> dict:
    """The estimator's own inference-only parameters (``_inference_params``) and their values."""
    return {k: v for k, v in est.get_params(deep=False).items() if k in getattr(est, "_inference_params", ())}


def training_params(est) -> dict:
    """The parameters that decide what ``fit`` learns: all of them but an estimator's inference-only ones
    (``_inference_params``: prediction batch size, threads, progress bars...)."""
    inference = set(getattr(est, "_inference_params", ()))
    return {k: v for k, v in est.get_params().items() if k not in inference}


#: The top floor of ``as2rank`` (``tests/test_layering.py``): what no estimator imports, left out of
#: :func:`library_digest`.
APPLICATION = ("app", "__main__.py")


def library_digest(package: Path | None = None, *, application: bool = False) -> str:
    """Hash of the code of the installed ``as2rank`` package (or of the folder ``package``): every ``.py`` file's
    :func:`syntax`, by path, but those of the application floor (``app/``, ``__main__.py``: the command line and
    its reports, which no estimator imports, as ``tests/test_layering.py`` checks). A cached result is only reused
    by the code that made it; ``application=True`` keeps the application floor: for results whose keys do not
    hold all they depend on (the defaults benchmark's, which read the suite's data splits and pipelines)."""
    import hashlib

    if package is None:
        import as2rank

        package = Path(as2rank.__file__).resolve().parent
    digest = hashlib.sha256()
    for path in sorted(package.rglob("*.py")):
        relative = path.relative_to(package)
        if not application and relative.parts[0] in APPLICATION:
            continue
        digest.update(str(relative).encode() + b"\0" + syntax(path.read_bytes()).encode() + b"\0")
    return digest.hexdigest()


#: The open :func:`code_ledger` blocks, innermost last.
_LEDGERS: list[dict] = []


def note_code(record: dict) -> None:
    """Add a stored fit's or score's code record to every open :func:`code_ledger`."""
    for ledger in _LEDGERS:
        ledger.update(record)


@contextlib.contextmanager
def code_ledger():
    """Yield a dict that receives the code record (:mod:`harness.fitcode`) of everything computed inside the
    block: the code that runs in it and that of every fit or score read back from a store, so that a result
    gathered from stored pieces (one seed of a page) can itself be stored and checked."""
    ledger: dict = {}
    _LEDGERS.append(ledger)
    try:
        with traced() as ran:
            yield ledger
        ledger.update(code_record(ran))
    finally:
        _LEDGERS.remove(ledger)


def cache_key(est, X, y) -> str:
    """Hash of what a fit is asked: the estimator class, its training parameters, the content of the weights it
    starts from (``model``/``tokenizer`` read through ``source_digests``, so a replaced checkpoint under the same
    name is trained again) and the training data. The library's code that a fit ran is kept beside it
    (:mod:`harness.fitcode`) and checked when the fit is read back."""
    import joblib

    params = training_params(est)
    weights = None
    if isinstance(params.get("model"), str):
        from harness.library import source_digests

        weights = source_digests(params["model"], params.get("tokenizer"))
        if weights is None:
            raise SystemExit(f"{params['model']!r} resolves to no files on disk: a cached fit could not be checked.")
    return joblib.hash((type(est).__name__, params, weights, X, y))


def fitted(est, X, y, fit_log: list | None = None, **fit_params):
    """``est`` fitted on ``(X, y)``, loaded from ``benchmarks/cache/`` when this exact fit was done before.

    Models are keyed by :func:`cache_key` (class, parameters, data; ``fit_params`` such as ``eval_set`` join
    the key), so benchmarks that train the same model on the same data share one fit. A JSON file beside
    each model records the fit time, training pairs/s, the load average and the date of the run that
    trained it; ``fit_log`` (a list) receives that record, with ``cached`` saying whether this run trained.
    """
    import joblib

    key = cache_key(est, X, y) if not fit_params else joblib.hash((cache_key(est, X, y), fit_params))
    path = CACHE / f"{type(est).__name__}-{key}.joblib"
    name = f"{type(est).__name__} {est.get_params().get('num_layers') or ''}".strip()
    entry = json.loads(path.with_suffix(".json").read_text()) if path.with_suffix(".json").exists() else {}
    changed = stale(entry.get("code")) if path.exists() else None
    if path.exists() and not changed:
        log(f"cached {name} <- {path.name}")
        model = joblib.load(path)
        # The cached model predicts with the inference parameters asked for now.
        model.set_params(**inference_params(est))
        note_code(entry["code"])
        if fit_log is not None:
            fit_log.append({**entry, "key": key, "cached": True})
        return model
    computing(f"the fit of {name} ({path.name}{', stale' if changed else ''})")
    if changed:
        log(f"cached {name} is stale (the code it ran changed: {', '.join(changed[:5])}); fitting again")
    log(f"fitting {name} on {len(X)} pairs")
    start = time.perf_counter()
    with traced() as ran:
        est.fit(X, y, **fit_params)
    seconds = time.perf_counter() - start
    CACHE.mkdir(parents=True, exist_ok=True)
    from harness.library import atomic_file

    with atomic_file(path) as temporary:  # a run stopped meanwhile leaves no truncated model to load
        joblib.dump(est, temporary)
    history = getattr(est, "history_", None)
    entry = {
        "model": type(est).__name__,
        "num_layers": est.get_params().get("num_layers"),
        "epochs": est.get_params().get("epochs"),
        "learning_rate": est.get_params().get("learning_rate"),
        "params": {k: v for k, v in est.get_params().items() if isinstance(v, (str, int, float, bool, type(None)))},
        "key": key,
        "fit_seconds": seconds,
        "loop_seconds": getattr(history, "seconds", None),
        "n_steps": getattr(history, "n_steps", None),
        "final_epoch_loss": history.epoch_loss[-1] if history is not None and history.epoch_loss else None,
        # Pairs over the epochs the loop ran (early stopping may end it before ``epochs``, which may be "auto").
        "pairs_per_second": (len(X) * len(history.epoch_loss) / history.seconds)
        if history is not None and history.seconds and history.epoch_loss else None,
        "load_average": load_average(),
        "date": time.strftime("%Y-%m-%d %H:%M"),
        "machine": machine(),
        "code": code_record(ran),
        "traced": True,  # fit_seconds includes the trace's cost (harness/fitcode.py)
    }
    note_code(entry["code"])
    write_text(path.with_suffix(".json"), json.dumps(entry, indent=2))
    pps = entry["pairs_per_second"]
    log(f"  fitted in {seconds:.0f}s" + (f" ({pps:.1f} pairs/s)" if pps else "") + f", load {entry['load_average']}")
    if fit_log is not None:
        fit_log.append({**entry, "cached": False})
    return est


def scores_key(est, X, y, X_test, fit_params=None) -> str:
    """The key of :func:`fitted_scores`: the fit's :func:`cache_key`, ``fit_params``, the inference parameters
    and the test rows."""
    import joblib

    return joblib.hash((cache_key(est, X, y), fit_params or {}, inference_params(est), X_test))


def fitted_scores(est, X, y, X_test, fit_log: list | None = None, **fit_params):
    """``(scores, model)``: the scores on ``X_test`` of ``est`` fitted on ``(X, y)`` (:func:`fitted`), read
    from ``benchmarks/results/scores/`` when this fit was scored on ``X_test`` before (``model`` is then None).

    Read back only while the library's code that fitted and scored it is unchanged (its record's ``code``). The
    stored record is the fit's (``fit_log`` receives it), with the machine that trained the model and the one
    that scored it: on another CPU, ``precision="auto"`` may have trained and predicted in another dtype.
    """
    import numpy as np

    path = SCORES / f"{type(est).__name__}-{scores_key(est, X, y, X_test, fit_params)}.npz"
    records = fit_log if fit_log is not None else []
    stored = read_fresh(path, f"scores of {type(est).__name__}")
    if stored:
        record, arrays = stored
        log(f"stored scores of {type(est).__name__} <- {path.name} (trained on {record.get('machine', 'an unrecorded machine')})")
        records.append({**record, "cached": True})
        return arrays["scores"], None
    model = fitted(est, X, y, records, **fit_params)
    computing(f"the scores of {type(est).__name__} ({path.name})")
    with traced() as ran:
        scores = np.asarray(model.predict(X_test), dtype=np.float64)
    record = {k: v for k, v in records[-1].items() if k != "cached"}
    record["code"] = {**record.get("code", {}), **code_record(ran)}
    note_code(record["code"])
    record["scored_on"] = machine()
    save_stored(path, record, {"scores": scores})
    records[-1].update(scored_on=record["scored_on"])
    return scores, model


def read_fresh(path: Path, what: str):
    """``(record, arrays)`` stored at ``path`` (:func:`save_stored`) while the library code that computed them
    is unchanged (their record's ``code``, added to the open :func:`code_ledger` blocks); None when nothing is
    stored there or it is stale (said in the log), for the caller to compute again."""
    if not path.exists():
        return None
    record, arrays = load_stored(path)
    changed = stale(record.get("code"))
    if changed:
        log(f"stored {what} are stale (the code they ran changed: {', '.join(changed[:5])}); computing again")
        return None
    note_code(record["code"])
    return record, arrays


def save_stored(path: Path, record: dict, arrays: dict) -> None:
    """Write ``record`` (JSON-able) and the named float arrays ``arrays`` to ``path`` (``.npz``, the record
    as JSON under ``"record"``), atomically."""
    import numpy as np

    from harness.library import atomic_file

    path.parent.mkdir(parents=True, exist_ok=True)
    if "record" in arrays:
        raise ValueError("'record' names the record, not an array")
    with atomic_file(path) as temporary, open(temporary, "wb") as fh:  # a file object: savez adds no suffix
        np.savez_compressed(fh, **{k: np.asarray(v, dtype=np.float64) for k, v in arrays.items()},
                            record=json.dumps(jsonable(record)))


def load_stored(path: Path) -> tuple[dict, dict]:
    """``(record, arrays)`` as :func:`save_stored` wrote them."""
    import numpy as np

    with np.load(path) as stored:
        return json.loads(str(stored["record"])), {k: stored[k] for k in stored.files if k != "record"}


def stored_or_computed(path: Path, what: str, compute):
    """``(record, arrays, stored)``: what is stored at ``path`` while fresh, else ``compute()`` (returning
    ``(record, arrays)``) run inside a :func:`code_ledger`, its code record added, and stored."""
    stored = read_fresh(path, what)
    if stored:
        log(f"stored {what} <- {path.name}")
        return (*stored, True)
    computing(f"{what} ({path.name})")
    with code_ledger() as code:
        record, arrays = compute()
    record["code"] = code
    save_stored(path, record, arrays)
    return record, arrays, False


def cached_file(key_parts, stem: str, compute):
    """A joblib file of ``benchmarks/cache/`` keyed by ``key_parts`` (which should hold the library's code,
    :func:`library_digest`): read back if there, else ``compute()`` stored and read back (so that the object, a
    frame whose hash joins later keys, is the same in this run as in the next)."""
    import joblib

    from harness.library import atomic_file

    path = CACHE / f"{stem}-{joblib.hash(key_parts)}.joblib"
    if not path.exists():
        computing(f"{stem} ({path.name})")
        value = compute()
        CACHE.mkdir(parents=True, exist_ok=True)
        with atomic_file(path) as temporary:
            joblib.dump(value, temporary)
    return joblib.load(path)

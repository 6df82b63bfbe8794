"""The benchmark harness that every script in ``benchmarks/`` and ``benchmarks/studies/`` shares: where the
data is, which machine ran them, logging, the cache of fitted models (``benchmarks/cache/``, git-ignored) that
lets a re-run retrain nothing unchanged (each fit is read back only while the library code it ran is unchanged:
``benchmarks/fitcode.py``), and the pages: a script saves its
results (``benchmarks/results/<name>.json``) and renders them through its template
(``benchmarks/pages/<template>.md.j2``) to ``docs/benchmarks/<name>.md``. The studies (investigations behind
the library's choices, not reproductions of a paper) keep theirs apart: a template in
``benchmarks/studies/pages/`` puts its results in ``benchmarks/studies/results/`` and its page (and figures) in
``docs/studies/``. ``python benchmarks/render.py`` renders every page again from the saved results. Scoring
and significance tests come from :mod:`as2rank.evaluation`, which ``as2rank bench`` uses too."""

from __future__ import annotations

import contextlib
import json
import os
import platform
import time
from pathlib import Path

from as2rank.files import atomic_file
from fitcode import code_record, stale, syntax, traced

ROOT = Path(__file__).resolve().parents[1]
#: The shared data folder; ``AS2RANK_SHARED_DATA`` points elsewhere (a copy carried to another machine).
SHARED_DATA = Path(os.environ.get("AS2RANK_SHARED_DATA", ROOT.parent / "shared" / "data"))
RESULTS = ROOT / "benchmarks" / "results"
#: Cosinet's training budget of the paper (3 epochs of 8 questions per batch): the pages that measured Cosinet
#: before its library default became ``epochs="auto", batch_size=4`` (``docs/benchmarks/defaults-cosinet.md``)
#: pin it, so that they reproduce what they show.
COSINET_PAPER_BUDGET = {"epochs": 3, "batch_size": 8}
DOCS = ROOT / "docs" / "benchmarks"
PAGES = ROOT / "benchmarks" / "pages"
#: The studies' results, templates and pages: a page whose template is in ``STUDY_PAGES`` is a study's.
STUDY_RESULTS = ROOT / "benchmarks" / "studies" / "results"
STUDY_PAGES = ROOT / "benchmarks" / "studies" / "pages"
STUDY_DOCS = ROOT / "docs" / "studies"
CACHE = ROOT / "benchmarks" / "cache"
#: The test scores of the fits a page evaluates (committed, unlike ``CACHE``): a page whose fits take more
#: CPU hours than one run has gathers them over several runs, on whichever machines ran them (each recorded).
SCORES = RESULTS / "scores"
#: ``AS2RANK_BENCH_TAG`` (e.g. ``h100``) names a run's result files apart from the default machine's.
TAG = os.environ.get("AS2RANK_BENCH_TAG", "")
#: ``AS2RANK_BENCH_NOTE``: what the run's machine changed that no script can see (e.g. how the weights got
#: there); recorded in the result file and printed with its provenance.
NOTE = os.environ.get("AS2RANK_BENCH_NOTE", "")



def write_text(path: Path, text: str) -> None:
    """Write a results file, page or cache record atomically (:func:`as2rank.files.atomic_file`): a run stopped
    meanwhile leaves the previous complete file."""
    with atomic_file(path) as temporary:
        temporary.write_text(text, encoding="utf-8")

def tagged(name: str) -> str:
    """``name`` (``"cascade.json"``) with the run's tag before the extension (``"cascade-h100.json"``)."""
    if not TAG:
        return name
    stem, dot, ext = name.rpartition(".")
    return f"{stem}-{TAG}{dot}{ext}"


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


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def load_average() -> list:
    return [round(v, 2) for v in os.getloadavg()]


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
    its reports, which no estimator imports, as ``tests/test_layering.py`` checks). A cached fit is only reused
    by the code that trained it, since the same parameters may train another model once the library changes (a
    new default's meaning, a fix in the training loop); an edit of the documentation, or of the application
    alone, trains nothing again. ``application=True`` keeps the application floor: for results whose keys do not
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
    """Yield a dict that receives the code record (:mod:`fitcode`) of everything computed inside the block: the
    code that runs in it and that of every fit or score read back from a store, so that a result gathered from
    stored pieces (one seed of a page) can itself be stored and checked."""
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
    starts from (``model``/``tokenizer`` read through :func:`as2rank.neural.fitcache.source_digests`, so a
    replaced checkpoint under the same name is trained again) and the training data. The library's code that a
    fit ran is kept beside it (:mod:`fitcode`) and checked when the fit is read back."""
    import joblib

    params = training_params(est)
    weights = None
    if isinstance(params.get("model"), str):
        from as2rank.neural.fitcache import source_digests

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
        inference = inference_params(est)
        model.set_params(**inference)
        note_code(entry["code"])
        if fit_log is not None:
            fit_log.append({**entry, "key": key, "cached": True})
        return model
    if changed:
        log(f"cached {name} is stale (the code it ran changed: {', '.join(changed[:5])}); fitting again")
    log(f"fitting {name} on {len(X)} pairs")
    start = time.perf_counter()
    with traced() as ran:
        est.fit(X, y, **fit_params)
    seconds = time.perf_counter() - start
    CACHE.mkdir(parents=True, exist_ok=True)
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
        "traced": True,  # fit_seconds includes the trace's cost (benchmarks/fitcode.py)
    }
    note_code(entry["code"])
    write_text(path.with_suffix(".json"), json.dumps(entry, indent=2))
    pps = entry["pairs_per_second"]
    log(f"  fitted in {seconds:.0f}s" + (f" ({pps:.1f} pairs/s)" if pps else "") + f", load {entry['load_average']}")
    if fit_log is not None:
        fit_log.append({**entry, "cached": False})
    return est


def fitted_scores(est, X, y, X_test, fit_log: list | None = None, **fit_params):
    """``(scores, model)``: the scores on ``X_test`` of ``est`` fitted on ``(X, y)`` (:func:`fitted`), read
    from ``benchmarks/results/scores/`` when this fit was scored on ``X_test`` before (``model`` is then None).

    Keyed by the fit's :func:`cache_key`, ``fit_params``, the inference parameters and ``X_test``, and read
    back only while the library's code that fitted and scored it is unchanged (its record's ``code``). The
    stored record is the fit's (``fit_log`` receives it), with the machine that trained the model and the one
    that scored it: on another CPU, ``precision="auto"`` may have trained and predicted in another dtype
    (bfloat16 where the CPU computes it natively, float32 elsewhere).
    """
    import joblib
    import numpy as np

    inference = inference_params(est)
    key = joblib.hash((cache_key(est, X, y), fit_params, inference, X_test))
    path = SCORES / f"{type(est).__name__}-{key}.npz"
    records = fit_log if fit_log is not None else []
    stored = read_fresh(path, f"scores of {type(est).__name__}")
    if stored:
        record, arrays = stored
        log(f"stored scores of {type(est).__name__} <- {path.name} (trained on {record.get('machine', 'an unrecorded machine')})")
        records.append({**record, "cached": True})
        return arrays["scores"], None
    model = fitted(est, X, y, records, **fit_params)
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
    as JSON under ``"record"``); written to a temporary name first, so that a run stopped meanwhile leaves
    no partial file."""
    import numpy as np

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


def run_header(script: str, argv) -> dict:
    """What every result file starts with: the command that made it, the date, the machine, torch and its
    CPU threads, and the load average at the start (``argv`` as given to ``main``; None: the process's)."""
    import shlex
    import sys

    import torch

    return {
        "command": (f"python benchmarks/{script} " + shlex.join(argv if argv is not None else sys.argv[1:])).strip(),
        "date": time.strftime("%Y-%m-%d"),
        "machine": machine(),
        "torch": torch.__version__,
        "torch_threads": torch.get_num_threads(),
        "load_average_start": load_average(),
        **({"note": NOTE} if NOTE else {}),
    }


#: The instruction sets that choose torch's and ONNX Runtime's CPU kernels (bfloat16, int8).
CPU_FLAGS = ("avx2", "avx512f", "avx512_vnni", "avx_vnni", "avx512_bf16", "amx_bf16", "amx_int8")


def _cpuinfo() -> tuple[str, set]:
    """The CPU's model name and its flags, from /proc/cpuinfo (the platform's name and none elsewhere)."""
    model, flags = platform.machine(), set()
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name") and model == platform.machine():
                    model = line.split(":", 1)[1].strip()
                elif line.startswith("flags"):
                    flags = set(line.split(":", 1)[1].split())
                    break
    except OSError:
        pass
    return model, flags


def cpu_flags() -> list:
    """Which of :data:`CPU_FLAGS` this CPU has, sorted."""
    return sorted(set(CPU_FLAGS) & _cpuinfo()[1])


def machine() -> str:
    """CPU model, core count and the instruction-set flags that matter for torch on CPU, or the GPU."""
    model, flags = _cpuinfo()
    wanted = [f for f in CPU_FLAGS if f in flags]
    desc = f"{model}, {os.cpu_count()} cores" + (f" ({', '.join(wanted)})" if wanted else "")
    try:
        import torch

        if torch.cuda.is_available():
            desc += f"; GPU {torch.cuda.get_device_name(0)}"
    except ImportError:
        pass
    return desc


def timed_subprocess(name: str, cmd: list, threads: int | None, env: dict | None = None) -> dict:
    """Run one timed round of row ``name`` as the command ``cmd`` (with ``OMP_NUM_THREADS=threads`` when
    given, and the variables ``env`` besides): the last JSON line it prints, plus the process's wall time and the
    load average after it."""
    import subprocess

    env = {**os.environ, **({"OMP_NUM_THREADS": str(threads)} if threads else {}), **(env or {})}
    start = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        raise SystemExit(f"{name} failed ({' '.join(cmd)}):\n{proc.stderr[-3000:]}")
    line = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")][-1]
    return {**json.loads(line), "process_seconds": time.perf_counter() - start, "load_after": load_average()}


def wikiqa_splits():
    """WikiQA as every benchmark splits it.

    ``train``: the answered questions of WikiQA-train minus a 10% dev split of its questions
    (``GroupShuffleSplit(test_size=0.1, random_state=0)``); ``dev``: that split, all its questions;
    ``full``: all of WikiQA-train; ``test``: WikiQA-test; ``pool``: every distinct train and test sentence
    (for ``expand_candidates``).
    """
    import pandas as pd
    from sklearn.model_selection import GroupShuffleSplit

    from as2rank.data import keep_answered
    from as2rank.datasets import load_wikiqa

    folder = SHARED_DATA / "wikiqa"
    if not (folder / "WikiQA-train.tsv").exists():
        raise SystemExit(f"WikiQA not found under {folder}; this benchmark needs the shared data.")
    X, y = load_wikiqa(folder / "WikiQA-train.tsv")
    X_test, y_test = load_wikiqa(folder / "WikiQA-test.tsv")
    train_idx, dev_idx = next(GroupShuffleSplit(n_splits=1, test_size=0.1, random_state=0).split(X, y, X["qid"]))
    X_train, y_train = keep_answered(X.iloc[train_idx], y[train_idx])
    pool = pd.concat([X["candidate"], X_test["candidate"]], ignore_index=True).drop_duplicates().tolist()
    return {
        "full": (X, y),
        "train": (X_train, y_train),
        "dev": (X.iloc[dev_idx], y[dev_idx]),
        "test": (X_test, y_test),
        "pool": pool,
    }


def subset_questions(X, y, n: int, seed: int = 0):
    """Whole questions of ``(X, y)``: ``n`` of them (all when there are fewer), drawn with ``seed``, rows in
    their original order."""
    import numpy as np

    qids = X["qid"].unique()
    chosen = np.random.default_rng(seed).choice(qids, size=min(n, len(qids)), replace=False)
    keep = X["qid"].isin(chosen).to_numpy()
    return X[keep].reset_index(drop=True), y[keep]


@contextlib.contextmanager
def session_calls():
    """Record every call of an ONNX Runtime copy (``OnnxModule``) while open: yields the list that receives
    ``(module, its inputs, seconds)`` for each call."""
    from as2rank.neural.onnx import runtime as onnx_runtime

    calls, call = [], onnx_runtime.OnnxModule.__call__

    def recorded(module, batch):
        start = time.perf_counter()
        out = call(module, batch)
        calls.append((module, {k: batch[k] for k in module.names}, time.perf_counter() - start))
        return out

    onnx_runtime.OnnxModule.__call__ = recorded
    try:
        yield calls
    finally:
        onnx_runtime.OnnxModule.__call__ = call


def log_checks(checks) -> None:
    """Print each acceptance check's verdict as the run ends."""
    for c in checks:
        log(f"[check] {'PASS' if c['pass'] else 'FAIL'}: {c['check']}: {c['measured']}")


def conclude(res: dict, name: str, start: float, checks: list) -> Path:
    """End a run: record and print its acceptance ``checks``, the load average and the wall time since
    ``start`` (``time.perf_counter()``), then :func:`publish` it as ``name``. Returns the page's path."""
    res["acceptance"] = checks
    log_checks(checks)
    res["load_average_end"] = load_average()
    res["wall_seconds"] = time.perf_counter() - start
    page = publish(res, name)
    log(f"done in {res['wall_seconds'] / 60:.1f} min")
    return page


# ----------------------------------------------------------------------------------------------- pages
def save_figure(fig, path, *, dpi: int = 120, legend_axes=None) -> None:
    """Write a page's figure: the legend of ``legend_axes`` (if given) in its lower right corner, a light grid on
    it, the layout tightened; the figure is closed afterwards."""
    import matplotlib.pyplot as plt

    if legend_axes is not None:
        legend_axes.legend(fontsize=7, loc="lower right")
        legend_axes.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=dpi)
    plt.close(fig)


def pct(value, digits: int = 2) -> str:
    """A fraction as a percentage with ``digits`` decimals; ``–`` for a missing value."""
    if value is None or value != value:
        return "–"
    return f"{100 * value:.{digits}f}"


def pval(p, alpha: float = 0.05) -> str:
    """A p-value with three decimals, ``*`` when below ``alpha``; ``–`` for a missing one."""
    if p is None or p != p:
        return "–"
    return f"{p:.3f}" + ("*" if p < alpha else "")


def num(value, spec: str = ".2f") -> str:
    """``format(value, spec)``; ``–`` for a missing value."""
    if value is None or value != value:
        return "–"
    return format(value, spec)


def is_study(template: str) -> bool:
    """Whether the pages of ``template`` are a study's (its template is in ``benchmarks/studies/pages/``)."""
    return (STUDY_PAGES / f"{template}.md.j2").exists()


def folders(template: str) -> tuple[Path, Path]:
    """Where the results and the pages (and figures) of ``template`` go: ``(RESULTS, DOCS)``, or
    ``(STUDY_RESULTS, STUDY_DOCS)`` for a study."""
    return (STUDY_RESULTS, STUDY_DOCS) if is_study(template) else (RESULTS, DOCS)


def user_paths(text: str) -> str:
    """``text`` with the temporary folders a run wrote its user's files to shown as ``path/to/``."""
    import re

    return re.sub(r"/tmp/[^/\s]+/", "path/to/", text)


def _environment():
    import jinja2

    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader([PAGES, STUDY_PAGES]),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        autoescape=False,
    )
    env.filters.update(pct=pct, pval=pval, num=num, user_paths=user_paths)
    return env


def tagged_as(res: dict, name: str) -> str:
    """``name`` (an image beside a page) with the tag of the run that made ``res``."""
    tag = res.get("tag", "")
    if not tag:
        return name
    stem, dot, ext = name.rpartition(".")
    return f"{stem}-{tag}{dot}{ext}"


def render_page(res: dict) -> str:
    """The Markdown page of ``res``: its template (``res["template"]``) rendered with ``res`` as ``res``.

    A result that a later run replaced carries ``"stale"``: a sentence saying what it predates and which page
    holds the current results, shown under the page's title."""
    env = _environment()
    env.globals.update(tagged=lambda name: tagged_as(res, name))
    text = env.get_template(f"{res['template']}.md.j2").render(res=res)
    if res.get("stale"):
        title, _, body = text.partition("\n")
        text = f"{title}\n\n> **An earlier run, kept for reference.** {res['stale']}\n\n" + body.lstrip("\n")
    return text


def publish(res: dict, name: str, template: str | None = None) -> Path:
    """Save ``res`` as ``benchmarks/results/<name>.json`` and render it to ``docs/benchmarks/<name>.md``
    (``name`` with the run's tag, :data:`TAG`), through ``benchmarks/pages/<template>.md.j2`` (default:
    ``name``); a study's template puts them in the studies' folders instead (:func:`folders`). Returns the
    page's path."""
    res = jsonable({**res, "template": template or res.get("template") or name, "tag": TAG})
    stem = tagged(name + ".json")[: -len(".json")]
    results, docs = folders(res["template"])
    results.mkdir(parents=True, exist_ok=True)
    write_text(results / f"{stem}.json", json.dumps(res, indent=2) + "\n")
    docs.mkdir(parents=True, exist_ok=True)
    page = docs / f"{stem}.md"
    write_text(page, render_page(res))
    log(f"wrote {page.relative_to(ROOT)}")
    return page

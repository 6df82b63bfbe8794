"""The ``as2rank`` command.

``as2rank bench``
    Runs the benchmark suite (default: the offline models on the bundled SQuAD sample) and prints a
    leaderboard.
``as2rank evaluate``
    Fits one model of the suite (or loads a saved one) and prints its metrics on a test split.
``as2rank predict``
    Scores a file larger than memory (ASNQ TSV or Parquet) with a saved model, chunk by chunk, into a
    Parquet directory; an interrupted run resumes where it stopped.
``as2rank select DATA``
    Cross-validates the candidate models on the user's table and recommends one
    (:class:`~as2rank.model_selection.selector.RankerSelector`).
``as2rank fit DATA --model NAME|auto --output DIR``
    Fits a model (``auto``: the selector's choice) on the table and saves it with a model card.
``as2rank rank DIR DATA --output ranked.csv``
    Writes every question's candidates in rank order with their scores; with a model fitted with
    ``--calibrate``, also which questions it answers (``--target-precision`` chooses another threshold).
``as2rank serve DIR``
    Serves the model over HTTP (text-embeddings-inference's and Cohere's rerank routes, ``/answer``):
    :mod:`as2rank.serve.command`.

The table commands read CSV, TSV, Parquet or JSON Lines through :func:`as2rank.datasets.read_pairs`, with the
column flags ``--question --candidate --label --qid --position``.

Every error (a bad table, a damaged or edited model, a path that cannot be written, an argument out of range, and
whatever a library underneath raises) is one line, ``as2rank: error: ...``, and exit status 2; a warning is one
line, ``as2rank: warning: ...``; arguments are checked against the library's own constraint tables and paths are
checked before any work starts (:mod:`as2rank.app.guards`: a model path is a directory, or a pickle only with
``--allow-pickle``; no output over, into or around an input). Every file and model directory is written atomically
(:mod:`as2rank.files`): an interrupted command leaves the previous complete result or the new one.
"""

from __future__ import annotations

import json
import math
import os
import shlex
import sys
from pathlib import Path

from ..version import __version__
from .guards import BUNDLED as _BUNDLED, PICKLE_SUFFIXES as _PICKLE_SUFFIXES, OneLineParser
from .guards import command_paths, error_line, is_failure, one_line
from .guards import is_model_path as _is_model_path, read_table as _read_table, say as _say


def _add_data_args(p, *, tables: bool = False):
    p.add_argument(
        "--data",
        default="sample",
        help="sample: the SQuAD 2.0 sample bundled with as2rank (default); squad: a SQuAD JSON at --path; "
        "wikiqa: the folder at --path with WikiQA-train.tsv and WikiQA-test.tsv"
        + ("; or your own table (.csv, .tsv, .parquet, .jsonl; see the column flags)" if tables else ""),
    )
    p.add_argument("--path", help="data file or folder for --data squad/wikiqa")
    p.add_argument("--seed", type=int, default=0, help="random seed for splits and models (default 0)")


def _add_column_args(p, *, label_help="column of the 0/1 labels (default: label)"):
    g = p.add_argument_group("columns of the table")
    g.add_argument("--question", default="question", help="column of the question text (default: question)")
    g.add_argument("--candidate", default="candidate", help="column of the candidate sentence (default: candidate)")
    g.add_argument("--label", default="label", help=label_help)
    ids = g.add_mutually_exclusive_group()
    ids.add_argument("--qid", help="column of the question ids (default: the table's qid column if it has one, else "
                     "the question text identifies the question)")
    ids.add_argument("--no-qid", action="store_true",
                     help="the question text identifies the question, even where the table has a qid column")
    g.add_argument("--position", help="column of each candidate's 0-based retrieval rank (default: none, no order)")


def _selector(args, refit: bool):
    from ..model_selection import RankerSelector

    candidates = args.candidates.split(",") if args.candidates else "default"
    return RankerSelector(candidates=candidates, cv=args.cv, max_latency_ms=args.max_latency_ms,
                          time_budget=args.time_budget, refit=refit, random_state=args.seed, verbose=not args.quiet)


def _check_args(args) -> None:
    """Numeric flags against the constraint tables of the library functions they set, the output paths against
    the inputs, and the model path, before any work starts (a command that trains for minutes must not fail on its
    last line). A missing extra first, before the imports the other checks need, so that it fails at once."""
    if getattr(args, "plot", None):
        import importlib.util

        if importlib.util.find_spec("matplotlib") is None:
            raise ImportError("--plot needs matplotlib: pip install \"as2rank[bench]\" (or pip install matplotlib)")
    from ..base import RANK_CONSTRAINTS
    from numbers import Integral

    from ..answer.ranker import CALIBRATED_CONSTRAINTS
    from ..files import check_output_file
    from ..params import Interval, check_param
    from ..model_selection.selector import SELECTOR_CONSTRAINTS
    from .scale import PREDICT_FILE_CONSTRAINTS

    tables = {"top_k": RANK_CONSTRAINTS, **{k: PREDICT_FILE_CONSTRAINTS for k in ("chunksize", "window")},
              **{k: SELECTOR_CONSTRAINTS for k in ("cv", "max_latency_ms", "time_budget")},
              "n_threads": {"n_threads": [Interval(Integral, 1, None), None]},
              "target_precision": CALIBRATED_CONSTRAINTS}
    for name, table in tables.items():
        if getattr(args, name, None) is not None:
            check_param(f"--{name.replace('_', '-')}", getattr(args, name), table[name])
    if args.command == "fit" and args.calibrate:
        check_param("--cv", args.cv, CALIBRATED_CONSTRAINTS["cv"])
    elif args.command == "fit" and args.target_precision is not None:
        raise ValueError("--target-precision sets the threshold of a calibrated model: add --calibrate.")
    for name in getattr(args, "output_files", ()):
        if getattr(args, name, None):
            check_output_file(getattr(args, name))
    from .guards import check_no_overlap

    check_no_overlap(*command_paths(args))  # no output over, into or around an input, even with --overwrite
    if args.command in ("rank", "predict", "serve") or (args.command == "evaluate" and _is_model_path(args.model)):
        from ..persistence import check_model_path

        check_model_path(args.model, allow_pickle=args.allow_pickle)  # as2rank.load decides, before reading a byte


def _write_json(path, data) -> None:
    from ..files import atomic_file

    with atomic_file(path) as temporary:
        temporary.write_text(json.dumps(data, indent=2))


#: Bytes of a table from which ``select`` says that it reads it before it does.
_LARGE_TABLE = 1 << 20


def _select(args) -> int:
    if not args.quiet and Path(args.data).is_file() and Path(args.data).stat().st_size > _LARGE_TABLE:
        # At once: reading and checking a large table takes seconds before the selector speaks.
        print(f"as2rank select: reading {args.data}", file=sys.stderr, flush=True)
    X, y = _read_table(args.data, args, labels=True)
    _say(args)
    selector = _selector(args, refit=False).fit(X, y)
    print(selector.format_table())
    print(f"Next: as2rank fit {shlex.quote(args.data)} --model {shlex.quote(selector.best_name_)} --output path/to/model"
          + _column_flags(args))
    if args.plot:
        import matplotlib

        from ..files import atomic_file

        matplotlib.use("Agg")
        with atomic_file(args.plot) as temporary:
            selector.plot().figure.savefig(temporary, bbox_inches="tight", dpi=120,
                                           format=Path(args.plot).suffix.lstrip(".") or "png")
    if args.output:
        table = selector.results_table()
        _write_json(args.output, {"data": args.data, "chosen": selector.best_name_, "reason": selector.choice_reason_,
                                  "rows": json.loads(table.to_json(orient="records"))})
    return 0


def _column_flags(args) -> str:
    """The column flags the user gave, to repeat in a suggested command."""
    flags = [f" --{name} {shlex.quote(getattr(args, name))}" for name, default in
             (("question", "question"), ("candidate", "candidate"), ("label", "label"), ("qid", None),
              ("position", None)) if getattr(args, name) != default]
    return "".join(flags) + (" --no-qid" if args.no_qid else "")


def _fit(args) -> int:
    from ..persistence import save
    from ..persistence.card import ModelCardData
    from ..model_selection import get_entry, get_ranker
    from .guards import check_model_output
    from .suite import show_fit_progress

    check_model_output(args.output, overwrite=args.overwrite)  # before the fit
    X, y = _read_table(args.data, args, labels=True)
    _say(args)
    card = ModelCardData.from_data(X, y, name=args.data_name)
    card.columns = {name: args.qid_used if name == "qid" else getattr(args, name) for name in
                    ("qid", "question", "candidate", "label", "position")
                    if (args.qid_used if name == "qid" else getattr(args, name)) is not None}
    if args.model == "auto":
        selector = _selector(args, refit=not args.calibrate).fit(X, y)
        # Calibrating refits the choice on folds: an unfitted one, rather than the selector's refit.
        model = get_ranker(selector.best_name_, random_state=args.seed) if args.calibrate else selector.best_estimator_
        row = selector.results_table().set_index("model").loc[selector.best_name_]
        card.metrics = {"map": float(row["map"]), **{key: float(row[key]) for key in ("ece", "answer_f1")
                                                     if math.isfinite(row[key])}}
        card.metrics_on = (f"{int(row['n_questions'])} questions out of fold ({int(row['n_folds'])} of "
                           f"{args.cv} grouped cross-validation folds run)")
        card.notes = f"Chosen by as2rank's RankerSelector: {selector.choice_reason_}."
        name = selector.best_name_
    else:
        entry = get_entry(args.model)
        missing = entry.missing()
        if missing:
            raise ImportError(f"{entry.name} needs: pip install {' '.join(missing)}")
        model = get_ranker(entry.name, random_state=args.seed)
        if not args.quiet:
            show_fit_progress(model)
        if not args.calibrate:
            model.fit(X, y)
        name = entry.name
    if args.calibrate:
        model, name = _calibrated(model, X, y, args, card), f"{name}, calibrated"
    card.model_name = name
    save(model, args.output, card=card, overwrite=args.overwrite)
    print(f"as2rank fit: {name} on {X['qid'].nunique():,} questions / {len(X):,} pairs -> {args.output}", file=sys.stderr)
    return 0


def _calibrated(model, X, y, args, card):
    """``model`` (unfitted) wrapped in a CalibratedRanker fitted on ``(X, y)`` with ``--cv`` question folds; what its
    threshold gave on the held-out questions goes to the card."""
    from ..answer.ranker import CalibratedRanker

    calibrated = CalibratedRanker(model, cv=args.cv, target_precision=args.target_precision).fit(X, y)
    r = calibrated.threshold_report_
    precision = "none answered" if r["precision"] is None else (
        f"precision {r['precision']:.3f} (95% Wilson interval {r['precision_low']:.3f}-{r['precision_high']:.3f})")
    card.notes = ((card.notes + "\n\n") if card.notes else "") + (
        f"Calibrated (as2rank.answer.CalibratedRanker, {args.cv} question folds): it answers a question when the "
        f"probability that its top candidate answers it exceeds {r['threshold']:.4f}, chosen for "
        + (f"precision {args.target_precision:g}" if args.target_precision is not None
           else "the best answer-triggering F1")
        + f"; on the {r['n_questions']:,} held-out training questions: coverage {r['coverage']:.3f}, {precision}.")
    return calibrated


#: ``rank --output`` writers by suffix.
_RANKED_WRITERS = {
    ".csv": lambda frame, f: frame.to_csv(f, index=False),
    ".tsv": lambda frame, f: frame.to_csv(f, sep="\t", index=False),
    ".parquet": lambda frame, f: frame.to_parquet(f, index=False),
    ".jsonl": lambda frame, f: frame.to_json(f, orient="records", lines=True, force_ascii=False),
}


def _rank(args) -> int:
    from ..base import rank
    from ..files import atomic_file
    from .scale import load_model

    suffix = Path(args.output).suffix.lower()
    if suffix not in _RANKED_WRITERS:
        raise ValueError(f"--output {args.output!r}: use a .csv, .tsv, .parquet or .jsonl file name.")
    args.label = None  # labels are never read to rank (--label is ignored, as its help says)
    X, _ = _read_table(args.data, args, labels=False)
    model = _scoring(args.model, lambda: load_model(args.model, allow_pickle=args.allow_pickle))
    abstain = hasattr(model, "predict_answer")
    if args.target_precision is not None:
        if not abstain:
            raise ValueError(f"--target-precision needs a model that can abstain; {args.model} holds a "
                             f"{type(model).__name__}: fit it with as2rank fit --calibrate.")
        abstain = model.threshold_for(target_precision=args.target_precision)["threshold"]
    ranked = _scoring(args.model, lambda: rank(model, X, top_k=args.top_k, abstain=abstain))
    with atomic_file(args.output) as temporary:  # the previous output stays whole until this one is
        _RANKED_WRITERS[suffix](ranked, temporary)
    answered = f", {int(ranked['answer'].sum()):,} answered" if "answer" in ranked else ""
    _say(args)
    print(f"as2rank rank: {X['qid'].nunique():,} questions{answered}, {len(ranked):,} ranked candidates -> "
          f"{args.output}", file=sys.stderr)
    return 0


def _scoring(model, score):
    """``score()`` of a saved model, with what an edited model's state raises deep inside prediction (a value of
    the wrong type, a missing attribute) as one line naming the model."""
    try:
        return score()
    except (ValueError, FileNotFoundError, ImportError, OSError):
        raise
    except BaseException as exc:  # a Rust panic of tokenizers is a BaseException
        if not is_failure(exc):
            raise
        raise ValueError(f"the model at {model} cannot score this table ({type(exc).__name__}: {one_line(exc, 300)}); "
                         "its saved state is damaged or was edited.") from None


def _bench(args) -> int:
    from .suite import format_leaderboard, load_benchmark_data, run_suite, select

    entries = select(args.suite.split(","), args.models.split(",") if args.models else None)
    X_train, y_train, X_test, y_test = load_benchmark_data(args.data, args.path, random_state=args.seed)
    print(
        f"as2rank bench on {args.data}: train {X_train['qid'].nunique()} questions / {len(X_train)} pairs, "
        f"test {X_test['qid'].nunique()} questions / {len(X_test)} pairs "
        "(metrics over questions with a correct answer, pessimistic ties)",
        file=sys.stderr,
    )
    board = run_suite(entries, X_train, y_train, X_test, y_test, random_state=args.seed, progress=not args.quiet)
    print(format_leaderboard(board))
    if args.output:
        _write_json(args.output, {"data": args.data, "seed": args.seed, "rows": board.to_dict(orient="records")})
    return 0


#: ``predict --input`` suffixes that are always a user's table (other inputs are one when a column flag is given).
_TABLE_SUFFIXES = (".csv", ".jsonl", ".ndjson")


def _evaluation_data(args):
    """Train and test splits for ``evaluate``: a bundled set, or the user's tables (``--data``, ``--test``)."""
    from .suite import load_benchmark_data

    if args.data in _BUNDLED:
        return load_benchmark_data(args.data, args.path, random_state=args.seed)
    if args.test is None:
        if not _is_model_path(args.model):
            raise ValueError("--data is a table: evaluate a saved --model on it, or give --test TABLE to fit "
                             f"{args.model} on --data and evaluate it on --test.")
        return None, None, *_read_table(args.data, args, labels=True)
    return (*_read_table(args.data, args, labels=True), *_read_table(args.test, args, labels=True))


def _evaluate(args) -> int:
    from ..metrics import ranking_report
    from ..model_selection import get_entry, get_ranker
    from .scale import load_model

    if args.save and not args.save.lower().endswith(_PICKLE_SUFFIXES) and not _is_model_path(args.model):
        from .guards import check_model_output

        check_model_output(args.save)  # before the fit
    elif args.save:
        from ..files import check_output_file

        check_output_file(args.save)
    X_train, y_train, X_test, y_test = _evaluation_data(args)
    _say(args)
    saved = _is_model_path(args.model)
    if saved:
        model = load_model(args.model, allow_pickle=args.allow_pickle)
    else:
        entry = get_entry(args.model)
        missing = entry.missing()
        if missing:
            raise ImportError(f"{entry.name} needs: pip install {' '.join(missing)}")
        model = get_ranker(entry.name, random_state=args.seed).fit(X_train, y_train)
        if args.save and args.save.lower().endswith(_PICKLE_SUFFIXES):
            import joblib

            from ..files import atomic_file

            with atomic_file(args.save) as temporary:
                joblib.dump(model, temporary)
        elif args.save:
            from ..persistence import save

            save(model, args.save)
    from ..base import check_scores

    scores = check_scores(_scoring(args.model, lambda: model.predict(X_test)) if saved else model.predict(X_test),
                          len(X_test))
    print("| ties | questions | MAP | MRR | P@1 | P@3 | P@5 | nDCG@10 |\n|---|---:|---:|---:|---:|---:|---:|---:|")
    for ties in ("pessimistic", "stable", "optimistic") if args.ties == "all" else (args.ties,):
        r = ranking_report(y_test, scores, X_test["qid"], ties=ties, position=X_test.get("position"))
        cells = " | ".join(f"{100 * r[k]:.2f}" for k in ("map", "mrr", "p@1", "p@3", "p@5", "ndcg@10"))
        print(f"| {ties} | {r['n_evaluated']} | {cells} |")
    return 0


def _set_everywhere(model, name: str, value) -> None:
    """Set every parameter called ``name`` of ``model`` and of its nested estimators (a Pipeline's steps)."""
    names = [k for k in model.get_params() if k == name or k.endswith(f"__{name}")]
    model.set_params(**{k: value for k in names})


def _predict(args) -> int:
    from pathlib import Path

    from ..digest import content_digest
    from .scale import load_model, predict_file

    model = load_model(args.model, allow_pickle=args.allow_pickle)
    if args.device is not None:
        _set_everywhere(model, "device", args.device)
    if args.n_threads is not None:
        _set_everywhere(model, "n_threads", args.n_threads)
    # Parts of an interrupted run are reused only for the same model bytes: a name or a modification time
    # can stay the same while the weights change.
    model_id = f"{Path(args.model).resolve()}@{content_digest(args.model)}"
    table = Path(args.input).suffix.lower() in _TABLE_SUFFIXES or _column_flags(args)
    frame = None
    if table:
        args.label = None  # labels are not read to score
        frame, _ = _read_table(args.input, args, labels=False)  # checked before the output is touched
    columns = {"question": args.question, "candidate": args.candidate, "qid": getattr(args, "qid_used", args.qid),
               "position": args.position}
    try:
        summary = _scoring(args.model, lambda: predict_file(
            model,
            args.input,
            args.output,
            chunksize=args.chunksize,
            window=args.window,
            model_id=model_id,
            progress=not args.quiet,
            overwrite=args.overwrite,
            columns=columns if table else None,
            table=frame,
        ))
    except KeyboardInterrupt:
        print("as2rank predict: interrupted; run the same command again to resume.", file=sys.stderr)
        return 130
    resumed = f", {summary['parts_skipped']} of them from an earlier run" if summary["parts_skipped"] else ""
    rate = f" ({summary['rows_per_second']:.0f} rows/s)" if summary["parts_skipped"] < summary["parts"] else ""
    _say(args)
    print(f"as2rank predict: {summary['rows']} rows in {summary['parts']} parts{resumed} -> {args.output}{rate}", file=sys.stderr)
    return 0


#: ``--allow-pickle``'s help: the one way a pickle is loaded.
_ALLOW_PICKLE = ("load a --model that is a .joblib/.pkl/.pickle file: unpickling runs any code the file holds, so "
                 "only from a source you trust (without it, a model is a directory, which is loaded pickle-free)")


def build_parser() -> OneLineParser:
    parser = OneLineParser(prog="as2rank", description="Answer sentence selection with scikit-learn.")
    parser.add_argument("--version", action="version", version=f"as2rank {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    bench = sub.add_parser("bench", help="run the benchmark suite and print a leaderboard")
    _add_data_args(bench)
    bench.add_argument(
        "--suite", default="default", help="comma-separated suites: default, neural, transformers, context, or all"
    )
    bench.add_argument("--models", help="comma-separated model names (overrides --suite)")
    bench.add_argument("--output", help="write the leaderboard as JSON to this file")
    bench.add_argument("--quiet", action="store_true", help="no progress bar")
    bench.set_defaults(func=_bench, output_files=("output",))

    ev = sub.add_parser("evaluate", help="fit (or load) one model and print its metrics on the test split")
    _add_data_args(ev, tables=True)
    ev.add_argument("--test", help="with a table as --data: the table to evaluate on (the model fits on --data)")
    _add_column_args(ev)
    ev.add_argument(
        "--model",
        required=True,
        help="a suite model name (e.g. WO+RR), a save_pretrained directory, or with --allow-pickle a "
        ".joblib/.pkl/.pickle file (pickles run code when loaded: only from a trusted source)",
    )
    ev.add_argument("--allow-pickle", action="store_true", help=_ALLOW_PICKLE)
    ev.add_argument("--ties", choices=("pessimistic", "stable", "optimistic", "all"), default="pessimistic")
    ev.add_argument(
        "--save",
        help="save the fitted model: a path ending in .joblib/.pkl/.pickle is written with joblib.dump, any other "
        "path is a pickle-free save_pretrained directory",
    )
    ev.set_defaults(func=_evaluate)

    pr = sub.add_parser(
        "predict",
        help="score a file larger than memory with a saved model, chunk by chunk, into a Parquet directory",
    )
    pr.add_argument(
        "--model",
        required=True,
        help="a save_pretrained directory (pickle-free), or with --allow-pickle a model saved with joblib.dump "
        "(.joblib/.pkl/.pickle; a pickle runs code when loaded: only from a trusted source)",
    )
    pr.add_argument("--allow-pickle", action="store_true", help=_ALLOW_PICKLE)
    pr.add_argument(
        "--input",
        required=True,
        help="an ASNQ TSV (question, sentence, label; rows of a question contiguous), a grouped-candidate "
        "Parquet file or directory (qid, question, candidate, ...), or your own table: a .csv or .jsonl file, "
        "or any file read with the column flags",
    )
    pr.add_argument("--output", required=True, help="output directory of Parquet parts (row, qid, score, rank)")
    pr.add_argument("--chunksize", type=int, default=100_000, help="rows per chunk (default 100000); memory follows it")
    pr.add_argument(
        "--window", type=int, default=0, help="Parquet input: how many rows apart the rows of a question may be (default 0)"
    )
    pr.add_argument("--device", help="set the model's device (e.g. cpu, cuda)")
    pr.add_argument("--n-threads", type=int, help="set the model's torch thread count")
    pr.add_argument("--overwrite", action="store_true", help="start over instead of resuming an interrupted run "
                    "(deletes only the parts its manifest lists, never a file of yours)")
    pr.add_argument("--quiet", action="store_true", help="no progress bar")
    _add_column_args(pr, label_help="ignored (labels are not needed to score)")
    pr.set_defaults(func=_predict)

    se = sub.add_parser("select", help="cross-validate the candidate models on your table and recommend one")
    se.add_argument("data", help="your table: .csv, .tsv, .parquet or .jsonl with a header")
    _add_column_args(se)
    _add_selection_args(se)
    se.add_argument("--plot", help="save the MAP-against-latency plot to this image file (needs matplotlib)")
    se.add_argument("--output", help="write the results table and the choice as JSON to this file")
    se.set_defaults(func=_select, output_files=("output", "plot"))

    fi = sub.add_parser("fit", help="fit a model on your table and save it (pickle-free, with a model card)")
    fi.add_argument("data", help="your table: .csv, .tsv, .parquet or .jsonl with a header")
    fi.add_argument("--model", required=True,
                    help="a suite model name (e.g. Lexical+LR, Transformer; see as2rank bench --suite all) or auto: "
                    "the choice of as2rank select")
    fi.add_argument("--output", required=True, help="the model directory to write (read it with as2rank.load): new, "
                    "empty, or a model directory, whose model the new one replaces (your files beside it are kept)")
    fi.add_argument("--overwrite", action="store_true",
                    help="also write into a non-empty directory that is not an as2rank model, beside your files (a "
                    "file or folder of yours with a name the model writes, such as README.md, is refused, never "
                    "replaced)")
    fi.add_argument("--data-name", help="a name for the training data in the model card")
    fi.add_argument("--calibrate", action="store_true",
                    help="wrap the model in as2rank.answer.CalibratedRanker: candidate probabilities and when to "
                    "abstain, learned on --cv question folds (the model is fitted cv + 1 times)")
    fi.add_argument("--target-precision", type=float,
                    help="with --calibrate: answer only when held-out answers are right this often (default: the "
                    "best answer-triggering F1)")
    _add_column_args(fi)
    _add_selection_args(fi)
    fi.set_defaults(func=_fit)

    ra = sub.add_parser("rank", help="rank every question's candidates with a saved model")
    ra.add_argument("model", help="a saved model directory (as2rank fit --output), or with --allow-pickle a "
                    ".joblib/.pkl/.pickle file")
    ra.add_argument("--allow-pickle", action="store_true", help=_ALLOW_PICKLE)
    ra.add_argument("data", help="the table to rank: .csv, .tsv, .parquet or .jsonl with a header; labels not needed")
    ra.add_argument("--output", required=True, help="ranked candidates: .csv, .tsv, .parquet or .jsonl "
                    "(qid, question, rank, candidate, score, row; a calibrated model adds "
                    "answer_probability and answer, True on the top candidate of each answered question)")
    ra.add_argument("--top-k", type=int, help="keep the best K candidates of each question")
    ra.add_argument("--target-precision", type=float,
                    help="a calibrated model: answer only when its held-out answers were right this often "
                    "(default: the threshold it was fitted with)")
    _add_column_args(ra, label_help="ignored (labels are not needed to rank)")
    ra.set_defaults(func=_rank, output_files=("output",))

    from ..serve.command import add_parser as add_serve_parser

    add_serve_parser(sub, _ALLOW_PICKLE)
    return parser


def _add_selection_args(p):
    g = p.add_argument_group("model selection (select, fit --model auto)")
    g.add_argument("--candidates", help="comma-separated suite model names (default: RR if --position, WO+RR, "
                   "Lexical+LR, Zero-shot, Cosinet+BiRNN, Transformer, and Transformer (MPNet) where a GPU is)")
    g.add_argument("--cv", type=int, default=3, help="grouped cross-validation folds (default 3)")
    g.add_argument("--max-latency-ms", type=float, help="latency budget: milliseconds to rank one question")
    g.add_argument("--time-budget", type=float, default=1200.0,
                   help="seconds the cross-validation may take (default 1200)")
    g.add_argument("--seed", type=int, default=0, help="random seed of the folds and models (default 0)")
    g.add_argument("--quiet", action="store_true", help="no plan, no progress")


def main(argv=None) -> int:
    """Run a command: every failure is one line, ``as2rank: error: ...``, and status 2 (whatever raised it: a
    usage error, the user's input, a library underneath; ``AS2RANK_DEBUG=1`` prints the traceback too); a warning
    is one line, ``as2rank: warning: ...``. Ctrl-C keeps its usual behaviour."""
    import warnings

    from .guards import show_warning

    with warnings.catch_warnings():
        warnings.showwarning = show_warning
        try:
            args = build_parser().parse_args(argv)
            _check_args(args)
            return args.func(args)
        except BaseException as exc:  # SafetensorError, a Rust PanicException, pandas' and pyarrow's own errors
            if not is_failure(exc):  # Ctrl-C, exits
                raise
            if os.environ.get("AS2RANK_DEBUG", "") not in ("", "0"):
                import traceback

                traceback.print_exc()
            print(error_line(exc), file=sys.stderr)
            return 2


if __name__ == "__main__":
    sys.exit(main())

"""The ``as2rank`` command.

``as2rank bench``
    Runs the benchmark suite (default: the offline models on the bundled SQuAD sample) and prints a
    leaderboard.
``as2rank evaluate``
    Fits one model of the suite (or loads a saved one) and prints its metrics on a test split.
``as2rank predict``
    Scores a file larger than memory (ASNQ TSV or Parquet) with a saved model, chunk by chunk, into a
    Parquet directory; an interrupted run resumes where it stopped.
"""

from __future__ import annotations

import argparse
import json
import sys

from . import __version__

#: ``--model``/``--save`` paths with these suffixes are joblib (pickle) files; other paths are model directories.
_PICKLE_SUFFIXES = (".joblib", ".pkl")


def _add_data_args(p):
    p.add_argument(
        "--data",
        choices=("sample", "squad", "wikiqa"),
        default="sample",
        help="sample: the SQuAD 2.0 sample bundled with as2rank (default); squad: a SQuAD JSON at --path; "
        "wikiqa: the folder at --path with WikiQA-train.tsv and WikiQA-test.tsv",
    )
    p.add_argument("--path", help="data file or folder for --data squad/wikiqa")
    p.add_argument("--seed", type=int, default=0, help="random seed for splits and models (default 0)")


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
        with open(args.output, "w") as fh:
            json.dump({"data": args.data, "seed": args.seed, "rows": board.to_dict(orient="records")}, fh, indent=2)
    return 0


def _is_model_path(model: str) -> bool:
    """Whether ``--model`` names a saved model (a joblib/pickle file or a model directory), not a suite entry."""
    from pathlib import Path

    return model.endswith(_PICKLE_SUFFIXES) or Path(model).is_dir()


def _evaluate(args) -> int:
    from .metrics import ranking_report
    from .scale import load_model
    from .suite import load_benchmark_data, select

    X_train, y_train, X_test, y_test = load_benchmark_data(args.data, args.path, random_state=args.seed)
    if _is_model_path(args.model):
        model = load_model(args.model)
    else:
        (entry,) = select(("all",), [args.model])
        missing = entry.missing()
        if missing:
            print(f"{entry.name} needs: pip install {' '.join(missing)}", file=sys.stderr)
            return 2
        model = entry.make(args.seed).fit(X_train, y_train)
        if args.save and args.save.endswith(_PICKLE_SUFFIXES):
            import joblib

            joblib.dump(model, args.save)
        elif args.save:
            from .persistence import save

            save(model, args.save)
    scores = model.predict(X_test)
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

    from .digest import content_digest
    from .scale import load_model, predict_file

    model = load_model(args.model)
    if args.device is not None:
        _set_everywhere(model, "device", args.device)
    if args.n_threads is not None:
        _set_everywhere(model, "n_threads", args.n_threads)
    # Parts of an interrupted run are reused only for the same model bytes: a name or a modification time
    # can stay the same while the weights change.
    model_id = f"{Path(args.model).resolve()}@{content_digest(args.model)}"
    try:
        summary = predict_file(
            model,
            args.input,
            args.output,
            chunksize=args.chunksize,
            window=args.window,
            model_id=model_id,
            progress=not args.quiet,
            overwrite=args.overwrite,
        )
    except KeyboardInterrupt:
        print("as2rank predict: interrupted; run the same command again to resume.", file=sys.stderr)
        return 130
    resumed = f", {summary['parts_skipped']} of them from an earlier run" if summary["parts_skipped"] else ""
    rate = f" ({summary['rows_per_second']:.0f} rows/s)" if summary["parts_skipped"] < summary["parts"] else ""
    print(f"as2rank predict: {summary['rows']} rows in {summary['parts']} parts{resumed} -> {args.output}{rate}", file=sys.stderr)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="as2rank", description="Answer sentence selection with scikit-learn.")
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
    bench.set_defaults(func=_bench)

    ev = sub.add_parser("evaluate", help="fit (or load) one model and print its metrics on the test split")
    _add_data_args(ev)
    ev.add_argument(
        "--model",
        required=True,
        help="a suite model name (e.g. WO+RR), a save_pretrained directory, or a .joblib/.pkl file (pickles run "
        "code when loaded: only from a trusted source)",
    )
    ev.add_argument("--ties", choices=("pessimistic", "stable", "optimistic", "all"), default="pessimistic")
    ev.add_argument(
        "--save",
        help="save the fitted model: a path ending in .joblib/.pkl is written with joblib.dump, any other path "
        "is a pickle-free save_pretrained directory",
    )
    ev.set_defaults(func=_evaluate)

    pr = sub.add_parser(
        "predict",
        help="score a file larger than memory with a saved model, chunk by chunk, into a Parquet directory",
    )
    pr.add_argument(
        "--model",
        required=True,
        help="a save_pretrained directory (pickle-free), or a model saved with joblib.dump (.joblib/.pkl; a pickle "
        "runs code when loaded: only from a trusted source)",
    )
    pr.add_argument(
        "--input",
        required=True,
        help="an ASNQ TSV (question, sentence, label; rows of a question contiguous) or a grouped-candidate "
        "Parquet file or directory (qid, question, candidate, ...)",
    )
    pr.add_argument("--output", required=True, help="output directory of Parquet parts (row, qid, score, rank)")
    pr.add_argument("--chunksize", type=int, default=100_000, help="rows per chunk (default 100000); memory follows it")
    pr.add_argument(
        "--window", type=int, default=0, help="Parquet input: how many rows apart the rows of a question may be (default 0)"
    )
    pr.add_argument("--device", help="set the model's device (e.g. cpu, cuda)")
    pr.add_argument("--n-threads", type=int, help="set the model's torch thread count")
    pr.add_argument("--overwrite", action="store_true", help="start over instead of resuming an interrupted run")
    pr.add_argument("--quiet", action="store_true", help="no progress bar")
    pr.set_defaults(func=_predict)
    return parser


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except (ValueError, FileNotFoundError, ImportError) as exc:
        print(f"as2rank: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())

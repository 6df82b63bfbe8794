"""Score digests of a test run, to compare two runs of the suite prediction for prediction.

``AS2RANK_SCORE_LOG=path/to/folder python -m pytest ...`` wraps the ``predict`` of every public estimator class
(``as2rank.__all__``) and records, per test and per call, the class and a digest of the scores' bytes; each
pytest process writes ``<folder>/<worker>.json`` at the end. ``python -m tests.score_log A B`` compares two such
folders: a key recorded in both with different digests is a changed prediction. Run the reference twice to see
which tests predict differently from run to run (unseeded models), and pass that folder as ``--noise``.
``python -m tests.score_log --bench path/to/folder`` records the benchmark suite's default run the same way.
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import json
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np

_STATE = {"test": "", "calls": defaultdict(int), "log": {}, "folder": None}


def _digest(scores) -> str:
    array = np.ascontiguousarray(np.asarray(scores))
    return f"{array.dtype}{array.shape}:" + hashlib.sha256(array.tobytes()).hexdigest()[:16]


def _wrap(cls, name):
    original = cls.__dict__[name]

    @functools.wraps(original)
    def recorded(self, *args, **kwargs):
        out = original(self, *args, **kwargs)
        key = f"{_STATE['test']}|{type(self).__name__}.{name}"
        _STATE["calls"][key] += 1
        try:
            _STATE["log"][f"{key}#{_STATE['calls'][key]}"] = _digest(out)
        except (TypeError, ValueError):  # not an array of scores
            pass
        return out

    recorded.score_logged = True  # not wrapped twice (``__wrapped__`` alone would also mark a decorated method)
    setattr(cls, name, recorded)


def start(folder) -> None:
    import as2rank

    _STATE["folder"] = Path(folder)
    for attr in as2rank.__all__:
        cls = getattr(as2rank, attr)
        if isinstance(cls, type):
            for klass in cls.__mro__:
                if klass.__module__.startswith("as2rank") and "predict" in klass.__dict__ \
                        and not getattr(klass.__dict__["predict"], "score_logged", False):
                    _wrap(klass, "predict")


def current_test(nodeid: str) -> None:
    _STATE["test"] = nodeid


def finish(worker: str) -> None:
    folder = _STATE["folder"]
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{worker}.json").write_text(json.dumps(_STATE["log"], indent=0, sort_keys=True))


def read(folder) -> dict:
    out = {}
    for path in sorted(Path(folder).glob("*.json")):
        out.update(json.loads(path.read_text()))
    return out


def unsteady_groups(*runs: dict) -> tuple[dict, set]:
    """The (test, method) groups whose calls differ between runs of the same code: ``({group: outputs}, random)``.

    A group whose runs give the same outputs in another order or number (a server's batches follow thread
    timing) maps to the outputs the runs gave, and a candidate is checked against them; a group whose runs give
    different outputs (hypothesis' draws, a result that follows the clock) is in ``random`` and is not
    compared."""
    outputs = [defaultdict(list) for _ in runs]
    for run, out in zip(runs, outputs):
        for key, digest in run.items():
            group, number = key.rsplit("#", 1)
            out[group].append((int(number), digest))
    reordered, random = {}, set()
    for group in set().union(*outputs):
        calls = [tuple(d for _, d in sorted(o.get(group, ()))) for o in outputs]
        if any(not c for c in calls) or len(set(calls)) == 1:
            continue
        if len({frozenset(c) for c in calls}) == 1:
            reordered[group] = set(calls[0])
        else:
            random.add(group)
    return reordered, random


def compare(ref: dict, new: dict, noisy=frozenset(), unsteady=None, random=frozenset()) -> tuple:
    """The keys of ``ref`` whose prediction changed in ``new``, and the (test, method) groups compared by their
    outputs only: where the two runs called a method a different number of times in a test (work that follows
    the clock, such as the latency rounds of ``RankerSelector``), calls are not paired by number, and the group
    is unchanged when both runs produced the same set of distinct outputs. With :func:`unsteady_groups` of two or
    more reference runs, a group of ``unsteady`` is unchanged when every output of ``new`` is one that the
    reference runs gave, and a group of ``random`` is not compared."""
    unsteady = unsteady or {}
    groups = defaultdict(lambda: ([], []))
    for side, log in enumerate((ref, new)):
        for key, digest in log.items():
            groups[key.rsplit("#", 1)[0]][side].append((key, digest))
    changed, recounted = [], []
    for group, (a, b) in groups.items():
        if not a or not b:
            continue
        if group in random:
            continue
        if group in unsteady:
            changed += [k for k, d in b if d not in unsteady[group]]
            continue
        if len(a) != len(b):
            outputs = {d for _, d in b}
            if {d for _, d in a} == outputs:
                recounted.append(group)
            else:  # the reference's calls whose output is gone, or the group when the candidate adds one
                changed += [k for k, d in a if d not in outputs] or [f"{group}#new"]
            continue
        paired = dict(b)
        changed += [k for k, d in a if k not in noisy and paired.get(k, d) != d]
    return changed, recounted


def run_bench(folder, suite: str = "default") -> None:
    """Record the predictions of ``as2rank bench --suite SUITE``'s run on the bundled sample (fit on its train
    split, scored on its test split) in ``folder/bench.json``, like a test run's (``python -m tests.score_log
    --bench FOLDER``)."""
    from as2rank.app.suite import load_benchmark_data, run_suite, select

    start(folder)
    current_test(f"as2rank bench --suite {suite}")
    X_train, y_train, X_test, y_test = load_benchmark_data("sample")
    board = run_suite(select((suite,)), X_train, y_train, X_test, y_test, progress=False)
    print(board[["model", "map", "status"]].to_string(index=False))
    finish("bench")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description="Compare the score digests of two test runs.")
    parser.add_argument("reference", nargs="?")
    parser.add_argument("candidate", nargs="?")
    parser.add_argument("--noise", action="append", default=[], metavar="FOLDER",
                        help="another run of the reference (repeatable): a (test, method) group whose calls differ "
                             "between reference runs is compared by its outputs, each of which a reference run gave")
    parser.add_argument("--bench", metavar="FOLDER", help="record a run of the benchmark suite in FOLDER instead")
    parser.add_argument("--suite", default="default", help="with --bench: the suite to run (default: default)")
    args = parser.parse_args(argv)
    if args.bench:
        run_bench(args.bench, args.suite)
        return 0
    if args.candidate is None:
        parser.error("give two folders to compare, or --bench FOLDER")
    ref, new = read(args.reference), read(args.candidate)
    unsteady, random = unsteady_groups(ref, *(read(folder) for folder in args.noise)) if args.noise else ({}, set())
    changed, recounted = compare(ref, new, unsteady=unsteady, random=random)
    common = [k for k in ref if k in new and k.rsplit("#", 1)[0] not in unsteady.keys() | random]
    print(f"{len(ref)} predictions in the reference, {len(new)} in the candidate, {len(common)} compared by call; "
          f"between reference runs {len(unsteady)} (test, method) groups reorder their outputs (compared by output) "
          f"and {len(random)} change them (not compared: {sorted(random)[:3]}); {len(changed)} changed.")
    if recounted:
        print(f"{len(recounted)} (test, method) pairs called a different number of times, each with the same "
              f"distinct outputs in both runs, e.g. {recounted[:2]}")
    by_test = defaultdict(int)
    for key in changed:
        by_test[key.rsplit("#", 1)[0]] += 1
    for group, n in sorted(by_test.items()):
        print(f"  changed: {group} ({n} call{'s' if n > 1 else ''})")
    recorded = {k.rsplit("#", 1)[0] for k in new}
    missing = [k for k in ref if k.rsplit("#", 1)[0] not in recorded]
    if missing:
        print(f"{len(missing)} recorded only in the reference (tests renamed or removed), e.g. {missing[:3]}")
    return 1 if changed else 0


if __name__ == "__main__":
    sys.exit(main())

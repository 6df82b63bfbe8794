"""Score digests of a test run, to compare two runs of the suite prediction for prediction.

``AS2RANK_SCORE_LOG=path/to/folder python -m pytest ...`` wraps the ``predict`` of every public estimator class
(``as2rank.__all__``) and records, per test and per call, the class and a digest of the scores' bytes; each
pytest process writes ``<folder>/<worker>.json`` at the end. ``python -m tests.score_log A B`` compares two such
folders: a key recorded in both with different digests is a changed prediction. Run the reference twice to see
which tests predict differently from run to run (unseeded models), and pass that folder as ``--noise``.
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


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description="Compare the score digests of two test runs.")
    parser.add_argument("reference")
    parser.add_argument("candidate")
    parser.add_argument("--noise", help="a second run of the reference: keys that differ between the two are ignored")
    args = parser.parse_args(argv)
    ref, new = read(args.reference), read(args.candidate)
    noisy = set()
    if args.noise:
        again = read(args.noise)
        noisy = {k for k in ref if k in again and again[k] != ref[k]}
    common = [k for k in ref if k in new and k not in noisy]
    changed = [k for k in common if ref[k] != new[k]]
    print(f"{len(ref)} predictions in the reference, {len(new)} in the candidate, {len(common)} compared "
          f"({len(noisy)} left out as differing between two reference runs); {len(changed)} changed.")
    for k in changed[:50]:
        print("  changed:", k)
    missing = [k for k in ref if k not in new]
    if missing:
        print(f"{len(missing)} recorded only in the reference (tests renamed or removed), e.g. {missing[:3]}")
    return 1 if changed else 0


if __name__ == "__main__":
    sys.exit(main())

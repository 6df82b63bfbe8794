"""Fits of a pinned library commit standing for today's library: the same small fits by both libraries, their
predictions compared (``pinned_fits.toml``).

    python benchmarks/studies/pinned_fits.py --commit 0a3ef65 [--page context-library|defaults]
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from itertools import product
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the harness

import numpy as np
from harness import ROOT, experiment, library_digest, log
from harness.experiment import Experiment
from harness.store import computing

CONFIG = Experiment(__file__).config
COMMON, LENGTHS = CONFIG["record"]["common"], CONFIG["record"]["lengths"]
PRECISIONS = tuple(CONFIG["record"]["tolerance"])
WORDS = CONFIG["words"].split()


def synthetic(n_questions=12, seed=0):
    """Questions over their own documents; right candidates and the sentence before each share words with the
    question (so that local context carries signal). The data of ``tests/test_context.py``, written here since
    that module imports names of today's library that a pinned one may lack."""
    import pandas as pd

    rng = np.random.default_rng(seed)
    rows, labels = [], []
    for q in range(n_questions):
        question = list(rng.choice(WORDS, 4))
        n = int(rng.integers(3, 7))
        right = set(rng.choice(n, size=max(1, n // 3), replace=False).tolist())
        for p in range(n):
            words = list(rng.choice(WORDS, int(rng.integers(3, 9))))
            if p in right or p + 1 in right:
                words += question[:2]
            rows.append((f"q{q}", " ".join(question), " ".join(words), p, f"d{q}", p))
            labels.append(int(p in right))
    columns = ["qid", "question", "candidate", "position", "doc_id", "doc_position"]
    return pd.DataFrame(rows, columns=columns), np.array(labels)


def encoder(kind: str):
    """A tiny random encoder's config and its word-level tokenizer: BERT-shaped, or MPNet-shaped."""
    import transformers

    vocab = {w: i for i, w in enumerate(CONFIG["special"][kind] + WORDS)}
    shape = {"vocab_size": len(vocab), **CONFIG["shape"]}
    if kind == "mpnet":
        return transformers.MPNetConfig(**shape), transformers.MPNetTokenizer(vocab=vocab, unk_token="<unk>")
    return transformers.BertConfig(**shape), transformers.BertTokenizerFast(vocab=vocab)


def rows(page: str):
    """``(key, row, class, parameters, precision)`` of every fit of ``page``."""
    for spec, precision in product(CONFIG["estimators"][page], PRECISIONS):
        yield f"{spec['row']} / {precision}", spec["row"], spec["class"], spec.get("params", {}), precision


def child(page: str, out: str) -> None:
    """Fit the page's rows with the ``as2rank`` on ``sys.path`` and save their predictions (and the digest)."""
    import torch

    from harness.library import as2rank, context_rankers as rankers

    torch.set_num_threads(1)
    X, y = synthetic()
    X = rankers.ContextExtractor(max_global_sentences=2, max_global_tokens=12).fit_transform(X)
    classes = {"TransformerRanker": as2rank.TransformerRanker, "ContextConcat": rankers.ContextConcat,
               "ContextEnsemble": rankers.ContextEnsemble, "ContextMWA": rankers.ContextMWA}
    scores = {}
    for key, _, name, params, precision in rows(page):
        params = {k: tuple(v) if isinstance(v, list) else v for k, v in params.items()}
        config, tokenizer = encoder(params.pop("encoder", "bert"))
        lengths = {"max_length": LENGTHS["max_length"]} if name == "TransformerRanker" else LENGTHS
        est = classes[name](model=config, tokenizer=tokenizer, precision=precision, **COMMON, **lengths, **params)
        scores[key] = est.fit(X, y).predict(X)
    np.savez(out, digest=library_digest(), path=str(Path(as2rank.__file__).resolve().parent), **scores)


def run_child(page: str, pythonpath: Path, out: Path) -> dict:
    env = {**os.environ, "PYTHONPATH": str(pythonpath)}
    subprocess.run([sys.executable, __file__, "--page", page, "--child", str(out)], env=env, check=True)
    saved = np.load(out)
    return {k: saved[k] for k in saved.files}


def git(*args, text=True):
    """The output of ``git args`` in the repository."""
    return subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=text, check=True).stdout


def run(exp, args, res):
    if args.child:
        child(args.page, args.child)
        return False
    if not args.commit:
        raise SystemExit("--commit is required")
    computing("a fit under each library")
    pinned, today = (git("rev-parse", "--short", commit).strip() for commit in (args.commit, "HEAD"))
    dirty = bool(git("status", "--porcelain", "--", "as2rank").strip())
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        subprocess.run(["tar", "-x", "-C", str(tmp)], input=git("archive", pinned, "as2rank", text=False), check=True)
        log(f"fitting with the library at {pinned}")
        old = run_child(args.page, tmp, tmp / "old.npz")
        log(f"fitting with the library at {today}{' (with uncommitted changes)' if dirty else ''}")
        new = run_child(args.page, ROOT, tmp / "new.npz")
    res.update(page=args.page, pinned=pinned, today=today, today_dirty=dirty,
               digests={"pinned": str(old["digest"]), "today": str(new["digest"])}, rows=[])
    for key, row, name, params, precision in rows(args.page):
        diff = float(np.abs(old[key] - new[key]).max())
        res["rows"].append({"row": row, "class": name, "precision": precision, "max_abs_difference": diff,
                            "params": params, "max_abs_score": float(np.abs(new[key]).max())})
        log(f"{key}: max abs difference {diff:.2e}")


if __name__ == "__main__":
    experiment.main(__file__, run, page=lambda args: CONFIG["pages"][args.page])

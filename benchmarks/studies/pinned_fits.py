"""Fits of a pinned library commit standing for today's library: the same small fits trained by the library at
an earlier commit and by the checkout's, their predictions compared.

    python benchmarks/studies/pinned_fits.py --commit 0a3ef65 [--page context-library|defaults]

A benchmark page whose fits need more CPU hours than one session trains them over several sessions with the
library pinned at one commit (``git checkout <commit> -- as2rank`` in a worktree), since a stored fit is only
read back by the code that trained it (``harness.store.library_digest``). Such a page speaks for today's library only
if today's code trains the same models from the same data and parameters. This study fits every estimator of the
page (``ESTIMATORS``: each row's class with the parameters the page passes) under both libraries, on tiny random
encoders built from one config (BERT-shaped, or MPNet-shaped for the rows of ``model="mpnet-base"``) and a
word-level tokenizer, synthetic questions over documents with their
contexts, on the CPU at float32 and at the default precision, one thread, the same seed, and compares the
predictions. Each library runs in its
own process (``--child``); the pinned one is ``git archive <commit> as2rank`` unpacked in a temporary folder.

Writes ``benchmarks/studies/results/pinned_fits.json`` and ``docs/studies/pinned_fits.md`` for the page
``context-library``, ``pinned_fits-<page>`` for another (``-<tag>`` with ``AS2RANK_BENCH_TAG``); ``python benchmarks/render.py pinned_fits`` renders the page again.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from itertools import product
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the harness

import numpy as np
from harness import conclude, library_digest, log, run_header

REPO = Path(__file__).resolve().parents[2]
#: The rows of each page, as (row, class, parameters): the classes and parameters its fits pass (besides the
#: tiny model, the budget and the device below).
ESTIMATORS = {
    "context-library": [
        ("No context", "TransformerRanker", {}),
        ("Local", "ContextConcat", {"contexts": ("local",)}),
        ("Global", "ContextConcat", {"contexts": ("global",)}),
        ("Ensemble", "ContextEnsemble", {"segment_similarity": True}),
        ("Concat", "ContextConcat", {}),
        ("MWA", "ContextMWA", {"segment_similarity": True}),
        ("MWA, no segment similarity", "ContextMWA", {"segment_similarity": False}),
    ],
    # The TransformerRanker rows of the defaults page: the library default on MiniLM (a BERT), and on MPNet.
    "defaults": [
        ("Library default (BERT-shaped)", "TransformerRanker", {}),
        ("MPNet", "TransformerRanker", {"encoder": "mpnet"}),
    ],
}
#: What every fit shares: two epochs of a tiny encoder at a learning rate that moves it, on the CPU.
COMMON = {"epochs": 2, "batch_size": 8, "learning_rate": 1e-3, "random_state": 0, "device": "cpu"}
#: Each row is fitted at each precision: float32, and the library's default (``auto``: bfloat16 where the CPU
#: has it, as the pages' fits ran).
PRECISIONS = ("fp32", "auto")
#: Context rankers' lengths (the tiny encoder has 50 positions).
LENGTHS = {"max_length": 48, "max_pair_length": 24}
#: Largest difference of two predictions that rounding explains, per precision: logits of magnitude ~1-5
#: computed in another order by code that computes the same model; bfloat16 keeps 8 significant bits, so one
#: rounding of a logit near 4 moves it by up to 2**-8 * 4 = 0.016.
TOLERANCE = {"fp32": 1e-5, "auto": 1e-2}
WORDS = ("the a of in is was who what when where capital city river wrote built tower france paris hamlet book king "
         "queen year played first largest").split()
SPECIAL = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
#: MPNet's special tokens at all-mpnet-base-v2's ids: its embeddings take id 1 for padding whatever the tokenizer says.
MPNET_SPECIAL = ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]


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
    return pd.DataFrame(rows, columns=["qid", "question", "candidate", "position", "doc_id", "doc_position"]), np.array(labels)


def _encoder(kind: str):
    """A tiny random encoder's config and its word-level tokenizer: BERT-shaped, or MPNet-shaped."""
    import transformers

    shape = dict(hidden_size=32, num_hidden_layers=4, num_attention_heads=2, intermediate_size=64,
                 max_position_embeddings=50)
    if kind == "mpnet":
        vocab = {w: i for i, w in enumerate(MPNET_SPECIAL + list(WORDS))}
        return (transformers.MPNetConfig(vocab_size=len(vocab), **shape),
                transformers.MPNetTokenizer(vocab=vocab, unk_token="<unk>"))
    vocab = {w: i for i, w in enumerate(SPECIAL + list(WORDS))}
    return transformers.BertConfig(vocab_size=len(vocab), **shape), transformers.BertTokenizerFast(vocab=vocab)


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
    for (row, name, params), precision in product(ESTIMATORS[page], PRECISIONS):
        params = dict(params)
        config, tokenizer = _encoder(params.pop("encoder", "bert"))
        lengths = {"max_length": LENGTHS["max_length"]} if name == "TransformerRanker" else LENGTHS
        est = classes[name](model=config, tokenizer=tokenizer, precision=precision, **COMMON, **lengths, **params)
        scores[f"{row} / {precision}"] = est.fit(X, y).predict(X)
    np.savez(out, digest=library_digest(), path=str(Path(as2rank.__file__).resolve().parent), **scores)


def run_child(page: str, pythonpath: Path, out: Path) -> dict:
    env = {**os.environ, "PYTHONPATH": str(pythonpath)}
    subprocess.run([sys.executable, __file__, "--page", page, "--child", str(out)], env=env, check=True)
    saved = np.load(out)
    return {k: saved[k] for k in saved.files}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--commit", required=False, help="the pinned library's commit")
    parser.add_argument("--page", choices=tuple(ESTIMATORS), default="context-library")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        return child(args.page, args.child)
    if not args.commit:
        parser.error("--commit is required")
    start = time.perf_counter()
    git = ["git", "-C", str(REPO)]
    pinned = subprocess.run([*git, "rev-parse", "--short", args.commit], capture_output=True, text=True, check=True).stdout.strip()
    today = subprocess.run([*git, "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
    dirty = bool(subprocess.run([*git, "status", "--porcelain", "--", "as2rank"], capture_output=True, text=True).stdout.strip())
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        archive = subprocess.run([*git, "archive", pinned, "as2rank"], capture_output=True, check=True).stdout
        subprocess.run(["tar", "-x", "-C", str(tmp)], input=archive, check=True)
        log(f"fitting with the library at {pinned}")
        old = run_child(args.page, tmp, tmp / "old.npz")
        log(f"fitting with the library at {today}{' (with uncommitted changes)' if dirty else ''}")
        new = run_child(args.page, REPO, tmp / "new.npz")
    rows = []
    for (row, name, params), precision in product(ESTIMATORS[args.page], PRECISIONS):
        key = f"{row} / {precision}"
        diff = float(np.abs(old[key] - new[key]).max())
        rows.append({"row": row, "class": name, "precision": precision, "max_abs_difference": diff,
                     "params": {k: list(v) if isinstance(v, tuple) else v for k, v in params.items()},
                     "max_abs_score": float(np.abs(new[key]).max())})
        log(f"{key}: max abs difference {diff:.2e}")
    res = {**run_header("studies/pinned_fits.py", argv), "page": args.page, "pinned": pinned, "today": today,
           "today_dirty": dirty, "digests": {"pinned": str(old["digest"]), "today": str(new["digest"])},
           "common": COMMON, "lengths": LENGTHS, "tolerance": TOLERANCE, "rows": rows, "template": "pinned_fits"}
    checks = [{"check": f"{r['row']}, precision {r['precision']}: the pinned library and today's train the same model "
                        f"(predictions within {TOLERANCE[r['precision']]:g})",
               "measured": f"max abs difference {r['max_abs_difference']:.1e}",
               "pass": r["max_abs_difference"] <= TOLERANCE[r["precision"]]} for r in rows]
    conclude(res, "pinned_fits" if args.page == "context-library" else f"pinned_fits-{args.page}", start, checks)


if __name__ == "__main__":
    main()

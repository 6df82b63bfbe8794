"""Zero-shot cosine of the packaged BASE encoder against the default MiniLM on WikiQA-test (``zeroshot_mpnet.toml``).

    python benchmarks/studies/zeroshot_mpnet.py [--threads 1] [--models mpnet-base minilm-l6]
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the harness

from harness import experiment, wikiqa_splits
from harness.library import ZeroShotRanker, compare, evaluate, keep_answered, per_question, resolve_model
from harness.measure import clocked
from harness.store import computing


def run(exp, args, res):
    computing("the zero-shot scoring")
    import torch

    torch.set_num_threads(args.threads)
    res["torch_threads"] = torch.get_num_threads()
    X, y = keep_answered(*wikiqa_splits()["test"])  # the clean protocol
    res.update(questions=int(X["qid"].nunique()), pairs=len(X), rows=[])
    aps, base = {}, exp.config["base"]
    for model in args.models:
        _, resolved, _ = clocked(lambda: resolve_model(model))  # the first use of "mpnet-base" assembles the split zip
        ranker, loaded, _ = clocked(lambda: ZeroShotRanker(model=model, lexical=False, n_threads=args.threads).fit(X))
        scores, predicted, predicted_cpu = clocked(lambda: ranker.predict(X))
        aps[model] = per_question(y, scores, X)
        metrics = {k: 100 * v for k, v in evaluate(y, scores, X).items()}
        res["rows"].append({"model": model, "mode": ranker.mode_, **metrics, "resolve_seconds": resolved,
                            "load_seconds": loaded, "predict_seconds": predicted, "predict_cpu_seconds": predicted_cpu,
                            "pairs_per_second": len(X) / predicted})
    if base in aps and len(aps) > 1:
        res["tests"] = {name: row for name, row in compare(aps, base).items() if name != base}


if __name__ == "__main__":
    experiment.main(__file__, run)

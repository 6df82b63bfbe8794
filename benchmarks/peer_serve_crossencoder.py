"""The peer of ``benchmarks/serve.py``: sentence-transformers' ``CrossEncoder`` behind a plain FastAPI route.

    python benchmarks/peer_serve_crossencoder.py --model DIR --port PORT [--threads 2] [--max-length 128]

This is the service that sentence-transformers' maintainers advise for a CrossEncoder (a web app of one's own):
one synchronous route, ``POST /rerank``, that takes text-embeddings-inference's request (``query``, ``texts``),
calls ``CrossEncoder.predict`` on the pairs (its default ``batch_size=32``) and answers
``[{"index", "score"}]`` best first; FastAPI runs each request in its thread pool, so concurrent requests call
the model concurrently, as such a service does. ``GET /health`` answers once the model has scored once.

``--model`` is a local BERT-style checkpoint (the packaged all-MiniLM-L6-v2, the backbone the as2rank model
serves): a bi-encoder, so ``CrossEncoder`` gives it a new classification head, drawn with torch's seed 0 (a
forward pass costs the same whatever the weights). It imports nothing from as2rank.
"""

from __future__ import annotations

import argparse


def build_app(model_dir: str, max_length: int):
    import numpy as np
    import torch
    from fastapi import FastAPI
    from sentence_transformers import CrossEncoder

    torch.manual_seed(0)
    model = CrossEncoder(model_dir, num_labels=1, max_length=max_length, device="cpu")
    model.predict([("warm up", "one pair")])
    app = FastAPI()

    @app.get("/health")
    def health():
        return {"status": "ready"}

    @app.post("/rerank")
    def rerank(request: dict):
        texts = request["texts"]
        scores = np.asarray(model.predict([(request["query"], t) for t in texts], batch_size=32), dtype=float)
        order = np.lexsort((np.arange(len(texts)), -scores))
        return [{"index": int(i), "score": float(scores[i])} for i in order]

    return app


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--threads", type=int, default=2, help="torch's intra-op threads")
    parser.add_argument("--max-length", type=int, default=128)
    args = parser.parse_args(argv)
    import torch
    import uvicorn

    torch.set_num_threads(args.threads)
    uvicorn.run(build_app(args.model, args.max_length), host="127.0.0.1", port=args.port, log_level="warning",
                access_log=False)


if __name__ == "__main__":
    main()

"""``as2rank serve`` under load: requests/s and latency percentiles against a CrossEncoder service, on one host
(``serve.toml``).

    python benchmarks/serve.py [--seconds 8] [--rounds 3] [--train-questions 300] [--threads 2] [--quick]

Infinity (``infinity-emb``) is not run: it needs numpy < 2 and sentence-transformers < 4, which as2rank's environment
cannot hold.
"""

from __future__ import annotations

import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from harness import ROOT, experiment, figure_path, fitted, log, subset_questions, wikiqa_splits
from harness.experiment import Experiment
from harness.library import (CalibratedRanker, CascadeTransformer, OverlapRankRanker, TransformerRanker, as2rank,
                             resolve_model)
from harness.serving import Server, as2rank_cmd, bodies_of, cell_summary, hey, plot_load, running

CONFIG = Experiment(__file__).config
SERVERS, CASCADE_CONCURRENCY, CLIENT_TIMEOUT = CONFIG["servers"], CONFIG["cascade_concurrency"], CONFIG["client_timeout"]


def cells(args):
    """``(request kind, concurrency, server)`` of one round, in order."""
    out = []
    for kind in ("question", "100"):
        for c in args.concurrency:
            for name, kinds in SERVERS.items():
                if kind in kinds and (not name.startswith("cascade") or c in CASCADE_CONCURRENCY):
                    out.append((kind, c, name))
    return out


def run_load(servers, bodies, args) -> dict:
    table = {}
    for name, server in servers.items():  # one short cell each to warm the servers' caches and threads
        for kind in SERVERS[name]:
            hey(server.url, bodies[kind], 4, 2, CLIENT_TIMEOUT)
    for r in range(args.rounds):
        order = cells(args)
        for kind, c, name in order if r % 2 == 0 else order[::-1]:
            cell = hey(servers[name].url, bodies[kind], c, args.seconds, CLIENT_TIMEOUT)
            table.setdefault(kind, {}).setdefault(name, {}).setdefault(str(c), []).append(cell)
            errors = f", {cell['errors']} errors" if cell["errors"] else ""
            log(f"[round {r}] {kind} c={c} {name}: {cell['rps']:.1f} req/s, p99 {cell['p99_ms']:.0f} ms{errors}")
    summary = {}
    for kind, by_server in table.items():
        for name, by_c in by_server.items():
            for c, rounds in by_c.items():
                summary.setdefault(kind, {}).setdefault(name, {})[c] = cell_summary(rounds)
    return summary


# ----------------------------------------------------------------------------------------------- checks beside the load
def agreement(model, url, X) -> dict:
    """The served rankings, through ``/rerank`` and the cohere client, against ``as2rank.rank`` of each question's
    own frame in-process (what the server scores when the request is not batched with others). Also the largest
    score difference between the in-process scores of a question alone and within all the questions at once:
    how much a request's scores move with what it is batched with (reduced precision)."""
    import cohere
    import httpx

    co = cohere.Client(api_key="unused", base_url=url)
    together = model.predict(X)
    same, moved = {"tei": 0, "cohere": 0}, 0.0
    for qid, group in X.groupby("qid", sort=False):
        texts, query = group["candidate"].tolist(), group["question"].iloc[0]
        expected = as2rank.rank(model, group)["candidate"].tolist()
        moved = max(moved, float(np.max(np.abs(model.predict(group) - together[X.index.get_indexer(group.index)]))))
        tei = httpx.post(url + "/rerank", json={"query": query, "texts": texts}, timeout=60).json()
        same["tei"] += [texts[r["index"]] for r in tei] == expected
        res = co.rerank(model="as2rank", query=query, documents=texts)
        same["cohere"] += [texts[r.index] for r in res.results] == expected
    return {**same, "questions": int(X["qid"].nunique()), "batch_score_shift": moved,
            "precision": str(model.get_params().get("precision"))}


def answer_agreement(url, model, X, target_coverage=None) -> dict:
    """``/answer`` on every question of ``X`` against ``predict_answer``, at the model's threshold or at the one of
    ``target_coverage`` (given in each request): the same answer or abstention and the same top candidate."""
    import httpx

    cut = None if target_coverage is None else model.threshold_for(target_coverage=target_coverage)["threshold"]
    expected = model.predict_answer(X, threshold=cut).set_index("qid")
    extra = {} if target_coverage is None else {"target_coverage": target_coverage}
    same = 0
    for qid, group in X.groupby("qid", sort=False):
        got = httpx.post(url + "/answer", json={"question": group["question"].iloc[0],
                                                "candidates": group["candidate"].tolist(), **extra}, timeout=60).json()
        e = expected.loc[qid]
        same += got["answered"] == bool(e["answered"]) and (group.index[got["index"]] == X.index[int(e["row"])])
    return {"same": int(same), "questions": int(X["qid"].nunique()), "answered": int(expected["answered"].sum()),
            "target_coverage": target_coverage}


def server_errors(url) -> int:
    """Responses with status 5xx in the server's own ``/metrics``."""
    import httpx

    text = httpx.get(url + "/metrics", timeout=10).text
    return int(sum(float(m.group(1)) for m in re.finditer(r'as2rank_requests_total\{[^}]*status="5\d\d"[^}]*\} (\S+)', text)))


def fuzz(url, examples, cwd) -> dict:
    """``schemathesis`` against the OpenAPI schema (run in ``cwd``, where it keeps its example database); the 5xx
    responses the server counted meanwhile."""
    import httpx

    before = server_errors(url)
    out = subprocess.run(["schemathesis", "run", url + "/openapi.json", "--checks", "not_a_server_error",
                          "--max-examples", str(examples), "--seed", "0"], capture_output=True, text=True, timeout=900,
                         cwd=cwd)
    m = re.search(r"(\d+) generated, (\d+) passed", out.stdout)
    return {"generated": int(m.group(1)) if m else None, "passed": int(m.group(2)) if m else None,
            "exit": out.returncode, "server_5xx": server_errors(url) - before,
            "healthy_after": httpx.get(url + "/health", timeout=10).status_code == 200}


def sigterm_under_load(server: Server, body: Path) -> dict:
    """SIGTERM two seconds into a load of 16 clients: the server's own count of requests received and not answered
    (its last line), its exit status, and what ``hey`` saw."""
    load = subprocess.Popen(["hey", "-z", "6s", "-c", "16", "-m", "POST", "-T", "application/json", "-D", str(body),
                             server.url + "/rerank"], stdout=subprocess.PIPE, text=True)
    time.sleep(2)
    status = server.stop()
    out = load.communicate(timeout=120)[0]
    last = re.findall(r"stopped; (\d+) requests answered, (\d+) received and not answered", server.log.read_text())
    answered = sum(int(n) for n in re.findall(r"\[200\]\s+(\d+) responses", out))
    errors = re.findall(r"\[(\d+)\]\s+(.*)", out.split("Error distribution:")[-1]) if "Error distribution:" in out else []
    return {"exit_status": status, "server_answered": int(last[-1][0]) if last else None,
            "not_answered": int(last[-1][1]) if last else None, "client_200": answered,
            "refused": sum(int(n) for n, m in errors if "refused" in m),
            "reset": sum(int(n) for n, m in errors if "refused" not in m)}


def restart_identical(server: Server, texts_body: dict) -> dict:
    import httpx

    before = httpx.post(server.url + "/rerank", json=texts_body, timeout=60).json()
    server.stop(signal.SIGKILL)
    server.start().ready()
    after = httpx.post(server.url + "/rerank", json=texts_body, timeout=60).json()
    return {"identical": before == after, "texts": len(texts_body["texts"])}


# ----------------------------------------------------------------------------------------------- the run
def plot(res, path) -> None:
    plot_load([(title, {name: {c: v["rps"] for c, v in by_c.items()} for name, by_c in res["load"][kind].items()})
               for kind, title in (("question", "one WikiQA question"), ("100", "100 candidates"))], path)


def run(exp, args, res):
    args.concurrency = (1, 4) if args.quick else tuple(CONFIG["concurrency"])
    if not shutil.which("hey"):
        raise SystemExit("hey (the HTTP load generator) is not installed: apt-get install hey")
    splits = wikiqa_splits()
    X_train, y_train = subset_questions(*splits["train"], args.train_questions)
    fits = []
    tr = fitted(TransformerRanker(), X_train, y_train, fits)
    ct = fitted(CascadeTransformer(), X_train, y_train, fits)
    calibrated = fitted(CalibratedRanker(OverlapRankRanker(), cv=3), *splits["full"], fits)
    work = Path(tempfile.mkdtemp(prefix="as2rank-serve-bench-"))
    dirs = {"tr": work / "tr", "ct0": work / "ct0", "ct3": work / "ct3", "cal": work / "cal"}
    as2rank.save(tr, dirs["tr"])
    as2rank.save(ct.set_params(alpha=0.0), dirs["ct0"])
    as2rank.save(ct.set_params(alpha=0.3), dirs["ct3"])
    as2rank.save(calibrated, dirs["cal"])
    bodies, texts = bodies_of(splits, work)
    t = str(args.threads)
    peer = [sys.executable, str(ROOT / "benchmarks" / "peer_serve_crossencoder.py"), "--model", resolve_model("minilm-l6")[0],
            "--threads", t]
    servers = {"as2rank": Server("as2rank", as2rank_cmd(dirs["tr"], t), work),
               "as2rank, one request per call": Server("as2rank-single", as2rank_cmd(dirs["tr"], t, "--no-dynamic-batching"), work),
               "CrossEncoder (FastAPI)": Server("crossencoder", peer, work),
               "cascade α = 0": Server("cascade-0", as2rank_cmd(dirs["ct0"], t), work),
               "cascade α = 0.3": Server("cascade-03", as2rank_cmd(dirs["ct3"], t), work)}
    with running(servers):
        log("servers ready: " + ", ".join(f"{n} :{s.port}" for n, s in servers.items()))
        res.update(fits=fits, threads=args.threads, fuzz_examples=args.fuzz_examples, seconds=args.seconds, rounds=args.rounds,
                   concurrency=list(args.concurrency), n_train_questions=int(X_train["qid"].nunique()),
                   requests={k: len(v["texts"]) for k, v in texts.items()},
                   hey=subprocess.run(["dpkg-query", "-W", "-f", "${Version}", "hey"], capture_output=True, text=True).stdout,
                   quick="16 training questions, 2 s cells, one round" if args.quick else "")
        X_test = splits["test"][0]
        X_test = X_test.assign(position=X_test.groupby("qid", sort=False).cumcount())  # a request's order
        res["agreement"] = agreement(tr, servers["as2rank"].url, subset_questions(X_test, splits["test"][1], 20, seed=1)[0])
        log(f"agreement: {res['agreement']}")
        res["load"] = run_load(servers, bodies, args)
        res["fuzz"] = fuzz(servers["as2rank"].url, args.fuzz_examples, work)
        log(f"fuzz: {res['fuzz']}")
        res["restart"] = restart_identical(servers["as2rank"], texts["100"])
        res["sigterm"] = sigterm_under_load(servers["as2rank"], bodies["question"])
        log(f"sigterm: {res['sigterm']}")
    X_ans = X_test if not args.quick else subset_questions(X_test, splits["test"][1], 30)[0]
    with running({"calibrated": Server("calibrated", as2rank_cmd(dirs["cal"], t), work)}) as cal:
        res["answer"] = [answer_agreement(cal["calibrated"].url, calibrated, X_ans.reset_index(drop=True), coverage)
                         for coverage in (None, 0.5)]
    log(f"answer: {res['answer']}")
    plot(res, figure_path("serve", "serve.png"))


if __name__ == "__main__":
    experiment.main(__file__, run)

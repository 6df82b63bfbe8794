"""How long ``as2rank serve`` should let a request wait for others (``--max-wait-ms``), measured under load
(``max_wait.toml``).

    python benchmarks/studies/max_wait.py [--seconds 4] [--rounds 3] [--train-questions 300] [--threads 2] [--quick]
"""

from __future__ import annotations

import inspect
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the harness

import numpy as np
from harness import ROOT, experiment, figure_path, fitted, log, subset_questions, wikiqa_splits
from harness.library import TransformerRanker, as2rank, compare, create_app, resolve_model
from harness.measure import rotated, significance
from harness.serving import Server, as2rank_cmd, bodies_of, cell_summary, hey, plot_load, running

PEER = "CrossEncoder (FastAPI)"


def label(ms, fixed=False) -> str:
    """A server's name: its ``--max-wait-ms`` value, and ``--fixed-wait`` when every call waits."""
    return f"{ms:g}" + (" --fixed-wait" if fixed else "")


def analyse(load: dict, ours: list, default: str) -> dict:
    """``score``: each setting's geometric mean, over the (request, clients) cells, of its median requests/s over
    the best setting's; ``best``: the setting of the highest score; ``vs_default``: each setting against the
    default over every cell's rounds (paired by round, the cells of a round being interleaved): its geometric-mean
    ratio of requests/s, the rounds it was ahead in, and the p-value of a paired randomisation test of the log
    requests/s."""
    ratios = {name: [] for name in ours}
    for row in (row for by_c in load.values() for row in by_c.values()):
        best = max(row[name]["rps"] for name in ours)
        for name in ours:
            ratios[name].append(row[name]["rps"] / best)
    score = {name: float(np.exp(np.mean(np.log(v)))) for name, v in ratios.items()}
    rounds = {name: np.log(np.maximum([r for by_c in load.values() for row in by_c.values()
                                       for r in row[name]["rounds_rps"]], 1e-9)) for name in ours}
    tests = compare(rounds, default)
    vs_default = {name: {"ratio": float(np.exp(np.mean(rounds[name] - rounds[default]))),
                         "ahead": int(np.sum(rounds[name] > rounds[default])), "units": len(rounds[default]),
                         "p": tests[name]["p"]} for name in ours if name != default}
    return {"score": score, "best": max(score, key=score.get), "vs_default": vs_default,
            "alpha": significance()["alpha"]}


def plot(res, path) -> None:
    plot_load([(f"{res['requests'][kind]} candidates", {
        name if name == PEER else f"--max-wait-ms {name}": {c: row[name]["rps"] for c, row in res["load"][kind].items()}
        for name in res["servers"]}) for kind in res["kinds"]], path)


def run(exp, args, res):
    cfg = exp.config
    if not shutil.which("hey"):
        raise SystemExit("hey (the HTTP load generator) is not installed: apt-get install hey")
    concurrency = [1, 4] if args.quick else cfg["concurrency"]
    splits = wikiqa_splits()
    X_train, y_train = subset_questions(*splits["train"], args.train_questions)
    fits = []
    tr = fitted(TransformerRanker(), X_train, y_train, fits)
    work = Path(tempfile.mkdtemp(prefix="as2rank-max-wait-"))
    as2rank.save(tr, work / "tr")
    bodies, texts = bodies_of(splits, work)
    t = str(args.threads)
    settings = [(ms, False) for ms in cfg["wait_ms"]] + [(ms, True) for ms in cfg.get("fixed_wait_ms", [])]
    servers = {label(ms, fixed): Server(f"wait-{ms}{'-fixed' if fixed else ''}", as2rank_cmd(
        work / "tr", t, "--max-wait-ms", str(ms), *(["--fixed-wait"] if fixed else [])), work)
        for ms, fixed in settings}
    servers[PEER] = Server("crossencoder", [sys.executable, str(ROOT / "benchmarks" / "peer_serve_crossencoder.py"),
                                            "--model", resolve_model("minilm-l6")[0], "--threads", t], work)
    res.update(fits=fits, threads=args.threads, seconds=args.seconds, rounds=args.rounds, concurrency=concurrency,
               settings=[label(ms, fixed) for ms, fixed in settings], kinds=cfg["kinds"],
               n_train_questions=int(X_train["qid"].nunique()),
               requests={k: len(v["texts"]) for k, v in texts.items()},
               library_default_ms=inspect.signature(create_app).parameters["max_wait_ms"].default,
               quick="16 training questions, 1 s cells, concurrency 1 and 4, one round" if args.quick else "")
    with running(servers):
        load(res, servers, bodies, concurrency, args, cfg)
    shutil.rmtree(work, ignore_errors=True)
    res.update(analyse(res["load"], res["settings"], label(res["library_default_ms"])))
    plot(res, figure_path(exp.template, "max_wait.png"))


def load(res, servers, bodies, concurrency, args, cfg) -> None:
    """The load cells, every round interleaved, into ``res["load"]``: each cell's rounds as one row."""
    for name, server in servers.items():  # one short cell each: the servers' first calls
        for kind in cfg["kinds"]:
            hey(server.url, bodies[kind], 4, 1, cfg["client_timeout"])
    cells, names = {}, list(servers)
    res["servers"] = names
    for r in range(args.rounds):
        for kind in cfg["kinds"]:
            for c in concurrency:
                for name in rotated(names, r + c):
                    cell = hey(servers[name].url, bodies[kind], c, args.seconds, cfg["client_timeout"])
                    cells.setdefault(kind, {}).setdefault(str(c), {}).setdefault(name, []).append(cell)
                log(f"[round {r + 1}/{args.rounds}] {kind} c={c}: " + ", ".join(
                    f"{n} {cells[kind][str(c)][n][-1]['rps']:.1f}" for n in names) + " req/s")
    res["load"] = {kind: {c: {name: cell_summary(runs) for name, runs in by_name.items()} for c, by_name in by_c.items()}
                   for kind, by_c in cells.items()}


if __name__ == "__main__":
    experiment.main(__file__, run)

"""What every experiment shares: its configuration, its command line, its run, its checks and its page.

An experiment ``benchmarks/<name>.py`` (a study: ``benchmarks/studies/<name>.py``) has its configuration beside
it, ``<name>.toml``:

- ``title``: what the experiment measures, in one line (the command line's description);
- ``page``: the results file and page it writes (without the machine's tag), ``template`` its template
  (default: ``page``);
- ``paper``: a file of ``benchmarks/papers/`` holding the tables of the paper it reproduces (JSON);
- ``[options]``: its command-line options beyond the harness's own, each ``name = {type, default, help,
  choices, nargs, flag, hidden, metavar}`` (``--name``; ``type`` one of ``int``, ``float``, ``str``, ``path``,
  ``seeds`` (``"paper"`` or a float, for a learning rate: ``lr``); ``flag``: a switch; ``hidden``: a mode of the
  script's own subprocesses);
- ``[quick]``: the option values of ``--quick`` (an end-to-end check), where the command line gives none;
- ``[record]``: values of the configuration that the results record (what its page shows of it);
- ``[[checks]]``: the acceptance checks (:mod:`harness.checks`), and ``[check_names]``: names they share;
- any other table: its data, models and budgets, read by its module as ``exp.config[...]``.

TOML has no null: the string ``"null"`` is read as None.

The harness's own options: ``--threads N`` (torch's CPU threads), ``--quick`` (when there is a ``[quick]``),
``--render`` (the page again from its saved results) and ``--cached-only`` (read every fit and score from the
stores, compute nothing, and compare what that gives with the saved results instead of writing them).
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
import time
from pathlib import Path

from harness import store
from harness.checks import evaluate
from harness.machine import log, run_header
from harness.pages import conclude, folders, publish, render_page
from harness.paths import BENCHMARKS, ROOT, tagged
from harness.store import NotStored, jsonable, write_text

TYPES = {"int": int, "float": float, "str": str, "path": Path,
         "lr": lambda v: None if v == "paper" else float(v)}
#: Keys of a results file that change with every run (when, where, how long): a ``--cached-only`` comparison
#: leaves them out.
VOLATILE = {"command", "date", "machine", "torch", "torch_threads", "load_average_start", "load_average_end",
            "wall_seconds", "note", "template", "tag", "fits", "acceptance"}


def nulls(value):
    """``value`` with the string ``"null"`` (TOML has no null) as None, in every table and list."""
    if isinstance(value, dict):
        return {k: nulls(v) for k, v in value.items()}
    if isinstance(value, list):
        return [nulls(v) for v in value]
    return None if value == "null" else value


def load_config(path: Path) -> dict:
    """The TOML file ``path`` (``tomllib``, or ``tomli`` before Python 3.11), ``"null"`` read as None."""
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10: the bench extra installs tomli
        import tomli as tomllib

    return nulls(tomllib.loads(path.read_text(encoding="utf-8")))


def read_paper(name: str):
    """The paper's tables of ``benchmarks/papers/<name>``."""
    return json.loads((BENCHMARKS / "papers" / name).read_text(encoding="utf-8"))


class Experiment:
    """The experiment whose module is ``file``: its configuration (``config``), its paper's tables (``paper``)
    and the harness's part of its run."""

    def __init__(self, file: str):
        path = Path(file).resolve()
        self.name = path.stem
        self.script = str(path.relative_to(BENCHMARKS))
        self.config = load_config(path.with_suffix(".toml"))
        self.paper = read_paper(self.config["paper"]) if "paper" in self.config else None
        self.page = self.config.get("page", self.name)
        self.template = self.config.get("template", self.page)

    # ------------------------------------------------------------------------------------------- the command line
    def parser(self) -> argparse.ArgumentParser:
        parser = argparse.ArgumentParser(description=self.config["title"])
        options = self.config.get("options", {})
        for name, spec in options.items():
            kwargs = {"help": argparse.SUPPRESS if spec.get("hidden") else spec.get("help")}
            if spec.get("flag"):
                parser.add_argument(f"--{name}", action="store_true", **kwargs)
                continue
            for key in ("choices", "nargs", "metavar"):
                if key in spec:
                    kwargs[key] = spec[key]
            parser.add_argument(f"--{name}", type=TYPES[spec.get("type", "str")], default=None, **kwargs)
        if "threads" not in options:
            parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's)")
        if "quick" in self.config and "quick" not in options:
            parser.add_argument("--quick", action="store_true", help="a short end-to-end check, not a result")
        parser.add_argument("--render", action="store_true", help="only render the page again from its saved results")
        parser.add_argument("--cached-only", action="store_true",
                            help="compute nothing: read every fit and score from the stores and compare the results "
                                 "with the saved ones (what is not stored stops the run, saying what)")
        return parser

    def arguments(self, argv=None) -> argparse.Namespace:
        """The parsed command line: an option not given takes its ``[quick]`` value under ``--quick``, else its
        default; ``--threads`` is applied and ``--cached-only`` set."""
        args = self.parser().parse_args(argv)
        quick = self.config.get("quick", {}) if getattr(args, "quick", False) else {}
        for name, spec in self.config.get("options", {}).items():
            key = name.replace("-", "_")
            if getattr(args, key) is None:
                setattr(args, key, copy.deepcopy(quick.get(name, spec.get("default"))))
        if args.threads and "threads" not in self.config.get("options", {}):
            import torch

            torch.set_num_threads(args.threads)
        store.CACHED_ONLY = store.CACHED_ONLY or args.cached_only
        return args

    # ------------------------------------------------------------------------------------------- the run
    def header(self, argv=None, **record) -> dict:
        """The run's results so far: the run header (:func:`harness.machine.run_header`), the configuration's
        ``[record]`` (what the page shows of the configuration) and ``record``."""
        return {**run_header(self.script, argv), **copy.deepcopy(self.config.get("record", {})), **record}

    def checks(self, res: dict, **context) -> list:
        """The configuration's acceptance checks evaluated on ``res`` (and the names of ``context``), after the
        names of its ``[check_names]`` (expressions evaluated in order, visible to every check)."""
        return evaluate(self.config.get("checks", []), {"res": res, "config": self.config, **context},
                        self.config.get("check_names", {}))

    def finish(self, res: dict, start: float, page: str | None = None, checks=None, **context) -> Path | None:
        """End the run: its acceptance checks (``checks``, else the configuration's), then the results file and
        the page ``page`` (default: the experiment's); in a ``--cached-only`` run, the comparison with the saved
        results instead."""
        res.setdefault("template", self.template)
        page = page or self.page
        if store.CACHED_ONLY:
            return self.compare_saved(res, page)
        if checks is None and "checks" in self.config:
            checks = self.checks(res, **context)
        return conclude(res, page, start, checks)

    def publish(self, res: dict, page: str | None = None) -> Path:
        """Save and render ``res`` without checks (or compare it in a ``--cached-only`` run)."""
        res.setdefault("template", self.template)
        if store.CACHED_ONLY:
            return self.compare_saved(res, page or self.page)
        return publish(res, page or self.page)

    def render(self, page: str | None = None) -> Path:
        """The page ``page`` rendered again from its saved results."""
        results, docs = folders(self.template)
        stem = tagged(f"{page or self.page}.json")[: -len(".json")]
        out = docs / f"{stem}.md"
        write_text(out, render_page(json.loads((results / f"{stem}.json").read_text())))
        log(f"rendered {out.relative_to(ROOT)}")
        return out

    def saved(self, page: str | None = None) -> dict:
        """The saved results of ``page`` (default: the experiment's), with the machine's tag."""
        stem = tagged(f"{page or self.page}.json")[: -len(".json")]
        return json.loads((folders(self.template)[0] / f"{stem}.json").read_text())

    def compare_saved(self, res: dict, page: str) -> None:
        """Print, key by key, whether ``res`` (a ``--cached-only`` run's) equals the saved results of ``page``,
        but the keys that change with every run (:data:`VOLATILE`); exit 1 on a difference."""
        saved = self.saved(page)
        res = jsonable(res)
        differ = []
        for key, value in res.items():
            if key in VOLATILE or value in ({}, []):  # a part the run had only begun
                continue
            verdict = "not saved" if key not in saved else "same" if saved[key] == value else "DIFFERS"
            differ += [key] if verdict == "DIFFERS" else []
            log(f"[cached-only] {key}: {verdict}")
        missing = sorted(set(saved) - set(res) - VOLATILE)
        if missing:
            log(f"[cached-only] not reproduced (computing them is not reading them): {', '.join(missing)}")
        if differ:
            raise SystemExit(f"--cached-only: {', '.join(differ)} differ from the saved results of {page}")
        log(f"[cached-only] {page}: every key reproduced is the same as saved")


def main(file: str, run, argv=None, checks=None, page=None) -> None:
    """The usual flow of an experiment: parse the command line; ``--render`` renders its page again; otherwise
    ``run(exp, args, res)`` fills ``res`` (started with the run header) and the run ends with
    :meth:`Experiment.finish` (unless ``run`` returns False: a partial run that writes no page), its checks
    those of ``checks(exp, res)`` when given (the configuration's with names only the module can give), its
    page ``page(args)`` when given. A ``--cached-only`` run that meets something not stored compares what it
    reproduced before it."""
    exp = Experiment(file)
    args = exp.arguments(argv)
    if page is not None:
        exp.page = page(args)
    if args.render:
        exp.render()
        return
    start = time.perf_counter()
    res = exp.header(argv)
    try:
        if run(exp, args, res) is False:
            return
    except NotStored as refused:
        log(str(refused))
        exp.compare_saved(res, exp.page)
        sys.exit(0)
    exp.finish(res, start, checks=None if checks is None or store.CACHED_ONLY else checks(exp, res))

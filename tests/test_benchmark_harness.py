"""The benchmark harness's stores (``benchmarks/harness/store.py``): a fit scored once is read back instead of
trained again, and only for the same fit, inference parameters and test data, while the code it ran is unchanged."""

import ast
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from as2rank import WordOverlapRanker


@pytest.fixture
def common(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[1] / "benchmarks"))
    from harness import store

    monkeypatch.setattr(store, "CACHE", tmp_path / "cache")
    monkeypatch.setattr(store, "SCORES", tmp_path / "scores")
    return store


def frame(words):
    return pd.DataFrame({"qid": [0] * len(words), "question": ["where is the cat"] * len(words), "candidate": words})


def test_stored_scores_are_read_back_for_the_same_fit_only(common, monkeypatch):
    X = frame(["the cat is here", "a dog", "cats sleep", "where"])
    y = np.array([1, 0, 0, 0])
    X_test = frame(["where is it", "the cat sat", "nothing"])
    log = []
    scores, model = common.fitted_scores(WordOverlapRanker(), X, y, X_test, log)
    assert model is not None and not log[-1]["cached"]
    np.testing.assert_array_equal(scores, model.predict(X_test))
    assert log[-1]["machine"] == log[-1]["scored_on"] == common.machine()

    # A second call reads the stored scores: no fit (fitting now would fail) and the record of the first.
    monkeypatch.setattr(WordOverlapRanker, "fit", lambda *a, **k: pytest.fail("fitted again"))
    again, model = common.fitted_scores(WordOverlapRanker(), X, y, X_test, log)
    assert model is None and log[-1]["cached"]
    np.testing.assert_array_equal(again, scores)
    assert log[-1]["date"] == log[-2]["date"]
    stored = list((common.SCORES).glob("*.npz"))
    assert len(stored) == 1 and json.loads(str(np.load(stored[0])["record"]))["scored_on"] == common.machine()

    # Other test data: the model (from the fit cache) scores them, a second entry in the store.
    other = frame(["another", "the cat is here"])
    scores, model = common.fitted_scores(WordOverlapRanker(), X, y, other, log)
    assert model is not None and log[-1]["cached"]
    np.testing.assert_array_equal(scores, model.predict(other))
    assert len(list(common.SCORES.glob("*.npz"))) == 2
    # Other training labels: another fit.
    with pytest.raises(pytest.fail.Exception, match="fitted again"):
        common.fitted_scores(WordOverlapRanker(), X, np.array([0, 1, 0, 0]), X_test, log)


def test_library_digest_follows_the_code_not_its_documentation(common, tmp_path):
    package = tmp_path / "pkg"
    package.mkdir()
    module = package / "mod.py"
    module.write_text('"""A module."""\n\ndef f(x):\n    """Twice x."""\n    return 2 * x  # doubled\n')
    before = common.library_digest(package)
    # Docstrings, comments and blank lines: the same code.
    module.write_text('"""Another text."""\n\n\ndef f(x):\n    """Two times x,\n    reworded."""\n    # why\n    return 2 * x\n')
    assert common.library_digest(package) == before
    # A docstring removed from a function whose body is nothing else: still the same code.
    (package / "empty.py").write_text("def g():\n    pass\n")
    with_pass = common.library_digest(package)
    (package / "empty.py").write_text('def g():\n    """Nothing."""\n')
    assert common.library_digest(package) == with_pass
    # Another constant, another name, another file: other code.
    for text in ('def f(x):\n    return 3 * x\n', 'def h(x):\n    return 2 * x\n'):
        module.write_text(text)
        assert common.library_digest(package) != before
    reference = common.library_digest(package)
    (package / "empty.py").rename(package / "other.py")
    assert common.library_digest(package) != reference


def test_library_digest_leaves_out_the_application_floor(common, tmp_path):
    # The command line (app/, __main__.py) is above every estimator (tests/test_layering.py): a change there
    # cannot change a fit, so it keeps the fit keys; any other module changes them.
    package = tmp_path / "pkg"
    (package / "app").mkdir(parents=True)
    (package / "core.py").write_text("X = 1\n")
    (package / "app" / "cli.py").write_text("Y = 1\n")
    (package / "__main__.py").write_text("Z = 1\n")
    before = common.library_digest(package)
    (package / "app" / "cli.py").write_text("Y = 2\n")
    (package / "__main__.py").write_text("Z = 2\n")
    assert common.library_digest(package) == before
    assert common.library_digest(package, application=True) != common.library_digest(package)
    (package / "core.py").write_text("X = 2\n")
    assert common.library_digest(package) != before


def test_defaults_page_pools_a_variant_over_its_columns(common):
    # The defaults benchmark judges a candidate default (a variant row) against the library default over every
    # column that measured both; a test question scored at several training sizes counts once, its AP
    # difference averaged over them.
    _toml()  # the experiments' configuration
    import defaults

    from as2rank.metrics import paired_significance

    def run(data, size, name, ap):
        return {"data": data, "size": size, "seed": 0, "name": name, "test": {"ap": ap}, "library": "x", "date": "d"}

    entries = [run("sample", "100", "library default", [0.5, 1, 0]), run("sample", "100", "listwise", [1, 1, 0]),
               run("sample", "300", "library default", [0.5, 1, 1]), run("sample", "300", "listwise", [0.5, 0.5, 1]),
               run("wikiqa", "100", "library default", [0, 0]), run("wikiqa", "100", "listwise", [1, 1]),
               # Today's default itself (TransformerRanker() has the segment similarity): no candidate.
               run("wikiqa", "100", "segment similarity", [0, 1])]
    res = {"curves": {}, "refs": {str(i): e for i, e in enumerate(entries)}}
    (row,) = defaults.variants_vs_default(res, "transformer", "library default")
    assert row["name"] == "listwise" and row["columns"] == 3 and row["ahead"] == 2
    assert row["delta"] == pytest.approx((1 / 6 - 1 / 6 + 1) / 3)
    variant, default = [0.75, 0.75, 0.5, 1, 1], [0.5, 1, 0.5, 0, 0]
    assert row["p"] == pytest.approx(paired_significance(np.array(variant), np.array(default)))


FIT_ONCE = """
import sys, json
import numpy as np, pandas as pd
sys.path.insert(0, {bench!r})
from harness import store
from pathlib import Path
store.CACHE = Path({cache!r})
from as2rank import WordOverlapRanker
X = pd.DataFrame({{"qid": [0, 0, 1, 1], "question": ["where is the cat"] * 2 + ["who is it"] * 2,
                  "candidate": ["the cat is here", "a dog", "it is me", "nobody"]}})
log = []
store.fitted(WordOverlapRanker(), X, np.array([1, 0, 1, 0]), log)
print(json.dumps({{"cached": log[-1]["cached"], "code": sorted(log[-1]["code"])}}))
"""


@pytest.mark.slow  # starts seven processes, each importing the library anew
def test_a_stored_fit_is_read_back_only_by_the_code_that_ran_it(tmp_path):
    # A copy of the library, edited between runs: the fit cache keys what was asked (class, parameters, data)
    # and checks the code the fit ran; an edit of code the fit never ran, or of a docstring, keeps the fit.
    import shutil
    import subprocess
    import sys

    import as2rank

    root = Path(__file__).resolve().parents[1]
    shutil.copytree(Path(as2rank.__file__).parent, tmp_path / "as2rank", ignore=shutil.ignore_patterns("__pycache__"))
    script = FIT_ONCE.format(bench=str(root / "benchmarks"), cache=str(tmp_path / "cache"))

    def run():
        out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True,
                             env={**__import__("os").environ, "PYTHONPATH": str(tmp_path)}, cwd=tmp_path)
        return json.loads(out.stdout.strip().splitlines()[-1])

    first = run()
    ran = {e.split("::")[1] for e in first["code"] if e.startswith("lexical/baselines.py::")}
    assert not first["cached"] and "_RuleRanker.fit" in ran
    assert not any(e.startswith("app/") for e in first["code"])
    assert run()["cached"]
    lexical = tmp_path / "as2rank" / "lexical" / "baselines.py"
    source = lexical.read_text()
    # Not run by the fit: the command line, and the lexical module's functions that the fit did not call.
    cli = tmp_path / "as2rank" / "app" / "cli.py"
    cli.write_text(cli.read_text() + "\n\ndef _unused():\n    return 1\n")
    assert run()["cached"]
    rule = next(n for n in ast.parse(source).body if isinstance(n, ast.ClassDef) and n.name == "_RuleRanker")
    idle = next(n for n in rule.body if isinstance(n, ast.FunctionDef) and n.name == "predict")
    assert "_RuleRanker.predict" not in ran
    lines = source.splitlines(keepends=True)
    body = idle.body[-1]
    lines.insert(body.lineno - 1, " " * body.col_offset + "_ = None\n")
    lexical.write_text("".join(lines))
    assert run()["cached"]
    # Comments and layout are not code.
    lexical.write_text(source + "\n# a comment\n")
    assert run()["cached"]
    # The fit's own code: a constant at module level, then the body of the fit: fitted again, then read back.
    lexical.write_text(source + "\n\nEXTRA = 1\n")
    assert not run()["cached"]
    assert run()["cached"]
    fit = next(n for n in rule.body if isinstance(n, ast.FunctionDef) and n.name == "fit")
    lines = source.splitlines(keepends=True)
    lines.insert(fit.body[-1].lineno - 1, " " * fit.body[-1].col_offset + "_ = None\n")
    lexical.write_text("".join(lines))
    assert not run()["cached"]


def test_teacher_artefacts_are_read_back_only_for_the_same_teacher_data_and_code(common, monkeypatch):
    # The teacher artefacts (benchmarks/harness/teachers.py) hold a costly teacher's scores; a later run reads them
    # instead of the model. Another training set, another parameter, or a change of the code that fitted and
    # scored them (as the stored record says) computes them again.
    from harness import teachers

    monkeypatch.setattr(teachers, "SCORES", common.SCORES)
    X = pd.DataFrame({"qid": [0, 0, 0, 1, 1, 1], "question": ["where is the cat"] * 3 + ["who is it"] * 3,
                      "candidate": ["the cat is here", "a dog", "cats", "it is me", "nobody", "who"]})
    y = np.array([1, 0, 0, 1, 0, 0])
    X_dev, X_test = X.iloc[:3].reset_index(drop=True), X.iloc[3:].reset_index(drop=True)
    data = ((X, y), (X_dev, y[:3]), (X_test, y[3:]))
    fits = []
    first, n = teachers.teacher_scores(WordOverlapRanker(), data, fits, "teacher")
    assert not fits[-1]["cached"] and n == 0 and set(first) == {"test", "train", "dev"}
    np.testing.assert_array_equal(first["test"], WordOverlapRanker().fit(X, y).predict(X_test))
    again, _ = teachers.teacher_scores(WordOverlapRanker(), data, fits, "teacher")
    assert fits[-1]["cached"] and fits[-1]["row"] == "teacher"
    for part in first:
        np.testing.assert_array_equal(again[part], first[part])
    # Other labels, other parameters: other teachers.
    teachers.teacher_scores(WordOverlapRanker(), ((X, 1 - y), *data[1:]), fits, "teacher")
    assert not fits[-1]["cached"]
    teachers.teacher_scores(WordOverlapRanker(lowercase=False), data, fits, "teacher")
    assert not fits[-1]["cached"]
    # A stored artefact whose record says other code ran: computed again, and stored with today's code.
    (path,) = [p for p in common.SCORES.glob("teacher_scores-*.npz") if common.load_stored(p)[0]["key"] == fits[0]["key"]]
    record, arrays = common.load_stored(path)
    entry = next(iter(record["code"]))
    common.save_stored(path, {**record, "code": {**record["code"], entry: "0" * 64}}, arrays)
    monkeypatch.setattr(WordOverlapRanker, "predict", lambda self, X: np.full(len(X), 7.0))
    rescored, _ = teachers.teacher_scores(WordOverlapRanker(), data, fits, "teacher")
    assert (rescored["test"] == 7.0).all() and common.load_stored(path)[0]["code"][entry] != "0" * 64
    again, _ = teachers.teacher_scores(WordOverlapRanker(), data, fits, "teacher")
    assert fits[-1]["cached"] and (again["dev"] == 7.0).all()


# The keys of the stores as the harness computed them before it was a package (benchmarks/_common.py), frozen
# here: a fit cached, or scores stored, by the earlier harness must be found by this one under the same key.
def reference_cache_key(est, X, y) -> str:
    import joblib

    inference = set(getattr(est, "_inference_params", ()))
    params = {k: v for k, v in est.get_params().items() if k not in inference}
    weights = None
    if isinstance(params.get("model"), str):
        from as2rank.neural.fitcache import source_digests

        weights = source_digests(params["model"], params.get("tokenizer"))
    return joblib.hash((type(est).__name__, params, weights, X, y))


def reference_scores_key(est, X, y, X_test, **fit_params) -> str:
    import joblib

    inference = {k: v for k, v in est.get_params(deep=False).items() if k in getattr(est, "_inference_params", ())}
    return joblib.hash((reference_cache_key(est, X, y), fit_params, inference, X_test))


def small_estimators():
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline

    from as2rank import Cosinet, LexicalFeatures, OverlapRankRanker, PointwiseRanker, TransformerRanker

    return [WordOverlapRanker(), OverlapRankRanker(), Cosinet(random_state=3, epochs=3, batch_size=8),
            make_pipeline(LexicalFeatures(), PointwiseRanker(LogisticRegression(C=1.0, max_iter=1000))),
            TransformerRanker(random_state=1, n_threads=2), TransformerRanker(epochs=2, learning_rate=1e-4, lexical_prior=False)]


@pytest.mark.parametrize("index", range(6))
def test_store_keys_are_those_of_the_earlier_harness(common, index):
    est = small_estimators()[index]
    X = frame(["the cat is here", "a dog", "cats sleep"])
    y = np.array([1, 0, 0])
    X_test = frame(["where is it", "the cat sat"])
    assert common.cache_key(est, X, y) == reference_cache_key(est, X, y)
    assert common.scores_key(est, X, y, X_test) == reference_scores_key(est, X, y, X_test)
    eval_set = (X_test, np.array([0, 1]))
    assert common.scores_key(est, X, y, X_test, {"eval_set": eval_set}) == reference_scores_key(est, X, y, X_test, eval_set=eval_set)
    # Another row, another key.
    assert common.cache_key(est, X, np.array([0, 1, 0])) != common.cache_key(est, X, y)


def test_cached_only_reads_the_stores_and_computes_nothing(common, monkeypatch):
    X = frame(["the cat is here", "a dog", "cats sleep", "where"])
    y = np.array([1, 0, 0, 0])
    X_test = frame(["where is it", "the cat sat", "nothing"])
    scores, _ = common.fitted_scores(WordOverlapRanker(), X, y, X_test)
    monkeypatch.setattr(common, "CACHED_ONLY", True)
    again, model = common.fitted_scores(WordOverlapRanker(), X, y, X_test)
    assert model is None
    np.testing.assert_array_equal(again, scores)
    # A fit in the cache is read; scores that are not stored, and a fit that is not cached, are refused.
    assert common.fitted(WordOverlapRanker(), X, y) is not None
    with pytest.raises(common.NotStored, match="scores of WordOverlapRanker"):
        common.fitted_scores(WordOverlapRanker(), X, y, frame(["other rows"]))
    with pytest.raises(common.NotStored, match="the fit of WordOverlapRanker"):
        common.fitted(WordOverlapRanker(), X, np.array([0, 1, 0, 0]))


def test_the_library_table_names_what_the_library_has(common):
    # Every as2rank name the benchmarks use resolves, through the one table that follows the library's moves.
    from harness import library

    missing = []
    for name in library.NAMES:
        try:
            getattr(library, name)
        except ImportError:
            missing.append(name)
    assert not missing
    with pytest.raises(AttributeError, match="add it to NAMES"):
        library.NotAName


BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def test_no_experiment_imports_another_and_the_library_is_read_through_one_table():
    # An experiment is its configuration and a module of what is unique to it: what two of them share lives in the
    # harness, and the library's names are read through harness/library.py, the one place that follows its moves.
    scripts = sorted(BENCHMARKS.glob("*.py")) + sorted((BENCHMARKS / "studies").glob("*.py"))
    experiments = {p.stem for p in scripts}
    for path in scripts + sorted((BENCHMARKS / "harness").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            for name in names:
                assert name.split(".")[0] not in experiments, f"{path.name} imports {name}"
                if path.name != "library.py":
                    assert name == "as2rank" or not name.startswith("as2rank"), f"{path.name} imports {name}"


# Each saved run whose checks the configuration's [[checks]] reproduce, with the names its module gives them.
SAVED_CHECKS = ["cascade", "cascade-h100", "cascade_base", "cerberus-library", "cerberus-library-h200",
                "cerberus-library-mpnet-base", "cerberus-library-sample", "cerberus-library-sample-h200", "context",
                "context-h100", "context-library", "context-squad-seed0", "cpu_inference", "cpu_inference-avx2",
                "cpu_training-avx2", "scale", "selection-avx2", "serve", "speed", "speed-h100", "speed-h200"]


#: The saved runs of the studies whose acceptance checks are written as data (``[[checks]]``).
SAVED_STUDY_CHECKS = sorted(
    path.stem for path in (BENCHMARKS / "studies" / "results").glob("*.json")
    if (config := BENCHMARKS / "studies" / f"{path.stem.split('-')[0]}.toml").exists()
    and "[[checks]]" in config.read_text(encoding="utf-8"))


@pytest.mark.parametrize("page", SAVED_CHECKS + [f"studies/{page}" for page in SAVED_STUDY_CHECKS])
def test_checks_written_as_data_are_those_the_saved_runs_made(page, monkeypatch):
    # The generic checker, on each saved run, gives the acceptance checks that the run's script wrote.
    _toml()
    folder, _, page = page.rpartition("/")
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    monkeypatch.syspath_prepend(str(BENCHMARKS / folder))
    import importlib

    from harness.experiment import Experiment

    name = page.split("-")[0]
    module = importlib.import_module(name)
    exp = Experiment(module.__file__)
    res = json.loads((BENCHMARKS / folder / "results" / f"{page}.json").read_text())
    saved = res.pop("acceptance")
    made = module.checks(exp, res) if hasattr(module, "checks") else exp.checks(res)
    assert made == saved


def test_checks_as_data_loop_guard_name_and_fail(common):
    from harness.checks import evaluate

    specs = [{"for": "name, r in res.rows.items()", "if": "r.n > 0", "let": {"ratio": "r.a / r.b"},
              "check": "{{ name }}: a ≥ {{ bound }}× b", "measured": "{{ ratio|f('.2f') }}×", "pass": "ratio >= bound"},
             {"for": ["x in [1, 2]", "y in ['p', 'q']"], "each": [
                 {"check": "{{ x }}{{ y }}", "measured": "{{ [x, 3]|fs('.1f') }}", "pass": "x == 2"}]}]
    res = {"rows": {"one": {"n": 1, "a": 3.0, "b": 2.0}, "none": {"n": 0, "a": 1, "b": 0}, "two": {"n": 2, "a": 1.0, "b": 2.0}}}
    checks = evaluate(specs, {"res": res}, {"bound": "1 + 0.5"})
    assert checks[:2] == [{"check": "one: a ≥ 1.5× b", "measured": "1.50×", "pass": True},
                          {"check": "two: a ≥ 1.5× b", "measured": "0.50×", "pass": False}]
    assert [(c["check"], c["measured"], c["pass"]) for c in checks[2:]] == [
        ("1p", "1.0, 3.0", False), ("1q", "1.0, 3.0", False), ("2p", "2.0, 3.0", True), ("2q", "2.0, 3.0", True)]


def _toml():
    """Skip where neither ``tomllib`` (Python 3.11+) nor ``tomli`` (the bench extra before 3.11) is installed."""
    try:
        import tomllib  # noqa: F401
    except ModuleNotFoundError:
        pytest.importorskip("tomli")

"""The fit cache (``reuse_fit``): keyed by the content of the initial weights, and a hit says so."""

import json
import pickle

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from as2rank.transformer.cerberus import DistilledRanker  # noqa: E402
from as2rank.neural import fitcache  # noqa: E402
from as2rank.neural.models import resolve_model  # noqa: E402
from as2rank.digest import content_digest as directory_digest
from as2rank.neural.fitcache import FIT_CACHE, FitCache, source_digest, source_digests  # noqa: E402
from as2rank.transformer.ranker import TransformerRanker  # noqa: E402
from tests.test_transformer import MAX_LENGTH, synthetic, tiny_config, tokenizer  # noqa: E402,F401


@pytest.fixture(autouse=True)
def fresh_cache():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    FIT_CACHE.clear()
    yield
    FIT_CACHE.clear()
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def data():
    return synthetic(n_questions=6)


def save_encoder(path, tokenizer, seed):
    """A tiny random BERT and its tokenizer saved as a local model directory (overwriting ``path``)."""
    torch.manual_seed(seed)
    transformers.BertModel(tiny_config("bert", layers=2)).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return str(path)


def ranker(model, tokenizer=None, **params):
    defaults = dict(
        max_length=MAX_LENGTH, epochs=1, batch_size=8, learning_rate=1e-3, random_state=0, device="cpu",
        precision="fp32",
    )
    return TransformerRanker(model=model, tokenizer=tokenizer, **{**defaults, **params})


def test_overwritten_directory_retrains(tmp_path, tokenizer, data):
    X, y = data
    path = save_encoder(tmp_path / "enc", tokenizer, seed=0)
    first = ranker(path).fit(X, y)
    save_encoder(tmp_path / "enc", tokenizer, seed=1)  # other weights, same name
    second = ranker(path).fit(X, y)
    assert not np.allclose(first.predict(X), second.predict(X))
    assert FIT_CACHE.hits == 0 and len(FIT_CACHE) == 2
    assert first.fit_cache_hit_ is False and second.fit_cache_hit_ is False


def test_transfer_save_adapt_loop_retrains(tmp_path, tokenizer, data):
    """The issue's loop: a fine-tuned ranker saved to one directory, whose encoder is the next ``model=``."""
    X, y = data
    out = tmp_path / "transfer"
    ranker(tiny_config("bert", layers=2), tokenizer, random_state=1).fit(X, y).save_pretrained(out)
    adapted = ranker(str(out / "encoder")).fit(X, y)
    ranker(tiny_config("bert", layers=2), tokenizer, random_state=2).fit(X, y).save_pretrained(out)
    again = ranker(str(out / "encoder")).fit(X, y)
    assert not np.allclose(adapted.predict(X), again.predict(X))
    assert again.fit_cache_hit_ is False


def test_identical_fit_is_a_hit(tmp_path, tokenizer, data):
    X, y = data
    path = save_encoder(tmp_path / "enc", tokenizer, seed=0)
    first = ranker(path).fit(X, y)
    second = ranker(path).fit(X, y)
    assert second.fit_cache_hit_ is True and FIT_CACHE.hits == 1
    np.testing.assert_array_equal(first.predict(X), second.predict(X))
    assert ranker(path, batch_tokens=512).fit(X, y).fit_cache_hit_ is True  # an inference-only parameter
    # The flag belongs to each fit: it is not part of the cached state, and a training run clears it.
    assert "fit_cache_hit_" not in second._fitted_state()["attrs"]
    assert pickle.loads(pickle.dumps(second)).fit_cache_hit_ is True
    assert second.set_params(random_state=1).fit(X, y).fit_cache_hit_ is False
    assert second.set_params(random_state=0).fit(X, y).fit_cache_hit_ is True
    assert ranker(path, reuse_fit=False).fit(X, y).fit_cache_hit_ is False


def _edit_vocab(path):
    with open(path / "vocab.txt", "a") as f:
        f.write("extra\n")


def _edit_config(path):
    config = json.loads((path / "config.json").read_text())
    config["hidden_dropout_prob"] = 0.2
    (path / "config.json").write_text(json.dumps(config))


def _edit_tokenizer_config(path):
    config = json.loads((path / "tokenizer_config.json").read_text())
    config["do_lower_case"] = not config.get("do_lower_case", True)
    (path / "tokenizer_config.json").write_text(json.dumps(config))


def _add_pooling(path):
    (path / "1_Pooling").mkdir()
    (path / "1_Pooling" / "config.json").write_text(json.dumps({"pooling_mode_mean_tokens": True}))


@pytest.mark.parametrize("edit", [_edit_vocab, _edit_config, _edit_tokenizer_config, _add_pooling])
def test_any_file_of_the_directory_is_in_the_key(tmp_path, tokenizer, data, edit):
    X, y = data
    path = tmp_path / "enc"
    save_encoder(path, tokenizer, seed=0)
    before = directory_digest(path)
    ranker(str(path)).fit(X, y)
    edit(path)
    assert directory_digest(path) != before
    refit = ranker(str(path)).fit(X, y)
    assert FIT_CACHE.hits == 0 and refit.fit_cache_hit_ is False


def test_tokenizer_directory_is_in_the_key(tmp_path, tokenizer, data):
    X, y = data
    model = save_encoder(tmp_path / "enc", tokenizer, seed=0)
    tok_dir = tmp_path / "tok"
    tokenizer.save_pretrained(tok_dir)
    ranker(model, str(tok_dir)).fit(X, y)
    _edit_tokenizer_config(tok_dir)
    refit = ranker(model, str(tok_dir)).fit(X, y)
    assert FIT_CACHE.hits == 0 and refit.fit_cache_hit_ is False
    assert ranker(model, str(tok_dir)).fit(X, y).fit_cache_hit_ is True


def test_verbose_hit_says_so(tmp_path, tokenizer, data, capsys):
    X, y = data
    path = save_encoder(tmp_path / "enc", tokenizer, seed=0)
    ranker(path).fit(X, y)
    capsys.readouterr()
    ranker(path).fit(X, y)  # a quiet hit prints nothing
    assert capsys.readouterr() == ("", "")
    ranker(path, verbose=True).fit(X, y)  # verbose acts at prediction time: same key
    out, err = capsys.readouterr()
    lines = (out + err).strip().splitlines()
    assert len(lines) == 1
    assert "identical earlier fit" in lines[0] and "reuse_fit=False" in lines[0] and "FIT_CACHE.clear()" in lines[0]


def test_directory_changed_during_fit_is_not_stored(tmp_path, tokenizer, data, monkeypatch):
    X, y = data
    path = save_encoder(tmp_path / "enc", tokenizer, seed=0)
    load = TransformerRanker.make_module

    def load_then_overwrite(self, *args):
        module = load(self, *args)
        save_encoder(tmp_path / "enc", tokenizer, seed=1)
        return module

    monkeypatch.setattr(TransformerRanker, "make_module", load_then_overwrite)
    ranker(path).fit(X, y)
    assert len(FIT_CACHE) == 0


def test_names_resolve_to_content(tmp_path, tokenizer):
    # A name that is neither a directory nor a downloaded Hugging Face id: no digest, hence no reuse.
    assert source_digest("as2rank-tests/no-such-model") is None
    assert source_digests(tiny_config("bert"), "as2rank-tests/no-such-model") is None
    # Objects by content: equal configs agree, different ones differ; a directory named twice is read once.
    assert source_digest(tiny_config("bert")) == source_digest(tiny_config("bert"))
    assert source_digest(tiny_config("bert")) != source_digest(tiny_config("bert", layers=2))
    path = save_encoder(tmp_path / "enc", tokenizer, seed=0)
    assert source_digests(path, path) == (directory_digest(path), directory_digest(path))
    # The alias resolves as load_backbone resolves it.
    name, local = resolve_model("minilm-l6")
    if local:
        assert source_digest("minilm-l6") == directory_digest(name)


def test_hub_snapshot_is_hashed(tmp_path, tokenizer, monkeypatch):
    snapshot = save_encoder(tmp_path / "snapshot", tokenizer, seed=0)
    import huggingface_hub

    monkeypatch.setattr(huggingface_hub, "snapshot_download", lambda repo_id, local_files_only: snapshot)
    assert source_digest("some-org/some-model") == directory_digest(snapshot)


def test_distillation_key_holds_the_teachers_logits(tokenizer, data):
    """A teacher naming a column of X: the column's values are training targets, so they are in the key."""
    X, y = data
    X = X.assign(score=np.random.default_rng(0).normal(size=len(X)) + 2 * y)
    shuffled = X.assign(score=np.random.default_rng(1).permutation(X["score"].to_numpy()))

    def student():
        return DistilledRanker(
            model=tiny_config("bert", layers=2), tokenizer=tokenizer, teachers=["score"], kd_alpha=0.0,
            max_length=MAX_LENGTH, epochs=1, batch_size=8, learning_rate=1e-3, random_state=0, device="cpu",
            precision="fp32",
        )

    first = student().fit(X, y)
    second = student().fit(shuffled, y)
    assert not np.allclose(first.predict(X), second.predict(X))
    assert second.fit_cache_hit_ is False
    assert student().fit(X, y).fit_cache_hit_ is True


def test_cache_is_bounded_in_entries_and_bytes():
    def state(n):
        return {"state_dict": {"w": torch.zeros(n, dtype=torch.uint8)}}

    cache = FitCache(max_entries=3, max_bytes=100)
    cache.put("a", state(40))
    cache.put("b", state(40))
    cache.put("c", state(40))  # 120 bytes: the oldest goes
    assert list(cache._entries) == ["b", "c"] and cache.nbytes == 80
    cache.put("huge", state(101))  # larger than the bound: not stored, nothing evicted
    assert list(cache._entries) == ["b", "c"]
    cache.put("d", state(1))
    cache.put("e", state(1))  # four entries: the oldest goes
    assert list(cache._entries) == ["c", "d", "e"] and cache.nbytes == 42
    assert cache.get("c") is not None and cache.get("a") is None and (cache.hits, cache.misses) == (1, 1)
    cache.clear()
    assert len(cache) == 0 and cache.nbytes == 0
    assert FitCache(max_bytes=None).max_bytes is None
    assert fitcache.FIT_CACHE.max_bytes == 4 * 2**30

"""Helpers shared by the tests: paths to the development data in ``../shared/data`` (tests that need it skip
when it is absent), frames of questions, the ONNX exports of a test run (:class:`ExportMemo`), and a pickle
whose code, if it ever runs, leaves a mark (:class:`Payload`, :func:`no_code_runs`)."""

import contextlib
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

SHARED_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"


def reseal(path):
    """Seal a model directory again after a test edited it, as someone who rewrites the digests would: the
    load-time rules below the seal (classes, references, fitted values) are then what refuses it."""
    from as2rank.persistence.trust import seal

    seal(path)


def shared_path(*parts):
    path = SHARED_DATA.joinpath(*parts)
    if not path.exists():
        pytest.skip(f"{path} not available")
    return path


def wikiqa_path(split):
    return shared_path("wikiqa", f"WikiQA-{split}.tsv")


def assert_whole_questions(chunks, frame):
    """Each chunk ``(X, y)`` of a stream holds whole questions of ``frame``, and no question is in two chunks."""
    seen = set()
    for X, y in chunks:
        qids = set(X["qid"])
        assert not qids & seen
        seen |= qids
        assert (X.groupby("qid").size() == frame[frame["qid"].isin(qids)].groupby("qid").size()).all()
        assert len(y) == len(X)


def one_question(n=128, seed=5, words=None):
    """One question ("big") with ``n`` random candidates of 2-13 words, positions 0..n-1."""
    words = words or "the a of in is was who what when where capital city river wrote built tower".split()
    rng = np.random.default_rng(seed)
    return pd.DataFrame(
        {
            "qid": "big",
            "question": "who wrote hamlet",
            "candidate": [" ".join(rng.choice(words, int(rng.integers(2, 14)))) for _ in range(n)],
            "position": np.arange(n),
        }
    )


#: Attributes of a Hugging Face model and its config that saving or loading it sets, and that its forward pass does
#: not read: where it was read from, the class it was saved by, the dtype it was saved in (the dtype of every
#: weight is part of the digest).
_NOT_TRACED = ("name_or_path", "_name_or_path", "architectures", "dtype", "torch_dtype")


def export_key(module, inputs: dict):
    """What an ONNX export of ``module`` traced on ``inputs`` (a dict of tensors) depends on, as a digest: the
    class and scalar attributes of every submodule, the config of those that have one (attention implementation
    included), every parameter and buffer (names, dtypes, shapes and bytes) and every input; not what saving or
    loading a model notes on it (:data:`_NOT_TRACED`), nor an unset ``_use_kernels`` (no Hub kernels either
    way). Functions a submodule holds count by their qualified name; None where one is a lambda or a local
    function (a test's monkeypatch): such a module is never looked up."""
    import hashlib
    import json

    import torch

    digest = hashlib.blake2b(digest_size=20)

    def tensor(kind, name, value):
        value = value.detach().to("cpu").contiguous()
        digest.update(repr((kind, name, str(value.dtype), tuple(value.shape))).encode())
        digest.update(value.reshape(-1).view(torch.uint8).numpy().tobytes())

    for name, sub in module.named_modules():
        own = vars(sub)
        functions = {k: (getattr(v, "__module__", None), getattr(v, "__qualname__", "<?>"))
                     for k, v in own.items() if callable(v) and not isinstance(v, torch.nn.Module)}
        if any("<" in qualname for _, qualname in functions.values()):
            return None
        scalars = sorted((k, v) for k, v in own.items() if isinstance(v, (bool, int, float, str, type(None)))
                         and k not in _NOT_TRACED and not (k == "_use_kernels" and not v))
        digest.update(repr((name, type(sub).__module__, type(sub).__qualname__, scalars, sorted(functions.items())))
                      .encode())
        config = getattr(sub, "config", None)
        if config is not None and hasattr(config, "to_dict"):
            settings = {k: v for k, v in config.to_dict().items() if k not in _NOT_TRACED}
            digest.update(json.dumps(settings, sort_keys=True, default=repr).encode())
            digest.update(repr(getattr(config, "_attn_implementation", None)).encode())
    for name, value in module.named_parameters():
        tensor("parameter", name, value)
    for name, value in module.named_buffers():
        tensor("buffer", name, value)
    for name, value in inputs.items():
        tensor("input", name, value)
    return digest.hexdigest()


class ExportMemo:
    """ONNX exports of tiny models, each done once per test run: an export takes seconds, and the same module on
    the same inputs (the same :func:`export_key`) always gives the same graph (up to the source locations the
    exporter notes on its nodes), so a graph exported once is copied from ``folder`` instead. The test processes
    of one run (pytest-xdist workers) share ``folder``: a lock per graph lets one of them export it while the
    others wait for it. What runs around the export (the float32 check against the module, the int8 graph, the
    sessions, the saved graphs' digests) runs as it would."""

    def __init__(self, folder):
        from pathlib import Path

        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)

    def wrap(self, export):
        """``export(module, inputs, path)`` (it writes the graph to ``path``), remembered."""
        import os
        import shutil

        from filelock import FileLock

        def memoized(module, inputs, path, *args, **kwargs):
            key = export_key(module, inputs)
            if key is None:
                return export(module, inputs, path, *args, **kwargs)
            graph = self.folder / f"{key}.onnx"
            with FileLock(str(graph) + ".lock"):
                if not graph.exists():
                    out = export(module, inputs, path, *args, **kwargs)
                    shutil.copyfile(path, str(graph) + ".part")
                    os.replace(str(graph) + ".part", graph)
                    return out
            shutil.copyfile(graph, path)
            return None

        return memoized


class Payload:
    """Unpickling this writes ``"ran"`` to ``marker``: what a hostile pickle, under any name, would do."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (Path.write_text, (self.marker, "ran"))


@contextlib.contextmanager
def no_code_runs(marker: Path, source: str):
    """Fail when a :class:`Payload` of ``marker`` ran inside the block (``source``: what held it)."""
    marker.unlink(missing_ok=True)
    yield
    ran = marker.exists()
    marker.unlink(missing_ok=True)
    assert not ran, f"code from {source} ran"

"""``as2rank serve``: a saved model behind the HTTP reranking APIs that QA and RAG stacks already call.

:func:`~as2rank.serve.app.create_app` returns the ASGI app (FastAPI) for a fitted model or a saved model
directory: text-embeddings-inference's ``POST /rerank``, Cohere's ``POST /v1/rerank``, ``POST /answer``
(answer or abstain, a calibrated model), ``/health``, ``/info``, ``/metrics`` and the OpenAPI schema;
concurrent requests are batched by one inference worker (:mod:`as2rank.serve.batching`). ``as2rank serve PATH``
runs it under uvicorn (:mod:`as2rank.serve.command`). Needs the ``serve`` extra: ``pip install "as2rank[serve]"``.

``import as2rank`` does not import this package, and importing this package imports no web framework until
:func:`~as2rank.serve.app.create_app` is first used (the command line builds its parser from
:mod:`as2rank.serve.command`).
"""

from importlib import import_module

__all__ = ["ServedModel", "create_app", "load_served_model"]

_LAZY = {"create_app": "app", "ServedModel": "model", "load_served_model": "model"}


def __getattr__(name):
    if name in _LAZY:
        value = getattr(import_module(f".{_LAZY[name]}", __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'as2rank.serve' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(__all__))

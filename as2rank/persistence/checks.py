"""The files a model directory hands to other libraries, checked against each other before those libraries read
them (the docs page "Loading models you did not train").

The seal (:mod:`as2rank.persistence.trust`) proves that a file is the one saved, not that its writer meant well:
a resealed directory is its editor's own. So whatever a directory says is also checked against what it holds,
and every reference a saved format can make is refused, in whichever format it is made:

* **A checkpoint folder** (``encoder/``, a similarity prior's ``similarity/``; :func:`check_checkpoint`) holds
  only the files of :data:`CHECKPOINT_FILES` and a tokenizer's (:data:`TOKENIZER_FILES`): weights as
  ``model.safetensors`` (or its shards, named by an index that names nothing else), never a torch pickle, a
  PEFT adapter, a GGUF file or a chat template. Its ``config.json`` is of an encoder type transformers ships
  (:data:`ENCODER_MODEL_TYPES`), with no ``auto_map`` (remote code), no quantization, kernel or backbone option
  that would fetch from the Hub, an ``attn_implementation`` of :data:`ATTN_IMPLEMENTATIONS` only, and no field
  naming a file or a repository; every field of the type its class gives it (:func:`build_config`). Its weights
  hold exactly the tensors the config implies, of their shapes (read from the safetensors headers, against the
  network the config builds on PyTorch's meta device): none missing, which transformers would start at random,
  none unexpected.
* **A tokenizer** (in a checkpoint, or alone: a ZeroShotRanker's, a template step's; :func:`load_tokenizer`)
  has its ``tokenizer_config.json`` and ``tokenizer.json``, names a tokenizer class transformers ships and no
  file, has settings of the types encoding reads and a vocabulary of distinct ids; loaded, its vocabulary fits
  the embedding matrix (every token id, special ones included, is a row of it), and it tokenises probe texts as
  prediction does. A panic of the Rust tokenizer (a ``BaseException``, :func:`is_panic`) is a one-line error.
* **Safetensors files** (:func:`~as2rank.persistence.formats.safetensors_header`): a header of known dtypes and
  offsets inside the file, and no metadata but ``{"format": "pt"}``.
* **Configurations saved in** ``as2rank.json`` (:func:`check_config`, :func:`check_network_state`): the rules
  of ``config.json`` (the path transformers noted they were read from, ``_name_or_path``, is dropped), and the
  weights saved beside them hold every tensor they imply before a network is built from them.
* **int8 graphs** (``onnx/``; :func:`~as2rank.persistence.formats.check_onnx_folder`): ``int8-<i>.onnx`` files
  whose tensors, in every subgraph and function, hold their data (no external data, which names a file by path).
* **Parameters** (:func:`check_params`): each saved parameter a value its class accepts, as ``fit`` checks it.

Every refusal is a one-line ``ValueError`` naming the file. Nothing here downloads: every transformers call
passes ``local_files_only=True`` and ``trust_remote_code=False``.
"""

from __future__ import annotations

import copy
import re
from pathlib import Path

from .formats import FLOAT_DTYPES, check_onnx_folder, one_line, safetensors_header
from .trust import FOLDER_CHECKS, parse_json

__all__ = ["ATTN_IMPLEMENTATIONS", "CHECKPOINT_FILES", "ENCODER_MODEL_TYPES", "PROBE", "TOKENIZER_FILES",
           "build_config", "check_checkpoint", "check_config", "check_loaded_tokenizer", "check_network_state",
           "check_params", "check_references", "check_tokenizer_folder", "is_panic", "load_tokenizer",
           "one_line_errors"]

#: Files a checkpoint folder may hold besides its tokenizer's (and the shards of an index,
#: ``model-00001-of-00002.safetensors``).
CHECKPOINT_FILES = ("config.json", "model.safetensors", "model.safetensors.index.json", "1_Pooling/config.json")
#: Files a tokenizer folder may hold; ``tokenizer_config.json`` and ``tokenizer.json`` (the tokenizers backend)
#: or a SentencePiece model (the sentencepiece backend) are required.
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "added_tokens.json",
                   "vocab.txt", "vocab.json", "merges.txt")
#: SentencePiece models, accepted only in a folder whose ``tokenizer_config.json`` says ``"backend":
#: "sentencepiece"``.
_SENTENCEPIECE_FILES = ("spiece.model", "sentencepiece.bpe.model", "tokenizer.model")
_SHARD = re.compile(r"model-\d{5}-of-\d{5}\.safetensors")
#: Encoder types a saved ``config.json`` may name: text encoders that transformers ships, whose configurations
#: hold no sub-model, backbone or vision settings.
ENCODER_MODEL_TYPES = ("albert", "bert", "camembert", "convbert", "data2vec-text", "deberta", "deberta-v2",
                       "distilbert", "electra", "ernie", "flaubert", "funnel", "ibert", "megatron-bert", "mobilebert",
                       "modernbert", "mpnet", "rembert", "roberta", "roberta-prelayernorm", "roformer", "squeezebert",
                       "xlm", "xlm-roberta", "xlm-roberta-xl", "xmod")
#: Attention implementations a saved configuration may ask for: transformers' own. Any other value names a
#: kernel, which transformers would fetch from the Hugging Face Hub.
ATTN_IMPLEMENTATIONS = (None, "eager", "sdpa")
#: Fields that load code, fetch from the Hub, or set loading options, refused wherever they appear in a
#: configuration handed to transformers.
_FORBIDDEN_KEYS = frozenset((
    "auto_map", "trust_remote_code", "custom_pipelines", "quantization_config", "use_kernels", "kernel_config",
    "fusion_config", "backbone", "backbone_config", "backbone_kwargs", "use_pretrained_backbone", "use_timm_backbone",
    "tp_plan", "pp_plan", "base_model_tp_plan", "base_model_pp_plan", "distributed_config", "init_inputs",
    "revision", "code_revision", "cache_dir", "token", "use_auth_token", "proxies", "subfolder", "force_download",
    "gguf_file", "mistral_format", "tokenizer_type", "peft_config", "adapter_name"))
#: Fields whose value names a file, a folder or a repository (by their names' ends).
_REFERENCE_ENDS = ("_file", "_files", "_path", "_dir", "name_or_path")
_IMPLEMENTATION_KEYS = ("attn_implementation", "experts_implementation")
#: Objects whose keys are data (labels, tokens), not settings: their values are checked, their keys are not.
_DATA_KEYS = ("id2label", "label2id", "added_tokens_decoder")
#: What a loaded tokenizer must tokenise: words, punctuation, accents, CJK, digits, and a pair.
PROBE = ("Who wrote Hamlet? Übersicht, 中文 and 1.5%", "Shakespeare wrote it around 1600.")


def is_panic(exc) -> bool:
    """Whether ``exc`` is a panic of a Rust extension (tokenizers, safetensors): pyo3's ``PanicException``, a
    ``BaseException`` so that ``except Exception`` lets it through. Other ``BaseException`` kinds (an interrupt, an
    exit, a cancelled task) are not errors of the model, and go through as they are."""
    return not isinstance(exc, Exception) and type(exc).__name__ == "PanicException"


def one_line_errors(path, load_it):
    """``load_it()``, with what a damaged directory raises deep inside a third-party loader (transformers,
    tokenizers, safetensors, torch) as one ValueError naming the directory; a panic of a Rust library (a
    ``BaseException``, which no ``except Exception`` catches; :func:`is_panic`) too."""
    try:
        return load_it()
    except (ValueError, ImportError, FileNotFoundError) as exc:
        if "\n" not in str(exc):
            raise
        try:
            error = type(exc)(f"{path} is not a loadable as2rank model: {one_line(exc)}")
        except TypeError:  # an error type whose constructor takes more than a message
            error = ValueError(f"{path} is not a loadable as2rank model: {one_line(exc)}")
        raise error from None
    except RecursionError:
        raise ValueError(f"{path} is not a loadable as2rank model: its values nest too deeply.") from None
    except BaseException as exc:
        if not is_panic(exc):
            raise
        raise ValueError(f"{path} is not a loadable as2rank model ({type(exc).__name__}: {one_line(exc)}).") from None


def check_params(estimator, source, constraints=None) -> None:
    """An as2rank estimator's parameters, as loaded (saved, or passed to the loader), checked the way ``fit``
    checks them: a parameter of a resealed directory edited into a value the class does not accept is refused at
    load, in one line, not met at prediction as whatever error it causes there.

    Parameters
    ----------
    estimator : estimator
        Loaded. Not an as2rank estimator (scikit-learn's check their own): nothing to check.
    source : path
        Its ``as2rank.json``, for messages.
    constraints : dict, optional
        Check these entries of its class's table only (:func:`as2rank.params.validate_params`): a layout whose
        directory leaves out parameters that only ``fit`` reads passes the others. By default, every parameter
        and the rules across them, as the estimator's own validation runs them (:func:`as2rank.params.validated`).
    """
    from ..params import ParameterMixin, validate_params, validated

    if not isinstance(estimator, ParameterMixin):
        return
    try:
        if constraints is None:
            validated(lambda self: None)(estimator)
        else:
            validate_params(estimator, constraints)
    except (ValueError, TypeError) as exc:
        raise ValueError(f"{source}: the saved {type(estimator).__name__}'s parameters are not valid "
                         f"({one_line(exc)}); the model is damaged or was edited.") from None


def _read_json(file: Path) -> object:
    try:
        return parse_json(file.read_text(encoding="utf-8"), file)
    except (UnicodeDecodeError, ValueError) as exc:
        raise ValueError(f"{file} is not valid JSON ({one_line(exc)}); the model directory is damaged or was "
                         "edited.") from None


# ----------------------------------------------------------------------------------------------- configurations
def check_references(value, source, where="") -> None:
    """Refuse, at any depth of a JSON value handed to transformers, a field that loads code, fetches from the
    Hub or sets a loading option (``auto_map``, ``trust_remote_code``, ...), names a file, a folder or a
    repository (a non-empty ``*_file``, ``*_path``, ``*name_or_path``, ...), or asks for an attention
    implementation outside :data:`ATTN_IMPLEMENTATIONS`."""
    if isinstance(value, list):
        for i, item in enumerate(value):
            check_references(item, source, f"{where}[{i}]")
        return
    if not isinstance(value, dict):
        return
    for key, item in value.items():
        name = f"{where}.{key}" if where else str(key)
        bare = str(key).lstrip("_").removesuffix("_internal")
        why = None
        if bare in _FORBIDDEN_KEYS or key in _FORBIDDEN_KEYS:
            why = "would load code or fetch files, and is never part of a model saved by as2rank"
        elif bare.endswith(_REFERENCE_ENDS) and item not in (None, "", [], {}):
            why = "names a file, a folder or a repository, which loading never follows"
        elif bare in _IMPLEMENTATION_KEYS and not _allowed_implementation(item):
            why = (f"asks for {item!r}; only {', '.join(map(str, ATTN_IMPLEMENTATIONS[1:]))} or none are loaded (any "
                   "other value names a kernel that transformers would fetch from the Hugging Face Hub)")
        if why:
            raise ValueError(f"{source}: the field {name!r} {why}; the model is refused.")
        if key in _DATA_KEYS and isinstance(item, dict):
            for label, entry in item.items():
                check_references(entry, source, f"{name}[{label!r}]")
        else:
            check_references(item, source, name)


def _allowed_implementation(value) -> bool:
    if isinstance(value, dict):
        return all(_allowed_implementation(v) for v in value.values())
    return value in ATTN_IMPLEMENTATIONS


def check_config(config, source, *, saved_object=False) -> dict:
    """A transformers configuration as a dict (a ``config.json``, or one saved in ``as2rank.json``), checked:
    an object naming an encoder type of :data:`ENCODER_MODEL_TYPES`, and free of what :func:`check_references`
    refuses.

    Parameters
    ----------
    config : dict
    source : path
        The file it comes from, for messages.
    saved_object : bool, default=False
        It is a configuration object that as2rank saved in ``as2rank.json`` (``to_dict()``), which notes where it
        was read from (``_name_or_path``, informative only): that field is dropped, not refused.

    Returns
    -------
    dict
        The configuration (without ``_name_or_path`` and ``name_or_path`` where ``saved_object``).

    Raises
    ------
    ValueError
        One line naming ``source`` and the field.
    """
    if not isinstance(config, dict):
        raise ValueError(f"{source}: a transformers configuration must be an object.")
    if saved_object:
        config = {k: v for k, v in config.items() if k not in ("_name_or_path", "name_or_path")}
    model_type = config.get("model_type")
    if model_type not in ENCODER_MODEL_TYPES:
        raise ValueError(f"{source}: model_type {model_type!r} is not an encoder type as2rank loads "
                         f"({', '.join(ENCODER_MODEL_TYPES)}); the model is refused.")
    architectures = config.get("architectures")
    if architectures is not None and (not isinstance(architectures, list)
                                      or not all(isinstance(a, str) and a.isidentifier() for a in architectures)):
        raise ValueError(f"{source}: architectures must be a list of class names.")
    check_references(config, source)
    return config


def build_config(config: dict, source):
    """The transformers configuration object of a checked configuration dict (:func:`check_config`), each field
    of the type its class gives it by default (a number where a number belongs, a flag where a flag does):
    an encoder reads them at every forward pass, where a value of another type would fail.

    Raises
    ------
    ValueError
        One line naming ``source`` and the field.
    """
    from transformers import AutoConfig

    try:
        built = AutoConfig.for_model(**config)
        defaults = type(built)().to_dict()
    except Exception as exc:  # a value transformers refuses: a type, a range
        raise ValueError(f"{source} is not a valid {config['model_type']} configuration ({one_line(exc)}).") from None
    for key, value in config.items():
        default = defaults.get(key)
        if default is None or key in ("architectures", "dtype", "torch_dtype", "transformers_version"):
            continue
        kinds = (int, float) if type(default) is float else (type(default),)
        nullable = value is None and type(default) in (int, float, str)
        if not nullable and (isinstance(value, bool) != isinstance(default, bool) or not isinstance(value, kinds)):
            raise ValueError(f"{source}: the field {key!r} is {value!r}, not a {type(default).__name__} as in every "
                             f"{config['model_type']} configuration; the model is refused.")
    return built


# ----------------------------------------------------------------------------------------------- checkpoints
def _listing(folder: Path) -> set:
    return {p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file()}


def check_checkpoint(folder) -> dict:
    """Check a checkpoint folder of a model directory before transformers reads it (see the module docstring):
    its files, its ``config.json``, its weights against that config, its tokenizer's files, and its tokenizer
    loaded against the embedding matrix.

    Parameters
    ----------
    folder : pathlib.Path
        ``encoder/``, or a folder a similarity prior or a ContextExtractor names.

    Returns
    -------
    dict
        ``config`` (the checked ``config.json``), ``embedding_rows`` (rows of the input embedding matrix) and
        ``layers`` (``num_hidden_layers``, or None).

    Raises
    ------
    ValueError
        One line naming the first file or field refused.
    """
    folder = Path(folder)
    files = _listing(folder)
    check_tokenizer_folder(folder, extra=set(CHECKPOINT_FILES) | {f for f in files if _SHARD.fullmatch(f)})
    if "config.json" not in files:
        raise ValueError(f"{folder}: config.json is missing; the model directory is incomplete.")
    config = check_config(_read_json(folder / "config.json"), folder / "config.json")
    if "1_Pooling/config.json" in files:
        pooling = _read_json(folder / "1_Pooling" / "config.json")
        if not isinstance(pooling, dict) or not all(isinstance(v, (bool, int, str)) for v in pooling.values()):
            raise ValueError(f"{folder / '1_Pooling' / 'config.json'}: a pooling configuration must be an object of "
                             "flags.")
        check_references(pooling, folder / "1_Pooling" / "config.json")
    saved = _checkpoint_tensors(folder, files)
    _bound_layers(config, len(saved), folder / "config.json")
    expected, embeddings = _expected_tensors(build_config(config, folder / "config.json"), folder / "config.json")
    _compare(saved, expected, folder)
    rows = expected[embeddings][0][0] if embeddings in expected else None
    _load_tokenizer(folder, rows)
    layers = config.get("num_hidden_layers")
    return {"config": config, "embedding_rows": rows, "layers": layers if type(layers) is int else None}


def _checkpoint_tensors(folder: Path, files: set) -> dict:
    """``{name: (dtype, shape)}`` of the checkpoint's weights: ``model.safetensors``, or the shards its index
    names (plain shard names, every one present and every present one named)."""
    shards = {f for f in files if _SHARD.fullmatch(f)}
    if "model.safetensors.index.json" not in files:
        if shards or "model.safetensors" not in files:
            raise ValueError(f"{folder}: model.safetensors is missing; the model directory is incomplete.")
        return safetensors_header(folder / "model.safetensors")
    index_file = folder / "model.safetensors.index.json"
    index = _read_json(index_file)
    weight_map = index.get("weight_map") if isinstance(index, dict) else None
    if not isinstance(weight_map, dict) or set(index) - {"metadata", "weight_map"} or "model.safetensors" in files:
        raise ValueError(f"{index_file} is not an index of safetensors shards.")
    named = set(weight_map.values())
    if not all(isinstance(n, str) and _SHARD.fullmatch(n) for n in named) or named != shards:
        raise ValueError(f"{index_file} names other files than the shards beside it "
                         "(model-NNNNN-of-NNNNN.safetensors); an index may name nothing else, and is refused.")
    tensors = {}
    for shard in sorted(shards):
        for name, spec in safetensors_header(folder / shard).items():
            if name in tensors or weight_map.get(name) != shard:
                raise ValueError(f"{folder / shard}: the tensor {name!r} is not where {index_file.name} puts it.")
            tensors[name] = spec
    if set(weight_map) != set(tensors):
        raise ValueError(f"{index_file} names tensors that no shard holds.")
    return tensors


def _bound_layers(config: dict, count: int, source) -> None:
    """Refuse a configuration of more layers than ``count`` saved tensors could hold, before a network is built
    from it (building one of a million layers, even on the meta device, would not end)."""
    for key in ("num_hidden_layers", "num_layers", "n_layers", "num_hidden_groups"):
        value = config.get(key)
        if type(value) is int and value > count:
            raise ValueError(f"{source}: {key} is {value}, more layers than the {count} tensors saved with it could "
                             "hold; the configuration and the weights disagree.")


def check_network_state(config, state: dict, source) -> None:
    """A network saved as a transformers configuration and a state dict (a ZeroShotRanker's ``config_`` and
    ``model_``), checked before the network is built from the configuration: every tensor the configuration
    implies is in the state (under its name, or under ``encoder.`` for a cross-encoder's module) with its shape,
    so that building it allocates no more than the state holds. What the state holds beyond is refused when it
    is loaded (strictly)."""
    config = config.to_dict() if hasattr(config, "to_dict") else dict(config)
    shapes = {k: tuple(v.shape) for k, v in state.items()}
    _bound_layers(config, len(shapes), source)
    expected, _ = _expected_tensors(build_config(check_config(config, source, saved_object=True), source), source)
    for name, (shape, _, group) in expected.items():
        found = [shapes.get(n, shapes.get(f"encoder.{n}")) for n in group]
        if not any(f is not None for f in found):
            raise ValueError(f"{source}: the saved network lacks {name!r}, which its configuration describes; the "
                             "configuration and the weights disagree.")
        if shape not in found:
            raise ValueError(f"{source}: the saved weight {name!r} is not of the shape {list(shape)} its configuration "
                             "describes; the configuration and the weights disagree.")


def _expected_tensors(config, source) -> tuple:
    """The tensors a checkpoint of ``config`` holds, as transformers builds its network (on PyTorch's meta
    device: no memory, no weights), with the Auto class that loading picks; and the name of its input
    embedding matrix. Tied tensors (one tensor under two names) are listed once, under every name: see
    :func:`_compare`."""
    import torch
    from transformers import AutoModel, AutoModelForSequenceClassification

    from ..neural.backbone import is_sequence_classifier

    auto = AutoModelForSequenceClassification if is_sequence_classifier(config) else AutoModel
    try:
        with torch.device("meta"):
            network = auto.from_config(config, trust_remote_code=False)
    except Exception as exc:  # a configuration transformers cannot build
        raise ValueError(f"{source} does not describe a network transformers can build ({one_line(exc)}).") from None
    tensors, groups = {}, {}
    for name, tensor in network.state_dict(keep_vars=True).items():
        groups.setdefault(id(tensor), []).append(name)
        tensors[name] = (tuple(tensor.shape), tensor.is_floating_point(), id(tensor))
    names = {id(t): n for n, t in network.named_parameters(remove_duplicate=False)}
    embeddings = names.get(id(network.get_input_embeddings().weight))
    return {n: (shape, floating, tuple(groups[key])) for n, (shape, floating, key) in tensors.items()}, embeddings


def _compare(saved: dict, expected: dict, folder: Path) -> None:
    """Every tensor the config implies is saved (one name of a tied group suffices), of its shape and of a
    floating dtype where the network's is floating; and no other tensor is saved."""
    unexpected = sorted(set(saved) - set(expected))
    if unexpected:
        raise ValueError(f"{folder}: the weights hold {unexpected[0]!r}, which the config.json beside them does not "
                         f"describe ({len(unexpected)} such tensors); the configuration and the weights disagree.")
    for name, (shape, floating, group) in expected.items():
        if not any(n in saved for n in group):
            raise ValueError(f"{folder}: the weights lack {name!r}, which config.json describes (transformers would "
                             "start it at random); the configuration and the weights disagree.")
        if name in saved:
            dtype, got = saved[name]
            if got != shape or (dtype in FLOAT_DTYPES) != floating:
                raise ValueError(f"{folder}: the weight {name!r} is {dtype} {list(got)}, but config.json describes "
                                 f"{'a floating' if floating else 'an integer'} tensor of shape {list(shape)}.")


# ----------------------------------------------------------------------------------------------- tokenizers
def check_tokenizer_folder(folder, extra=frozenset()) -> set:
    """Check a tokenizer's files (see the module docstring) before transformers reads them: only
    :data:`TOKENIZER_FILES` (and ``extra``, the files of the checkpoint around it), the required ones present,
    no reference in ``tokenizer_config.json``, ``special_tokens_map.json`` or ``added_tokens.json``.

    Returns
    -------
    set
        The tokenizer's files, relative to ``folder``.
    """
    folder = Path(folder)
    files = _listing(folder)
    config_file = folder / "tokenizer_config.json"
    if "tokenizer_config.json" not in files:
        raise ValueError(f"{config_file} is missing; the tokenizer is incomplete (transformers would build one "
                         "without its vocabulary).")
    config = _read_json(config_file)
    if not isinstance(config, dict):
        raise ValueError(f"{config_file} must be an object.")
    check_references(config, config_file)
    _check_settings(config, config_file)
    backend = config.get("backend", "tokenizers")
    own = set(TOKENIZER_FILES) | (set(_SENTENCEPIECE_FILES) if backend == "sentencepiece" else set())
    unknown = sorted(files - own - set(extra))
    if unknown:
        what = ("a checkpoint (weights are model.safetensors, the configuration config.json, beside a tokenizer's "
                "files)") if extra else "a tokenizer"
        raise ValueError(f"{folder}: {unknown[0]} is not a file of {what} that as2rank saves; it is refused.")
    required = "tokenizer.json" if backend == "tokenizers" else None
    if backend == "sentencepiece":
        required = next((f for f in _SENTENCEPIECE_FILES if f in files), _SENTENCEPIECE_FILES[0])
    if required is None:
        raise ValueError(f"{config_file}: backend {backend!r} is not a tokenizer backend as2rank loads.")
    if required not in files:
        raise ValueError(f"{folder / required} is missing; the tokenizer is incomplete (transformers would build one "
                         "without its vocabulary).")
    name = config.get("tokenizer_class")
    if name is not None and not _shipped_tokenizer(name):
        raise ValueError(f"{config_file}: tokenizer_class {name!r} is not a tokenizer class transformers ships.")
    for file in ("special_tokens_map.json", "added_tokens.json", "tokenizer.json"):
        if file in files:
            value = _read_json(folder / file)
            if file == "special_tokens_map.json":
                check_references(value, folder / file)
            elif file == "added_tokens.json":
                _check_ids(value, folder / file)
            elif isinstance(value, dict) and isinstance(value.get("model"), dict):
                vocab = value["model"].get("vocab")
                if isinstance(vocab, dict):  # WordPiece, BPE, WordLevel: token -> id (Unigram lists its pieces)
                    _check_ids(vocab, folder / file)
    return files & own


def _check_ids(vocab, source) -> None:
    """A vocabulary maps tokens to distinct ids: the Rust tokenizer inverts it into a hash map, so a shared id
    would decode (and, for [UNK], load) differently from one load to the next."""
    ids = list(vocab.values()) if isinstance(vocab, dict) else None
    if ids is None or not all(type(i) is int and i >= 0 for i in ids) or len(set(ids)) != len(ids):
        raise ValueError(f"{source}: the vocabulary must map tokens to distinct ids; the model directory is damaged or "
                         "was edited.")


#: Types of the tokenizer settings as2rank reads (through the tokenizer) when it encodes text.
_SETTINGS = {"model_max_length": (int,), "max_length": (int, type(None)), "stride": (int,), "pad_token_type_id": (int,),
             "pad_to_multiple_of": (int, type(None)), "padding_side": ("left", "right"),
             "truncation_side": ("left", "right"), "clean_up_tokenization_spaces": (bool,), "do_lower_case": (bool,),
             "split_special_tokens": (bool,)}


def _check_settings(config: dict, source) -> None:
    """The tokenizer settings that encoding reads, of the types it reads them as; special tokens as text."""
    for key, value in config.items():
        accepted = _SETTINGS.get(key)
        if key in ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token"):
            accepted = (str, dict, type(None))
        if accepted is None:
            continue
        types = tuple(a for a in accepted if isinstance(a, type))
        ok = (value in accepted) if not types else (isinstance(value, types) and not (
            isinstance(value, bool) and bool not in types) and not (type(value) is int and value < 0))
        if not ok:
            raise ValueError(f"{source}: the setting {key!r} is {value!r}, not a value a tokenizer takes; the model is "
                             "refused.")


def _shipped_tokenizer(name) -> bool:
    import transformers
    from transformers import PreTrainedTokenizerBase

    if not isinstance(name, str) or not name.isidentifier():
        return False
    found = getattr(transformers, name, None) or getattr(transformers, name.removesuffix("Fast"), None)
    return isinstance(found, type) and issubclass(found, PreTrainedTokenizerBase)


def load_tokenizer(folder, rows=None):
    """The tokenizer saved in ``folder``, checked (:func:`check_tokenizer_folder`), loaded from local files only
    without remote code, and checked loaded (:func:`check_loaded_tokenizer`).

    Parameters
    ----------
    folder : pathlib.Path
    rows : int, optional
        Rows of the embedding matrix the tokenizer feeds, when known.
    """
    check_tokenizer_folder(folder)
    return _load_tokenizer(Path(folder), rows)


def _load_tokenizer(folder: Path, rows):
    from transformers import AutoTokenizer

    tokenizer = _no_panic(folder, lambda: AutoTokenizer.from_pretrained(str(folder), local_files_only=True,
                                                                        trust_remote_code=False))
    check_loaded_tokenizer(tokenizer, rows, folder)
    return tokenizer


def _no_panic(source, call):
    try:
        return call()
    except Exception as exc:
        raise ValueError(f"{source}: the tokenizer cannot be loaded ({type(exc).__name__}: {one_line(exc)}); the "
                         "model directory is damaged or was edited.") from None
    except BaseException as exc:
        if not is_panic(exc):
            raise
        raise ValueError(f"{source}: the tokenizer fails ({type(exc).__name__}: {one_line(exc)}); the model "
                         "directory is damaged or was edited.") from None


def check_loaded_tokenizer(tokenizer, rows, source) -> None:
    """A loaded tokenizer against the embedding matrix it feeds (``rows``, None: unknown): the size and every id
    of its vocabulary (special tokens included) within the rows, and a probe text (:data:`PROBE`) tokenised to ids
    within them (a panic of the Rust tokenizer included, as a one-line ValueError naming ``source``)."""
    from ..neural.tokens import encode_pairs

    probe = _no_panic(source, lambda: copy.deepcopy(tokenizer))  # calling a tokenizer sets its truncation state
    encoded = _no_panic(source, lambda: probe(*PROBE, truncation=True, max_length=64))
    alone = _no_panic(source, lambda: probe(list(PROBE)))
    pairs = _no_panic(source, lambda: encode_pairs(probe, PROBE[:1] * 2, PROBE[1:] * 2, max_length=16))
    size = _no_panic(source, lambda: len(probe))
    vocabulary = _no_panic(source, probe.get_vocab)
    ids = (list(encoded["input_ids"]) + [i for row in alone["input_ids"] for i in row]
           + [int(i) for i in pairs["input_ids"].ravel()] + [i for i in probe.all_special_ids if i is not None]
           + list(vocabulary.values()))
    if not ids or not all(type(i) is int and i >= 0 for i in ids):
        raise ValueError(f"{source}: the tokenizer gives invalid token ids; the model directory is damaged or was "
                         "edited.")
    if rows is not None and (size > rows or max(ids) >= rows):
        raise ValueError(f"{source}: the tokenizer has {size} tokens (ids up to {max(ids)}), but the embedding matrix "
                         f"has {rows} rows; the tokenizer and the weights disagree.")


FOLDER_CHECKS.update(model=check_checkpoint, tokenizer=load_tokenizer)

"""The file format of a model directory (as2rank.persistence.codec), below save and load: every kind of value an
estimator holds is written to ``as2rank.json`` and ``arrays.safetensors`` and read back as it was (type,
dtype, value), and what only pickling could save is refused. NumPy only: the file runs without torch."""

import json
import math
from pathlib import Path

import numpy as np
import pytest

from as2rank import WordOverlapRanker
from as2rank.persistence.codec import ARRAYS_FILE, FORMAT_VERSION, META_FILE, Reader, Writer, read_meta

VALUES = {
    "none": None, "flag": True, "text": "héllo", "count": 3, "ratio": 2.5, "infinite": float("-inf"),
    "np_float": np.float32(1.5), "np_int": np.int64(-7), "np_nan": np.float64("nan"), "np_str": np.str_("x"),
    "floats": np.arange(6.0).reshape(2, 3), "ints": np.array([3, 1, 2], dtype=np.int32),
    "big_endian": np.array([1.0, 2.0], dtype=">f8"), "words": np.array(["a", "bc"]),
    "objects": np.array(["a", "bc"], dtype=object), "items": [1, "two", (3, 4.0)], "pair": (1, None),
    "named": {"a": 1, "b": [2.0]}, "keyed": {(1, "x"): "tuple key", 2: "int key"}, "where": Path("a/b"),
}
#: What is read back differently from what was written, on purpose.
READ_AS = {"np_str": "x"}  # a NumPy string is a str


def _same(a, b):
    assert type(a) is type(b), (a, b)
    if isinstance(a, np.ndarray):
        assert a.dtype.newbyteorder("=") == b.dtype.newbyteorder("=") and a.shape == b.shape
        np.testing.assert_array_equal(a, b)
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b) and all(_same(x, y) is None for x, y in zip(a, b))
    elif isinstance(a, dict):
        assert list(a) == list(b) and all(_same(a[k], b[k]) is None for k in a)
    elif isinstance(a, (float, np.floating)) and math.isnan(a):
        assert math.isnan(b) and getattr(a, "dtype", None) == getattr(b, "dtype", None)
    else:
        assert a == b and getattr(a, "dtype", None) == getattr(b, "dtype", None)


def test_every_kind_of_value_is_read_back_as_written(tmp_path):
    writer = Writer(tmp_path, WordOverlapRanker())
    encoded = {k: writer.encode(v, f"fitted.{k}") for k, v in VALUES.items()}
    writer.write("WordOverlapRanker", {}, encoded)
    meta = read_meta(tmp_path)
    assert meta["format_version"] == FORMAT_VERSION and meta["class"] == "WordOverlapRanker"
    assert (tmp_path / ARRAYS_FILE).is_file()
    def not_json(constant):
        raise AssertionError(f"{constant} is not JSON")

    json.loads((tmp_path / META_FILE).read_text(encoding="utf-8"), parse_constant=not_json)  # strict JSON
    reader = Reader(tmp_path)
    for key, value in VALUES.items():
        _same(READ_AS.get(key, value), reader.decode(meta["fitted"][key]))


def test_what_only_pickling_saves_is_refused(tmp_path):
    writer = Writer(tmp_path, WordOverlapRanker())
    with pytest.raises(ValueError, match=r"fitted_thing_ is a object, which cannot be saved pickle-free"):
        writer.encode(object(), "fitted.fitted_thing_")
    with pytest.raises(ValueError, match="of dtype complex128"):
        writer.encode(np.zeros(2, dtype=complex), "fitted.z_")
    strict = Writer(tmp_path, WordOverlapRanker(), strict=True)  # a scikit-learn estimator's state: no estimator
    with pytest.raises(ValueError, match="is a WordOverlapRanker"):
        strict.encode(WordOverlapRanker(), "fitted.inner_")

"""Pickle-free model files: one directory format for every as2rank estimator.

:func:`save` writes any supported estimator or pipeline and :func:`load` (``as2rank.load``) reads any
directory back, whatever its class; the estimators' ``save_pretrained``/``from_pretrained``
(:class:`PersistenceMixin`) are the same per class. Nothing in a model directory is a pickle: loading reads
tensors, numbers and strings, and instantiates only as2rank classes and an allow-list of scikit-learn
estimators (:data:`~as2rank.persistence.SKLEARN_CLASSES`), looked up by name, never imported from a path
written in the file. A pickle file is loaded only when the caller asks (``load(path, allow_pickle=True)``).

The package's rooms:

* :mod:`~as2rank.persistence.api`, the face: :func:`save`, :func:`load`, :class:`PersistenceMixin` and
  :func:`write_model` (a directory written whole, sealed, then put in place in one step).
* :mod:`~as2rank.persistence.codec`, the file format: ``as2rank.json`` (:func:`read_meta`), and how values,
  arrays, weights and nested estimators are written to a directory and read back. The transformer family's
  layout (``as2rank.transformer.saving``) writes and reads through it.
* What loading trusts, and how it is enforced: :mod:`~as2rank.persistence.trust` (no link, no pickle and
  nothing read before the tree is checked; the SHA-256 of every file checked against the seal of
  ``as2rank.json``, which is required; no reference to a file outside the directory but packaged weights),
  ``as2rank.persistence.checks`` and ``as2rank.persistence.formats`` (every file handed to another
  library checked against the others: safetensors weights only, of the shapes their configuration implies,
  no remote code, no Hub option, no file named by a configuration or a graph) and
  :mod:`~as2rank.persistence.schema` (every fitted value checked).
* ``as2rank.persistence.registry``: the classes a directory may name, and the layouts of the families
  that save their own way; :mod:`~as2rank.persistence.card`: the model card, ``README.md``.

This package imports only NumPy: lexical models save and load without torch.
"""

from .api import PersistenceMixin, load, save, write_model
from .codec import FORMAT_VERSION, is_model_directory, read_meta
from .registry import SKLEARN_CLASSES
from .trust import check_model_path

__all__ = ["FORMAT_VERSION", "SKLEARN_CLASSES", "PersistenceMixin", "check_model_path", "is_model_directory", "load",
           "read_meta", "save", "write_model"]

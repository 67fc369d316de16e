"""The calibration backends, one module each (``model``, ``simulation``, ``torch``), and their registry
(:mod:`~ccc.calibration.compute.backends.registry`). Importing the package imports every module of
it (:func:`ccc.registry.import_submodules`), so that the registry is full."""

from ccc.registry import import_submodules

import_submodules(__name__, __path__)

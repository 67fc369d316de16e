"""Computing a calibration table: the measuring side of :mod:`ccc.calibration`.

- :mod:`~ccc.calibration.compute.imageset` — the calibration images (class-balanced selection, preprocessing);
- :mod:`~ccc.calibration.compute.engine` — cells, work units and their pixels (numpy only, no torch);
- :mod:`~ccc.calibration.compute.evaluator` — model predictions, one unit in-process;
- :mod:`~ccc.calibration.compute.backends` — where units run, one module per backend, each ending in
  ``register_backend`` (``registry.py``: the backends by name; ``calibrate(config)`` builds the one its
  config names): ``model`` (``ModelBackend`` on a :mod:`ccc.execution` executor, serial or Ray),
  ``simulation`` (draws results: tests, benchmarks), ``torch_render`` (the backend ``torch``: each unit
  rendered with :mod:`ccc.render_torch` and evaluated on one device; its bytes differ from the CPU
  path's);
- :mod:`~ccc.calibration.compute.workfolder` — resumable persistence of finished units;
- :mod:`~ccc.calibration.compute.job` — the job, the brute-force planner, ``compute_calibration``
  and the table assembly (the adaptive planner is :mod:`ccc.calibration.adaptive`).

:func:`ccc.calibration.run.calibrate` runs all of it from an image folder and a model. This package
imports nothing on its own, so Ray rendering workers that import ``engine`` do not load torch.
"""

DEFAULT_BACKEND = "model"
"""The calibration backend ``calibrate(config)`` uses unless its config names another (here, not in
the backends' registry, whose package imports every backend and torch with them: ``ccc-calibrate
--help`` names it without loading them)."""

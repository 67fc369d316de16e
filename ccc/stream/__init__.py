"""The plan stage of a CCC stream: what every sample will be, without pixels (pure, except that
:mod:`ccc.stream.sources` reads the image folder's index and image sizes).

- :mod:`ccc.stream.order`: the public generator's corruption order for a seed;
- :mod:`ccc.stream.paths`: severity paths through a pair's 21×21 accuracy grid;
- :mod:`ccc.stream.schedule`: the chain of pairs and the path step at every position;
- :mod:`ccc.stream.spec`: :class:`~ccc.stream.spec.StreamSpec`, :class:`~ccc.stream.spec.SampleSpec` and
  :func:`~ccc.stream.spec.resolve_stream_spec` (difficulty preset and overrides → spec);
- :mod:`ccc.stream.sources`: the source image folder's index and the plan's view of it;
- :mod:`ccc.stream.plan`: ``plan_sample(plan, index)``, the plan hash, and :func:`~ccc.stream.plan.plan_stream`
  (spec or definition + calibration table + image folder → plan);
- :mod:`ccc.stream.report`: the schedule as text and as a plot (``ccc-generate --dry-run``).

Nothing here renders, writes or reads shards (:mod:`ccc.render`, :mod:`ccc.shards`, :mod:`ccc.load`).
"""

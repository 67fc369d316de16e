"""The write stage: CCC samples as WebDataset tar shards, IO only.

- :mod:`ccc.shards.record`: the sample schema (member names, the ``info`` text, sample keys, shard
  file names) — the only module that knows them;
- :mod:`ccc.shards.writer`: writing a shard atomically with fixed tar headers;
- :mod:`ccc.shards.errors`: :class:`~ccc.shards.errors.ShardReadError`, raised by the reader and
  the schema alike;
- :mod:`ccc.shards.reader`: reading shards member by member (local, ``pipe:``, URLs), hardened
  against damaged files: :func:`~ccc.shards.location.open_shard` (opening a location),
  header parsing, grouping members into samples;
- :mod:`ccc.shards.remote`: ``http(s)://`` shards read with retries and resumption at the byte
  (urllib3), a file replaced on the server refused;
- :mod:`ccc.shards.published`: the 27 published CCC streams by name (``published:<name>``);
- :mod:`ccc.shards.shard_cache`: a local copy of each remote shard once read (``open_stream(cache=)``);
- :mod:`ccc.shards.mirror`: ``ccc-mirror``'s library (parallel, resumable, checked local copies);
- :mod:`ccc.shards.manifest`: the run folder's ``manifest.json``;
- :mod:`ccc.shards.verify`: checking a run folder's shards against its manifest.

Nothing here reads the calibration table or plans a stream; the run-folder driver is
:mod:`ccc.generate`, the reading API :mod:`ccc.load`.
"""

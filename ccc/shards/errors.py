"""The error of reading shard bytes, shared by the tar reader and the sample schema.

:mod:`ccc.shards.reader` raises it for a file that is not a readable tar, :mod:`ccc.shards.record`
for a ``json`` member beyond the reader's limits; both import it from here, so the schema never
imports the reader.
"""

from __future__ import annotations

__all__ = ["ShardReadError"]


class ShardReadError(ValueError):
    """A shard cannot be read: missing, truncated, damaged, or not a tar; the message names the shard and sample."""

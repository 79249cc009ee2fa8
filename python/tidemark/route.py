"""Routing Arrow data to partitions: keyed hash, round-robin, single, broadcast.

A router computes one partition id per row in one vectorised pass in Rust, and
:meth:`Router.route` cuts a batch into one sub-batch per partition (rows keep their
order inside each partition).

Two hashes, both stable across processes, machines and releases:

* ``hash="xxh3"`` (default): xxh3-64 of tidemark's canonical key encoding, so a key
  routes the same whatever its Arrow width (``int32`` / ``int64``, ``string`` /
  ``large_string``) and the same as the Python value (:meth:`Router.partition_of`).
* ``hash="spark"``: exactly Spark's ``HashPartitioning`` (Murmur3_x86_32, seed 42,
  ``pmod``): every row gets the partition ``df.repartition(n, *keys)`` gives it.

>>> import pyarrow as pa, tidemark as tm
>>> batch = pa.record_batch({"device": ["a", "b", "a"], "v": [1, 2, 3]})
>>> r = tm.HashRouter(4, "device")
>>> ids = r.partition_ids(batch).to_pylist()
>>> ids[0] == ids[2]
True
>>> sum(s.num_rows for s in r.route(batch))
3
>>> tm.HashRouter(8, "device", hash="spark").partition_ids(batch).to_pylist()
[2, 1, 2]
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pyarrow as pa

from tidemark import _native
from tidemark._arrow import ArrowData, as_tabular
from tidemark.errors import ConfigError

SYSTEM_FIELDS: dict[str, str] = {
    "_PARTITION": "partition",
    "_OFFSET": "offset",
    "_TIMESTAMP": "timestamp",
    "_EVENT_TIME": "(the event_time column)",
}
"""System fields usable as routing keys and the columns they stand for (Kafka source
columns as Spark's Kafka reader names them; ``_EVENT_TIME`` needs ``event_time=``)."""


class Router:
    """Routes Arrow batches to ``num_partitions`` partitions.

    Build one with :class:`HashRouter` (keyed) or the class methods
    :meth:`round_robin`, :meth:`single` and :meth:`broadcast`.
    """

    _inner: _native.Router

    def __init__(
        self,
        num_partitions: int,
        strategy: str,
        keys: str | Sequence[str] | None = None,
        *,
        hash: str = "xxh3",
        event_time: str | None = None,
    ) -> None:
        if not isinstance(num_partitions, int) or isinstance(num_partitions, bool):
            raise ConfigError(f"num_partitions must be an int >= 1, got {num_partitions!r}")
        if num_partitions < 1:  # the core names the range; a negative int cannot reach it
            raise ConfigError(f"num_partitions must be an int >= 1, got {num_partitions}")
        key_list = [keys] if isinstance(keys, str) else (list(keys) if keys else None)
        self._inner = _native.Router(num_partitions, strategy, key_list, hash, event_time)
        self.strategy = strategy
        self.hash = hash if strategy == "hash" else None

    @classmethod
    def round_robin(cls, num_partitions: int) -> Router:
        """Rows in turn over the partitions (stateless work, or the partial aggregates
        of a global aggregate); the turn continues across batches."""
        return cls(num_partitions, "round_robin")

    @classmethod
    def single(cls) -> Router:
        """Every row to partition 0."""
        return cls(1, "single")

    @classmethod
    def broadcast(cls, num_partitions: int) -> Router:
        """Every row to every partition (a small replicated table); no copies."""
        return cls(num_partitions, "broadcast")

    @property
    def num_partitions(self) -> int:
        """Number of partitions."""
        return self._inner.num_partitions

    @property
    def key_columns(self) -> list[str]:
        """The columns rows are hashed on (system fields resolved to column names)."""
        return self._inner.key_columns

    def partition_ids(self, data: ArrowData) -> pa.Int32Array:
        """The partition of every row, as an ``int32`` array (not for broadcast)."""
        return self._inner.partition_ids(as_tabular(data))

    def route(self, data: ArrowData) -> list[pa.RecordBatch]:
        """One RecordBatch per partition (index = partition id; empty where no rows)."""
        return self._inner.route(as_tabular(data))

    def partition_of(self, key: Any) -> int:
        """The partition of one key given as Python values (``"a"``, ``7``, ``("eu", 7)``);
        ``hash="xxh3"`` only."""
        n = len(self.key_columns)
        arity = len(key) if isinstance(key, tuple) else 1
        if n and arity != n:
            # A key of another arity encodes differently: a partition, but not its rows'.
            raise ConfigError(
                f"partition_of: this router routes on {n} key column(s) "
                f"({', '.join(self.key_columns)}); give "
                + ("one value" if n == 1 else f"a tuple of {n} values")
                + f", got {key!r}"
            )
        return self._inner.partition_of(key)

    def __repr__(self) -> str:
        keys = f", keys={self.key_columns!r}, hash={self.hash!r}" if self.key_columns else ""
        return f"Router({self.num_partitions}, {self.strategy!r}{keys})"


class HashRouter(Router):
    """Keyed routing: rows with equal keys go to the same partition.

    Args:
        num_partitions: Number of partitions (>= 1).
        keys: Key column name(s); integer, float, boolean, date, timestamp,
            string/large_string, binary and dictionary columns; nulls are a key of
            their own (``xxh3``) or leave the hash unchanged (``spark``, as Spark does).
            System fields ``_PARTITION``, ``_OFFSET``, ``_TIMESTAMP`` and ``_EVENT_TIME``
            (see :data:`SYSTEM_FIELDS`) are accepted.
        hash: ``"xxh3"`` (default) or ``"spark"`` (same partitions as
            ``df.repartition(num_partitions, *keys)``).
        event_time: The column ``_EVENT_TIME`` stands for.

    Raises:
        ConfigError: no keys, ``num_partitions < 1``, an unknown hash.
        MissingColumnError: (at the first batch) a key column is missing.
    """

    def __init__(
        self,
        num_partitions: int,
        keys: str | Sequence[str],
        hash: str = "xxh3",
        *,
        event_time: str | None = None,
    ) -> None:
        super().__init__(num_partitions, "hash", keys, hash=hash, event_time=event_time)
